#include "engine/llama_runner.h"

namespace nanoserve {

StatusOr<LoadedEngine> load_engine(const std::string& gguf_path, const EngineConfig& config,
                                   ThreadPool& pool) {
  LoadedEngine le;
  NS_ASSIGN_OR_RETURN(le.file, GgufFile::open(gguf_path));
  NS_ASSIGN_OR_RETURN(le.tokenizer, Tokenizer::from_gguf(*le.file));
  NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load(le.file, pool));
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
