#include "engine/llama_runner.h"

#include <optional>

#include "kvcache/naive_kv_cache.h"
#include "core/logging.h"
#include "kvcache/paged_kv_storage.h"
#if NANOSERVE_CUDA
#include "core/cuda/device_memory.cuh"
#include "engine/llama_cuda_runner.h"
#endif

namespace nanoserve {

LlamaRunner::LlamaRunner(std::unique_ptr<LlamaModel> model, const LlamaRunnerOptions& options,
                         ThreadPool* pool)
    : model_(std::move(model)),
      options_(options),
      pool_(pool),
      ws_(model_->make_workspace(options.max_tokens, options.max_num_seqs, options.max_context)) {}

int64_t LlamaRunner::kv_bytes_per_block(int32_t block_size) const {
  return PagedKVStorage::bytes_per_block(model_->config(), block_size, options_.kv_dtype);
}

Status LlamaRunner::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  if (cache_ != nullptr) return failed_precondition("init_kv_cache: the KV storage exists already");
  if (options_.storage == KVStorageKind::kNaive) {
    if (options_.kv_dtype != DType::kF32)
      return invalid_argument("kv cache dtype: the naive cache is f32 only");
    cache_ = std::make_unique<NaiveKVCache>(model_->config(), options_.max_num_seqs, options_.max_context);
    return Status();
  }
  PagedKVStorageOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.dtype = options_.kv_dtype;
  o.max_seq_len = options_.max_context;
  o.max_num_seqs = options_.max_num_seqs;
  o.fused_read = options_.fused_read;
  NS_ASSIGN_OR_RETURN(cache_, PagedKVStorage::create(model_->config(), o, pool_));
  return Status();
}

StatusOr<Tensor> LlamaRunner::forward(const ForwardBatch& batch) {
  if (cache_ == nullptr) return failed_precondition("forward before init_kv_cache");
  return model_->forward(batch, *cache_, ws_);
}

StatusOr<LoadedEngine> load_engine(const std::string& model_path, const EngineConfig& config,
                                   ThreadPool& pool) {
  ModelSpec spec;
  spec.path = model_path;
  return load_engine(spec, config, pool);
}

StatusOr<Device> resolve_device(std::optional<Device> requested) {
#if NANOSERVE_CUDA
  if (!requested.has_value()) return cuda::device_count() > 0 ? Device::kCUDA : Device::kCPU;
  return *requested;
#else
  if (requested == Device::kCUDA) {
    return failed_precondition(
        "--device cuda: this build has no CUDA backend (configure with -DNANOSERVE_CUDA=ON)");
  }
  return Device::kCPU;
#endif
}

StatusOr<LoadedEngine> load_engine(const ModelSpec& spec, const EngineConfig& config, ThreadPool& pool) {
  LoadedEngine le;
  NS_ASSIGN_OR_RETURN(le.source, open_model_source(spec));
  le.file = le.source.gguf;
  le.tokenizer = std::move(le.source.tokenizer);
  const ModelConfig& mc = le.source.config;
  const int64_t max_len = config.max_model_len > 0 ? config.max_model_len : mc.context_length;
  if (max_len <= 0) return invalid_argument("max_model_len: the model has no context length; set one");
  if (le.tokenizer->n_vocab() > mc.vocab_size) {
    return invalid_argument("the tokenizer has " + std::to_string(le.tokenizer->n_vocab()) +
                            " tokens but the model's vocabulary is " + std::to_string(mc.vocab_size));
  }
  NS_ASSIGN_OR_RETURN(le.device, resolve_device(config.device));
  le.text = std::make_unique<TokenizerText>(*le.tokenizer);
#if NANOSERVE_CUDA
  // Every built family runs on both devices; a shape the CUDA kernels do not
  // take is refused on --device cuda and runs on the CPU under auto.
  if (le.device == Device::kCUDA && !config.device.has_value()) {
    if (Status s = LlamaCudaModel::supports(mc); !s.ok()) {
      NS_LOG(WARNING) << s.message() << "; running on the CPU";
      le.device = Device::kCPU;
    }
  }
  if (le.device == Device::kCUDA) {
    NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaCudaRunner> runner,
                        make_llama_cuda_runner(le.source, config, max_len, pool));
    NS_ASSIGN_OR_RETURN(le.engine, Engine::create(config, std::move(runner), le.text.get()));
    return le;
  }
#endif
  NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load(mc, le.source.tensors, pool));
  LlamaRunnerOptions ro;
  ro.max_tokens = config.max_num_batched_tokens;
  ro.max_num_seqs = config.max_num_seqs;
  ro.max_context = max_len;
  ro.storage = config.naive_kv_cache ? KVStorageKind::kNaive : KVStorageKind::kPaged;
  ro.kv_dtype = config.kv_cache_dtype.value_or(DType::kF32);  // auto: f32 on the CPU
  ro.fused_read = config.fused_read;
  auto runner = std::make_unique<LlamaRunner>(std::move(model), ro, &pool);
  le.runner = runner.get();
  NS_ASSIGN_OR_RETURN(le.engine, Engine::create(config, std::move(runner), le.text.get()));
  return le;
}

}  // namespace nanoserve
