#include "engine/llama_runner.h"

namespace nanoserve {

StatusOr<LoadedEngine> load_engine(const std::string& model_path, const EngineConfig& config,
                                   ThreadPool& pool) {
  ModelSpec spec;
  spec.path = model_path;
  return load_engine(spec, config, pool);
}

StatusOr<LoadedEngine> load_engine(const ModelSpec& spec, const EngineConfig& config, ThreadPool& pool) {
  LoadedEngine le;
  NS_ASSIGN_OR_RETURN(le.source, open_model_source(spec));
  le.file = le.source.gguf;
  le.tokenizer = std::move(le.source.tokenizer);
  NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model,
                      LlamaModel::load(le.source.config, le.source.tensors, pool));
  const int64_t max_len = config.max_model_len > 0 ? config.max_model_len : model->config().context_length;
  if (max_len <= 0) return invalid_argument("max_model_len: the model has no context length; set one");
  if (le.tokenizer->n_vocab() > model->config().vocab_size) {
    return invalid_argument("the tokenizer has " + std::to_string(le.tokenizer->n_vocab()) +
                            " tokens but the model's vocabulary is " +
                            std::to_string(model->config().vocab_size));
  }
  auto runner = std::make_unique<LlamaRunner>(std::move(model), config.max_num_batched_tokens,
                                              config.max_num_seqs, max_len);
  le.text = std::make_unique<TokenizerText>(*le.tokenizer);
  NS_ASSIGN_OR_RETURN(le.engine, Engine::create(config, std::move(runner), le.text.get(), &pool));
  return le;
}

}  // namespace nanoserve
