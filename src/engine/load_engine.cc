#include "engine/load_engine.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>

#include "core/logging.h"
#include "engine/draft_proposer.h"
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

void set_step_limits(Device device, std::optional<int32_t> max_num_seqs,
                     std::optional<int32_t> max_num_batched_tokens, EngineConfig* config) {
  const bool cuda = device == Device::kCUDA;
  config->max_num_seqs = max_num_seqs.value_or(cuda ? 256 : 64);
  config->max_num_batched_tokens =
      max_num_batched_tokens.value_or(std::max(cuda ? 2048 : 512, config->max_num_seqs));
}

namespace {

// Logits rows a step needs: one per sequence, and one per proposed token.
int64_t logits_rows(const EngineConfig& config) {
  const int64_t k = config.speculative.enabled() ? config.speculative.num_speculative_tokens : 0;
  return std::min<int64_t>(config.max_num_batched_tokens, int64_t{config.max_num_seqs} * (1 + k));
}

// Where the engine's measurement of a step's fixed cost in token rows starts
// (SpeculativeConfig::step_overhead_prior; a step_overhead_tokens given fixes it
// instead). On the CPU the matmuls read each weight once for all the rows of a
// step, but attention and the elementwise ops cost per row: a 5-row step costs
// ~1.9x a 1-row one, ~12 ms + ~3.5 ms a row on the default model, a fixed part
// of ~3.4 rows (docs/log/speculative.md). On a GPU a small step is bound by the
// weights' bytes, so extra rows are nearly free.
EngineConfig with_spec_defaults(EngineConfig config, Device device) {
  SpeculativeConfig& s = config.speculative;
  if (s.enabled()) s.step_overhead_prior = device == Device::kCPU ? 3.0 : 64.0;
  return config;
}

// The draft model of --speculative-config on the CPU, with as many KV blocks
// as the target's pool has.
StatusOr<std::unique_ptr<Proposer>> cpu_draft(const EngineConfig& config, const ModelConfig& target,
                                              int32_t num_blocks, int64_t max_len, ThreadPool& pool) {
  ModelSpec spec;
  spec.path = config.speculative.model;
  StatusOr<ModelSource> opened = open_model_source(spec);
  if (!opened.ok()) return invalid_argument("speculative_config.model: " + opened.status().message());
  auto source = std::make_shared<ModelSource>(std::move(opened).value());
  NS_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::load(source->config, source->tensors, pool));
  CpuRunnerOptions ro;
  ro.max_tokens = config.max_num_batched_tokens;
  ro.max_num_seqs = config.max_num_seqs;
  ro.max_context = max_len;
  ro.kv_dtype = config.kv_cache_dtype.value_or(DType::kF32);
  auto runner = std::make_unique<CpuRunner>(std::move(model), ro, pool);
  NS_ASSIGN_OR_RETURN(
      std::unique_ptr<DraftProposer> d,
      DraftProposer::create(std::move(runner), target.vocab_size, num_blocks, config.block_size,
                            config.max_num_seqs, max_len, source, config.release_window_blocks));
  return std::unique_ptr<Proposer>(std::move(d));
}

#if NANOSERVE_CUDA
StatusOr<std::unique_ptr<CudaRunner>> cuda_runner(const ModelSource& source, const EngineConfig& config,
                                                  int64_t max_len, ThreadPool& pool) {
  const DType kv_dtype = config.kv_cache_dtype.value_or(DType::kBF16);
  if (kv_dtype != DType::kBF16 && kv_dtype != DType::kF8E4M3) {
    return invalid_argument(std::string("--kv-cache-dtype ") + dtype_name(kv_dtype) +
                            ": the CUDA KV cache is bf16 or fp8 (auto, bf16, fp8 or fp8_e4m3)");
  }
  if (config.naive_kv_cache)
    return invalid_argument("--kv-cache naive: the CUDA runner has only the paged cache");
  CudaRunnerOptions o;
  o.max_tokens = config.max_num_batched_tokens;
  o.max_seqs = config.max_num_seqs;
  o.max_logits_rows = static_cast<int32_t>(logits_rows(config));
  o.max_context = max_len;
  o.block_size = config.block_size;
  o.cublas_prefill = config.cublas_prefill;
  o.fp8_weights = config.fp8_weights;
  o.cuda_graphs = !config.enforce_eager;
  o.kv_dtype = kv_dtype;
  o.gpu_memory_utilization = config.gpu_memory_utilization;
  o.kv_sized_elsewhere = config.num_blocks > 0 || config.kv_cache_bytes > 0;
  return make_cuda_runner(source, o, pool);
}

// The draft model of --speculative-config on the GPU: loaded before the
// target, so that the target's KV budget counts the draft's weights and step
// buffers as in use. Its steps take one token and one logits row per
// sequence, or the tokens it catches up on.
StatusOr<std::unique_ptr<CudaRunner>> cuda_draft_runner(const EngineConfig& config, int64_t max_len,
                                                        ThreadPool& pool,
                                                        std::shared_ptr<ModelSource>& source) {
  ModelSpec spec;
  spec.path = config.speculative.model;
  StatusOr<ModelSource> opened = open_model_source(spec);
  if (!opened.ok()) return invalid_argument("speculative_config.model: " + opened.status().message());
  source = std::make_shared<ModelSource>(std::move(opened).value());
  CudaRunnerOptions o;
  o.max_tokens = config.max_num_batched_tokens;
  o.max_seqs = config.max_num_seqs;
  o.max_context = max_len;
  o.block_size = config.block_size;
  o.cuda_graphs = !config.enforce_eager;
  o.kv_dtype = config.kv_cache_dtype.value_or(DType::kBF16);  // as the target's (cuda_runner checks it)
  o.gpu_memory_utilization = config.gpu_memory_utilization;
  o.kv_sized_elsewhere = true;  // the target's pool sets the draft's block count
  StatusOr<std::unique_ptr<CudaRunner>> r = make_cuda_runner(*source, o, pool);
  if (!r.ok()) return invalid_argument("speculative_config.model: " + r.status().message());
  return r;
}

// The engine on the GPU, with its draft model when --speculative-config names
// one. The draft's cache has as many blocks as the target's, so the two pools
// share the budget in the ratio of their bytes per block.
StatusOr<std::unique_ptr<Engine>> cuda_engine(const ModelSource& source, EngineConfig config, int64_t max_len,
                                              const TextStreamFactory* text, ThreadPool& pool) {
  std::unique_ptr<CudaRunner> draft_runner;
  std::shared_ptr<ModelSource> draft_source;
  if (config.speculative.method == SpecMethod::kDraftModel) {
    NS_ASSIGN_OR_RETURN(draft_runner, cuda_draft_runner(config, max_len, pool, draft_source));
  }
  NS_ASSIGN_OR_RETURN(std::unique_ptr<CudaRunner> runner, cuda_runner(source, config, max_len, pool));
  std::unique_ptr<Proposer> draft;
  if (draft_runner != nullptr) {
    if (config.num_blocks == 0) {
      // The target's budget counted the draft's weights (resident) but not
      // its step buffers (allocated with its pool).
      const int64_t bytes = config.kv_cache_bytes > 0
                                ? config.kv_cache_bytes
                                : runner->kv_cache_budget_bytes() - draft_runner->workspace_bytes();
      const int64_t per_block =
          runner->kv_bytes_per_block(config.block_size) + draft_runner->kv_bytes_per_block(config.block_size);
      if (bytes < per_block) {
        return resource_exhausted("the KV budget (" + std::to_string(bytes) +
                                  " bytes) holds no block of the target and its draft model (" +
                                  std::to_string(per_block) + " bytes)");
      }
      config.num_blocks =
          static_cast<int32_t>(std::min<int64_t>(bytes / per_block, std::numeric_limits<int32_t>::max()));
    }
    NS_ASSIGN_OR_RETURN(std::unique_ptr<DraftProposer> d,
                        DraftProposer::create(std::move(draft_runner), source.config.vocab_size,
                                              config.num_blocks, config.block_size, config.max_num_seqs,
                                              max_len, draft_source, config.release_window_blocks));
    draft = std::move(d);
  }
  return Engine::create(with_spec_defaults(config, Device::kCUDA), std::move(runner), text, std::move(draft));
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
    NS_ASSIGN_OR_RETURN(le.engine, cuda_engine(le.source, config, max_len, le.text.get(), pool));
    return le;
  }
#endif
  NS_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> model, CpuModel::load(mc, le.source.tensors, pool));
  CpuRunnerOptions ro;
  ro.max_tokens = config.max_num_batched_tokens;
  ro.max_num_seqs = config.max_num_seqs;
  ro.max_logits_rows = logits_rows(config);
  ro.max_context = max_len;
  ro.kv_layout = config.naive_kv_cache ? CpuKVLayout::kPerSequence : CpuKVLayout::kPaged;
  ro.kv_dtype = config.kv_cache_dtype.value_or(DType::kF32);  // auto: f32 on the CPU
  ro.fused_read = config.fused_read;
  auto runner = std::make_unique<CpuRunner>(std::move(model), ro, pool);
  le.runner = runner.get();
  std::unique_ptr<Proposer> draft;
  if (config.speculative.method == SpecMethod::kDraftModel) {
    if (config.naive_kv_cache)
      return invalid_argument(
          "speculative_config.model: a draft model needs the paged KV cache (not --kv-cache naive)");
    NS_ASSIGN_OR_RETURN(const int32_t num_blocks, kv_cache_num_blocks(config, *runner));
    NS_ASSIGN_OR_RETURN(draft, cpu_draft(config, mc, num_blocks, max_len, pool));
  }
  NS_ASSIGN_OR_RETURN(le.engine, Engine::create(with_spec_defaults(config, le.device), std::move(runner),
                                                le.text.get(), std::move(draft)));
  return le;
}

}  // namespace nanoserve
