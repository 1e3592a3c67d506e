#pragma once
// The OpenAI request bodies, parsed and validated into plain structs.
//
// Parsing checks everything that can be checked without the tokenizer: JSON
// syntax, field types, ranges, finiteness, the model name, stop-string limits.
// What needs token counts (context length) is checked by check_context_length
// once the prompt is encoded.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "engine/token_constraint.h"
#include "server/api_error.h"
#include "server/response_format.h"
#include "server/sampling_defaults.h"
#include "server/tool_protocol.h"
#include "template/chat_template.h"

namespace nanoserve::server {

// Bounds on request fields that the OpenAI spec leaves open. docs/server.md lists them.
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 256;
inline constexpr int kMaxTopLogprobs = 20;
inline constexpr size_t kMaxPrompts = 256;  // completions: entries in a batched prompt
inline constexpr size_t kMaxMessages = 4096;

struct ProtocolLimits {
  std::string served_model_name;
  std::vector<std::string> served_model_aliases;  // --served-model-name's other names: answered too
  SamplingDefaults sampling_defaults;             // --generation-config: for the fields a request omits
  int64_t max_model_len = 2048;
  int max_num_seqs = 256;
  int64_t vocab_size = 0;  // token-id prompts must lie in [0, vocab_size)
};

// The chat template's message (role: system | user | assistant | tool), not a copy.
using ChatMessage = nanoserve::ChatMessage;

// The chat-template fields of a chat or tokenize request (docs/chat_template.md).
struct ChatTemplateRequest {
  bool add_generation_prompt = true;
  std::optional<std::string> chat_template;  // the request's own template, rendered instead of the model's
  std::optional<nlohmann::ordered_json> kwargs;  // chat_template_kwargs (an object), key order as sent
  // The messages as the template sees them when some carry tool parts (tool_calls, tool_call_id,
  // name); unset: {"role", "content"} of each ChatMessage.
  std::optional<nlohmann::ordered_json> messages;
  std::optional<nlohmann::ordered_json> tools;  // the template's `tools`
};

// One completions prompt: text to encode, or token ids given directly.
using Prompt = std::variant<std::string, std::vector<int32_t>>;

// Sampling as the engine sees it. Defaults follow the OpenAI API.
enum class Endpoint { kChat, kCompletion };

struct GenerateRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  std::vector<ChatMessage> messages;  // chat
  ChatTemplateRequest chat_template;  // chat
  std::vector<Prompt> prompts;        // completions
  // The sampler's and the stop checker's fields, parsed straight into the
  // engine's type and checked once, by SamplingParams::validate (a 400 naming
  // the field); max_tokens there is the request's, resolved by the Api against
  // the context (unset here: up to the context length).
  SamplingParams params;
  std::optional<int64_t> max_tokens;  // completions: 16 when unset (check_context_length)
  bool echo = false;                  // completions: the prompt's text (and logprobs) before the output
  // vLLM's prompt_logprobs as asked (the response's "prompt_logprobs"); the engine's
  // params.prompt_logprobs may be set by echo with logprobs alone.
  std::optional<int32_t> prompt_logprobs;
  int n = 1;
  int best_of = 0;  // 0: not given (n); else >= n candidates, the n most likely returned
  bool stream = false;
  bool include_usage = false;               // stream_options.include_usage
  std::vector<std::string> unknown_fields;  // top-level fields no endpoint reads: ignored, counted
  ResponseFormat response_format;
  ToolRequest tools;  // chat
};

// A parse result: the request, or the error to return.
template <typename T>
using Parsed = std::variant<T, ApiError>;

Parsed<GenerateRequest> parse_chat_request(std::string_view body, const ProtocolLimits& limits);
Parsed<GenerateRequest> parse_completion_request(std::string_view body, const ProtocolLimits& limits);

// POST /tokenize: {"model"?, "prompt": str} or {"model"?, "messages": [...]}, optional add_special_tokens.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::vector<ChatMessage> messages;
  bool add_special_tokens = true;
  ChatTemplateRequest chat_template;  // messages: add_generation_prompt, chat_template, chat_template_kwargs
};
Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body, const ProtocolLimits& limits);

// POST /detokenize: {"model"?, "tokens": [int]}.
struct DetokenizeRequest {
  std::vector<int32_t> tokens;
};
Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ProtocolLimits& limits);

// Completions without max_tokens generate at most this many tokens, as OpenAI and vLLM do.
inline constexpr int64_t kDefaultCompletionMaxTokens = 16;

// The prompt plus the tokens to generate must fit the context. Returns the
// effective max_tokens: the request's; unset, what is left of the context
// (chat) or the least of that and kDefaultCompletionMaxTokens (completions).
// The error names the endpoint's input: `messages` for chat, `prompt` for completions.
Parsed<int64_t> check_context_length(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                     int64_t max_model_len, Endpoint endpoint = Endpoint::kChat);

}  // namespace nanoserve::server
