#pragma once
// OpenAI response bodies and stream chunks, built from plain values.
//
//   chat:        {"id","object":"chat.completion","created","model","choices":[{"index","message":
//                 {"role","content"},"logprobs","finish_reason"}],"usage"}
//   chat chunk:  {"object":"chat.completion.chunk", "choices":[{"index","delta":{"role"?,"content"?},...}]}
//   completions: {"object":"text_completion","choices":[{"index","text","logprobs","finish_reason"}]}
//   SSE:         "data: <json>\n\n" ... "data: [DONE]\n\n"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/protocol.h"
#include "server/request_stream.h"

namespace nanoserve::server {

// Text of one token, for logprobs (may hold a partial UTF-8 sequence).
using TokenTextFn = std::function<std::string(int32_t)>;

struct LogprobItem {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
  bool none = false;  // echo's first prompt token: no logprob (null, and null alternatives)
};

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
};

struct ChoiceResult {
  int index = 0;
  std::string text;  // chat: the content
  FinishReason finish = FinishReason::kNone;
  bool with_logprobs = false;
  std::vector<LogprobItem> logprobs;
  std::string reasoning;              // chat: reasoning_content (--reasoning-parser), when not empty
  nlohmann::json tool_calls;          // chat: the message's tool_calls (an array), or null
  nlohmann::json function_call;       // chat, legacy functions: the message's function_call, or null
  const char* finish_name = nullptr;  // overrides finish: "tool_calls", "function_call"
  // vLLM's prompt_logprobs (when asked): per choice on completions, top level on chat. Null otherwise.
  nlohmann::json prompt_logprobs;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

nlohmann::json usage_json(const Usage& usage);

// finish_reason as OpenAI spells it; null while running.
nlohmann::json finish_reason_json(FinishReason reason);

// chat: {"content": [{"token","logprob","bytes","top_logprobs":[...]}]}
nlohmann::json chat_logprobs_json(const std::vector<LogprobItem>& items, const TokenTextFn& token_text);
// completions: {"tokens","token_logprobs","top_logprobs","text_offset"}; offsets start at `text_offset`.
nlohmann::json completion_logprobs_json(const std::vector<LogprobItem>& items, const TokenTextFn& token_text,
                                        int64_t text_offset);

// The whole non-streaming response.
nlohmann::json response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             const Usage& usage, const TokenTextFn& token_text);

// One stream chunk for one choice. `first` adds the assistant role (chat).
// `logprobs` may be empty when none were asked for (then "logprobs": null).
// `text_offset` is where this chunk's text starts within the choice (completions logprobs).
struct ChunkPart {
  int index = 0;
  bool first = false;
  std::string text;
  std::string reasoning;              // chat: reasoning_content delta
  nlohmann::json tool_calls;          // chat: tool_calls delta entries (an array), or null
  nlohmann::json function_call;       // chat, legacy functions: the function_call delta, or null
  const char* finish_name = nullptr;  // overrides finish
  FinishReason finish = FinishReason::kNone;
  bool with_logprobs = false;
  std::vector<LogprobItem> logprobs;
  int64_t text_offset = 0;
};
nlohmann::json chunk_json(const ResponseMeta& meta, const ChunkPart& part, bool include_usage,
                          const TokenTextFn& token_text);
// The last chunk of a stream with include_usage: empty choices, usage set.
nlohmann::json usage_chunk_json(const ResponseMeta& meta, const Usage& usage);

std::string sse_event(const nlohmann::json& j);  // "data: <json>\n\n"
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace nanoserve::server
