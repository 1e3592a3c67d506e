#pragma once
// The llama forward pass as the engine's ModelRunner, and the one call that
// turns a model path (GGUF file, HF folder, or dummy weights: model/model_source.h)
// into a ready Engine (model, tokenizer, KV cache).

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/tokenizer_text.h"
#include "io/gguf.h"
#include "model/llama.h"
#include "model/model_source.h"
#include "tokenizer/tokenizer.h"

namespace nanoserve {

class LlamaRunner final : public ModelRunner {
 public:
  // The workspace holds steps of max_tokens tokens, max_rows logits rows and
  // histories of max_context positions.
  LlamaRunner(std::unique_ptr<LlamaModel> model, int64_t max_tokens, int64_t max_rows, int64_t max_context)
      : model_(std::move(model)), ws_(model_->make_workspace(max_tokens, max_rows, max_context)) {}

  const ModelConfig& config() const override { return model_->config(); }
  StatusOr<Tensor> forward(const ForwardBatch& batch, KVCache& cache) override {
    return model_->forward(batch, cache, ws_);
  }
  // Times every later forward's phases into *profile (null: stop timing).
  void set_profile(ForwardProfile* profile) { ws_.profile = profile; }

 private:
  std::unique_ptr<LlamaModel> model_;
  Workspace ws_;
};

// Members in construction order; destroyed engine first, file last.
struct LoadedEngine {
  std::shared_ptr<const GgufFile> file;  // the GGUF file, when the model came from one
  ModelSource source;                    // config and tensors (its tokenizer moved below)
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenizerText> text;
  std::unique_ptr<Engine> engine;
};

// Opens the model (open_model_source), loads weights and tokenizer, and sizes
// the KV cache (print engine->capacity_line() at start-up). `pool` must
// outlive the result.
StatusOr<LoadedEngine> load_engine(const ModelSpec& spec, const EngineConfig& config, ThreadPool& pool);
// The same for a GGUF file or HF folder, detected from the path.
StatusOr<LoadedEngine> load_engine(const std::string& model_path, const EngineConfig& config,
                                   ThreadPool& pool);

}  // namespace nanoserve
