#pragma once
// POST /v1/messages, Anthropic's Messages API, over the chat path: the body is
// checked and turned into a chat request (system, messages with text /
// tool_use / tool_result blocks, tools, tool_choice, max_tokens,
// stop_sequences, temperature, top_p, top_k, stream), and the chat outcome is
// turned back into Anthropic's message, stream events and error shape.
//
//   message:  {"id": "msg_...", "type": "message", "role": "assistant", "model", "content": [
//              {"type": "text", "text"} | {"type": "tool_use", "id", "name", "input"}],
//              "stop_reason": end_turn | max_tokens | stop_sequence | tool_use,
//              "stop_sequence", "usage": {"input_tokens", "output_tokens"}}
//   stream:   message_start, (content_block_start, content_block_delta*, content_block_stop)*,
//             message_delta {stop_reason, stop_sequence, usage}, message_stop
//   error:    {"type": "error", "error": {"type", "message"}}

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/responses.h"

namespace nanoserve::server {

// The chat request body the Messages body asks for, or the error (OpenAI shape; see below).
std::variant<nlohmann::json, ApiError> anthropic_to_chat(std::string_view body);

// An error body in Anthropic's shape, from our ApiError.
std::string anthropic_error_body(const ApiError& e);
// The same from an OpenAI-shaped error body (what the chat path answered).
std::string anthropic_error_from_openai(int status, const std::string& openai_body);

// stop_reason from the chat finish and the stop string that ended it.
const char* anthropic_stop_reason(FinishReason finish, bool tool_calls, const std::string& stop_string);

// The non-streaming message from the chat choice.
nlohmann::json anthropic_message(const std::string& id, const std::string& model, const ChoiceResult& choice,
                                 const std::string& stop_string, const Usage& usage);

// Streaming: turns each chat chunk part into Anthropic's events ("event: NAME\ndata: JSON\n\n").
class AnthropicStream {
 public:
  AnthropicStream(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  const std::string& id() const { return id_; }
  std::string start(int64_t input_tokens);
  std::string part(const ChunkPart& part);
  std::string finish(FinishReason finish, const std::string& stop_string, int64_t output_tokens);

 private:
  std::string close_block();
  std::string id_, model_;
  int block_ = -1;  // index of the open block, -1: none
  bool block_is_text_ = false;
  int tool_index_ = -1;  // the chat call index of the open tool_use block
  bool any_tool_ = false;
};

}  // namespace nanoserve::server
