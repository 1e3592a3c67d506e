#include "cli/model_loading.h"

#include <algorithm>
#include <utility>

#include "core/logging.h"
#include "engine/model_runner.h"
#include "model/llama.h"

namespace nanoserve::cli {

namespace {

// The Llama forward as the engine's ModelRunner, with its Workspace.
class LlamaRunner final : public ModelRunner {
 public:
  LlamaRunner(std::unique_ptr<LlamaModel> model, Workspace ws)
      : model_(std::move(model)), ws_(std::move(ws)) {}
  const ModelConfig& config() const override { return model_->config(); }
  StatusOr<Tensor> forward(const ForwardBatch& batch, KVCache& cache) override {
    return model_->forward(batch, cache, ws_);
  }

 private:
  std::unique_ptr<LlamaModel> model_;
  Workspace ws_;
};

}  // namespace

StatusOr<std::unique_ptr<LoadedModel>> load_model(const LoadOptions& options) {
  auto m = std::make_unique<LoadedModel>();
  NS_ASSIGN_OR_RETURN(m->file, GgufFile::open(options.model_path));
  m->pool = std::make_unique<ThreadPool>(options.threads);
  NS_ASSIGN_OR_RETURN(m->tokenizer, Tokenizer::from_gguf(*m->file));
  if (!m->tokenizer->chat_template().empty()) {
    auto parsed = ChatTemplate::parse(m->tokenizer->chat_template());
    if (parsed.ok()) {
      m->chat_template = std::move(*parsed);
    } else {
      NS_LOG(WARNING) << "chat template not recognised (" << parsed.status().message() << "); using ChatML";
    }
  }
  m->text = std::make_unique<TokenizerText>(*m->tokenizer);
  NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load(m->file, *m->pool));

  EngineConfig config = options.engine;
  const int64_t context = model->config().context_length;
  if (config.max_model_len <= 0 || config.max_model_len > context) config.max_model_len = context;
  Workspace ws = model->make_workspace(std::max<int64_t>(config.max_num_batched_tokens, config.max_num_seqs),
                                       config.max_num_seqs, config.max_model_len);
  auto runner = std::make_unique<LlamaRunner>(std::move(model), std::move(ws));
  NS_ASSIGN_OR_RETURN(m->engine, Engine::create(config, std::move(runner), m->text.get(), m->pool.get()));
  return m;
}

}  // namespace nanoserve::cli
