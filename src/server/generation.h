#pragma once
// One generation request in flight on an HTTP thread: collects the events of
// its choices and turns them into either SSE chunks or one final response.
// It is transport-free: the HTTP layer calls poll() and writes what it gets.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "server/anthropic.h"
#include "server/api_error.h"
#include "server/engine_loop.h"
#include "server/openai_responses.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/responses.h"
#include "server/tool_parser.h"

namespace nanoserve::server {

// How a chat choice's text is shaped into the message: reasoning split off, tool calls parsed.
struct OutputShape {
  ToolFormat tool_format = ToolFormat::kNone;  // kNone: the text is content
  bool legacy_functions = false;               // calls answered as function_call
  bool reasoning = false;                      // --reasoning-parser
  std::string prompt_tail;                     // the rendered prompt's end (a thought opened there?)
  std::function<std::string()> new_call_id;
  // Each prompt's ids, by prompt index, when the output shows the prompt: completions' echo (its text
  // first, and with logprobs its tokens' logprobs, the first null) and prompt_logprobs.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // with echo: each prompt's text
  bool prompt_logprobs = false;         // the response carries vLLM's "prompt_logprobs"
};

class GenerationJob {
 public:
  // `prompt_tokens` is summed over the request's prompts, for usage. The handle holds
  // max(n, best_of) choices per prompt, prompt by prompt; with best_of > n the n with the highest
  // cumulative logprob of each prompt are returned (the handle's choices must carry logprobs).
  GenerationJob(EngineLoop& loop, EngineLoop::Handle handle, ResponseMeta meta,
                const GenerateRequest& request, int64_t prompt_tokens, TokenTextFn token_text,
                OutputShape shape = {});
  ~GenerationJob();  // aborts what is unfinished
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  bool streaming() const { return stream_; }
  // For the request log: the response's id and the usage so far.
  const std::string& request_id() const { return meta_.id; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }

  // Waits up to `timeout` for events and processes them. When streaming,
  // appends the SSE text to send (the first call also sends the role chunks).
  // Returns true once the request is complete (and, streaming, [DONE] appended).
  bool poll(std::string* sse_out, std::chrono::milliseconds timeout);

  // `on_ready` runs on the engine thread whenever new events may be ready for poll(); it must be
  // cheap (post a wake-up). Cleared when the job is destroyed.
  void set_on_ready(std::function<void()> on_ready);

  // After poll() returned true, non-streaming: the response body, or the error.
  int final_status() const { return error_ ? error_->http_status : 200; }
  std::string final_body() const;

  // Answer in Anthropic's Messages shape (POST /v1/messages) instead of OpenAI's chat shape.
  void set_anthropic(const std::string& id) { anthropic_.emplace(id, meta_.model); }
  // Answer in the Responses API's shape (POST /v1/responses).
  void set_responses(const std::string& id) { responses_.emplace(id, meta_.model, meta_.created); }

  // The client is gone: abort every unfinished choice (idempotent).
  void abort();

 private:
  struct Choice {
    std::string text;
    std::vector<LogprobItem> logprobs;
    FinishReason finish = FinishReason::kNone;
    int64_t text_offset = 0;          // bytes of text streamed so far
    double cumulative_logprob = 0.0;  // of its tokens, under the model's raw distribution (best_of)
    std::string reasoning;
    std::string stop_string;  // the stop string that finished it
    std::optional<ReasoningParser> reasoning_parser;
    std::optional<ToolCallParser> tool_parser;
    bool started = false;            // its first event was seen (echo and prompt scores go first)
    nlohmann::json prompt_logprobs;  // vLLM's shape, when asked for
  };
  // The choice's first event: the echoed prompt and its scores, before any token.
  void start_choice(size_t index, TokenEvent& ev, ChunkPart* part);
  // Routes new text of choice `c` through its parsers into the choice (or, streaming, the part).
  void shape(Choice& c, std::string_view text, bool final, ChunkPart* part);
  nlohmann::json call_deltas_json(const std::vector<ToolCallDelta>& deltas) const;
  const char* finish_name(const Choice& c, FinishReason finish) const;

  EngineLoop& loop_;
  EngineLoop::Handle handle_;
  ResponseMeta meta_;
  bool stream_;
  bool include_usage_;
  bool with_logprobs_;  // the client asked for logprobs
  int n_;               // choices returned per prompt
  int candidates_;      // choices generated per prompt: best_of when it is more than n
  int64_t prompt_tokens_;
  int64_t completion_tokens_ = 0;
  TokenTextFn token_text_;
  std::vector<Choice> choices_;
  int n_finished_ = 0;
  bool started_ = false;
  bool done_ = false;
  std::optional<ApiError> error_;
  std::vector<TokenEvent> events_;  // scratch, reused by poll()
  OutputShape shape_;
  std::optional<AnthropicStream> anthropic_;
  std::optional<ResponsesStream> responses_;
  // The returned choices, in order (best_of applied); `order` gets the choice index of each.
  std::vector<ChoiceResult> choice_results(std::vector<size_t>* order) const;
};

}  // namespace nanoserve::server
