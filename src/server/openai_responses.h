#pragma once
// POST /v1/responses, OpenAI's Responses API, stateless, over the chat path:
// input (a string or items: messages, function_call, function_call_output),
// instructions, function tools, tool_choice, max_output_tokens, temperature,
// top_p, text.format (through the constrained decoder), parallel_tool_calls,
// stream. store: true and previous_response_id are refused by name: nothing
// is stored. The chat outcome comes back as output items (reasoning, message,
// function_call) and, streaming, as the documented response.* events.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/responses.h"

namespace nanoserve::server {

std::variant<nlohmann::json, ApiError> responses_to_chat(std::string_view body);

// The response object from the chat choice.
nlohmann::json responses_object(const std::string& id, const std::string& model, int64_t created,
                                const ChoiceResult& choice, const Usage& usage);

class ResponsesStream {
 public:
  ResponsesStream(std::string id, std::string model, int64_t created)
      : id_(std::move(id)), model_(std::move(model)), created_(created) {}
  const std::string& id() const { return id_; }
  int64_t created() const { return created_; }
  std::string start();
  std::string part(const ChunkPart& part);
  // `final`: the whole response (responses_object), for response.completed.
  std::string finish(const nlohmann::json& final);

 private:
  std::string ev(const char* type, nlohmann::json data);
  std::string close_item();
  std::string id_, model_;
  int64_t created_;
  int seq_ = 0;
  int item_ = -1;  // output index of the open item
  enum class Open { kNone, kReasoning, kText, kCall } open_ = Open::kNone;
  std::string text_;     // of the open item
  nlohmann::json call_;  // the open function_call item
};

}  // namespace nanoserve::server
