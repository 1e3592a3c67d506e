#include "engine/load_engine.h"

#include <optional>

#include "core/logging.h"
#if NANOSERVE_CUDA
#include "core/cuda/device_memory.cuh"
#include "model/runner_cuda.h"
#endif

namespace nanoserve {

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

namespace {

#if NANOSERVE_CUDA
StatusOr<std::unique_ptr<CudaRunner>> cuda_runner(const ModelSource& source, const EngineConfig& config,
                                                  int64_t max_len, ThreadPool& pool) {
  if (config.kv_cache_dtype.has_value() && *config.kv_cache_dtype != DType::kBF16) {
    return invalid_argument(std::string("--kv-cache-dtype ") + dtype_name(*config.kv_cache_dtype) +
                            ": the CUDA KV cache is bf16 (auto or bf16)");
  }
  if (config.naive_kv_cache)
    return invalid_argument("--kv-cache naive: the CUDA runner has only the paged cache");
  CudaRunnerOptions o;
  o.max_tokens = config.max_num_batched_tokens;
  o.max_seqs = config.max_num_seqs;
  o.max_context = max_len;
  o.block_size = config.block_size;
  o.cublas_prefill = config.cublas_prefill;
  o.fp8_weights = config.fp8_weights;
  o.cuda_graphs = !config.enforce_eager;
  o.gpu_memory_utilization = config.gpu_memory_utilization;
  o.kv_sized_elsewhere = config.num_blocks > 0 || config.kv_cache_bytes > 0;
  return make_cuda_runner(source, o, pool);
}
#endif

}  // namespace

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
    if (Status s = CudaModel::supports(mc); !s.ok()) {
      NS_LOG(WARNING) << s.message() << "; running on the CPU";
      le.device = Device::kCPU;
    }
  }
  if (le.device == Device::kCUDA) {
    NS_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner, cuda_runner(le.source, config, max_len, pool));
    NS_ASSIGN_OR_RETURN(le.engine, Engine::create(config, std::move(runner), le.text.get()));
    return le;
  }
#endif
  NS_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::load(mc, le.source.tensors, pool));
  CpuRunnerOptions ro;
  ro.max_tokens = config.max_num_batched_tokens;
  ro.max_num_seqs = config.max_num_seqs;
  ro.max_context = max_len;
  ro.kv_layout = config.naive_kv_cache ? CpuKVLayout::kPerSequence : CpuKVLayout::kPaged;
  ro.kv_dtype = config.kv_cache_dtype.value_or(DType::kF32);  // auto: f32 on the CPU
  ro.fused_read = config.fused_read;
  auto runner = std::make_unique<CpuRunner>(std::move(model), ro, pool);
  le.runner = runner.get();
  NS_ASSIGN_OR_RETURN(le.engine, Engine::create(config, std::move(runner), le.text.get()));
  return le;
}

}  // namespace nanoserve
