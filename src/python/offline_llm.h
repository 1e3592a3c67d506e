#pragma once
// The engine behind the Python package's LLM class (python/nanoserve): a
// loaded model, its codec and the server's EngineLoop, the one thread that
// steps the engine. Requests are read by the server's own protocol code (a
// completions or chat request body), so every field is checked, and refused
// with the name of the field, exactly as the HTTP API does. No Python here:
// module.cc binds it.
//
// A batch is submitted whole (every prompt's choices in one submit), so the
// engine batches them continuously; the caller polls it for progress and may
// abort it.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/load_engine.h"
#include "server/api_error.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/structured_output.h"
#include "server/tokenizer_codec.h"

namespace nanoserve::python {

struct LlmOptions {
  std::string model;            // a GGUF file or a Hugging Face folder
  std::string device = "auto";  // auto | cpu | cuda
  int64_t max_model_len = 0;    // 0: the model's context length
  int32_t max_num_seqs = 0;     // 0: the engine's default
  int64_t kv_cache_memory = 0;  // bytes of K+V; 0: the engine's default
  uint64_t seed = 0;            // seeds requests that bring no seed of their own
  int32_t threads = 0;          // CPU worker threads; 0: all cores
  std::string chat_template;    // a file or the template text; empty: the model's
};

// One request, parsed and encoded: n choices of one prompt.
struct PreparedRequest {
  std::vector<int32_t> prompt;
  std::vector<server::EngineRequest> choices;
};

// What one choice produced.
struct CompletionChoice {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<float> logprobs;                          // [tokens] when asked for
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [tokens][k] when asked for
  double cumulative_logprob = 0.0;                      // sum of logprobs (when asked for)
  FinishReason finish = FinishReason::kNone;
  std::string stop_string;  // the stop string that ended it, if any
  std::string error;        // finish == kError: why
};

class OfflineBatch {
 public:
  // first_choice: [requests + 1] offsets of each request's choices; with_logprobs: [choices].
  OfflineBatch(server::EngineLoop& loop, server::EngineLoop::Handle handle, std::vector<size_t> first_choice,
               std::vector<bool> with_logprobs);
  ~OfflineBatch();  // aborts what is unfinished
  OfflineBatch(const OfflineBatch&) = delete;
  OfflineBatch& operator=(const OfflineBatch&) = delete;

  // Takes the engine's events, waiting up to `timeout` for the first. Returns how many
  // requests finished in this call.
  size_t poll(std::chrono::milliseconds timeout);
  // Aborts every unfinished choice; they finish with kAbort at the engine's next step.
  void abort();

  bool done() const { return finished_requests_ == num_requests(); }
  size_t num_requests() const { return first_choice_.size() - 1; }
  size_t num_finished() const { return finished_requests_; }
  int64_t num_output_tokens() const { return output_tokens_; }
  // Choices of request i: outputs()[first_choice(i) .. first_choice(i + 1)).
  size_t first_choice(size_t i) const { return first_choice_[i]; }
  const std::vector<CompletionChoice>& outputs() const { return outputs_; }

 private:
  server::EngineLoop& loop_;
  server::EngineLoop::Handle handle_;
  std::vector<size_t> first_choice_;        // [requests + 1] CSR offsets into outputs_
  std::vector<size_t> request_of_;          // [choices] the request each choice belongs to
  std::vector<size_t> unfinished_;          // [requests] choices still running
  std::vector<bool> with_logprobs_;         // [choices] the choice asked for logprobs
  std::vector<CompletionChoice> outputs_;       // [choices]
  std::vector<server::TokenEvent> events_;  // scratch
  size_t finished_requests_ = 0;
  int64_t output_tokens_ = 0;
};

class OfflineLlm {
 public:
  static StatusOr<std::unique_ptr<OfflineLlm>> create(const LlmOptions& options);
  ~OfflineLlm();  // aborts whatever runs, then stops the engine thread
  OfflineLlm(const OfflineLlm&) = delete;
  OfflineLlm& operator=(const OfflineLlm&) = delete;

  // A completions body (prompt: text or token ids) or a chat body (messages), with the
  // sampling fields the server reads. The error is the server's 400, naming the field.
  // add_generation_prompt: chat, end the prompt with the assistant's turn opened (vLLM's LLM.chat
  // argument; the HTTP chat endpoint always opens it).
  std::variant<PreparedRequest, server::ApiError> prepare(server::Endpoint endpoint, std::string_view body,
                                                          bool add_generation_prompt = true);
  // Hands every request to the engine at once.
  StatusOr<std::unique_ptr<OfflineBatch>> submit(std::vector<PreparedRequest> requests);

  const server::ModelCodec& codec() const { return *codec_; }
  int64_t max_model_len() const { return limits_.max_model_len; }
  const std::string& model_name() const { return limits_.served_model_name; }
  std::string capacity_line() const { return loaded_.engine->capacity_line(); }
  std::string device_name() const;

 private:
  OfflineLlm() = default;

  std::unique_ptr<ThreadPool> pool_;
  LoadedEngine loaded_;
  std::unique_ptr<server::TokenizerCodec> codec_;
  std::unique_ptr<server::ServerMetrics> metrics_;
  std::unique_ptr<server::EngineLoop> loop_;
  server::StructuredOutput structured_;
  server::ProtocolLimits limits_;
};

}  // namespace nanoserve::python
