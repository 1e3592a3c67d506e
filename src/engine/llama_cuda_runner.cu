#include "engine/llama_cuda_runner.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "core/thread_pool.h"
#include "model/llama.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

}  // namespace

LlamaCudaRunner::LlamaCudaRunner(std::unique_ptr<LlamaCudaModel> model, const LlamaCudaLimits& limits,
                                 int64_t kv_budget_bytes)
    : model_(std::move(model)), limits_(limits), kv_budget_bytes_(kv_budget_bytes) {}

Status LlamaCudaRunner::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  LlamaCudaLimits lim = limits_;
  // The block tables' row stride is the longest sequence's table.
  lim.max_blocks_per_seq = std::max(lim.max_blocks_per_seq, 1);
  return model_->allocate(lim, num_blocks, block_size);
}

StatusOr<Tensor> LlamaCudaRunner::forward(const ForwardBatch& batch) {
  return model_->forward(batch, batch.need_logits);
}

StatusOr<std::unique_ptr<LlamaCudaRunner>> make_llama_cuda_runner(const ModelSource& source,
                                                                  const EngineConfig& config,
                                                                  int64_t max_model_len, ThreadPool& pool) {
  std::string why;
  if (cuda::device_count(&why) == 0)
    return failed_precondition("--device cuda: no CUDA device (" + why + ")");
  const ModelConfig& c = source.config;
  NS_RETURN_IF_ERROR(LlamaCudaModel::supports(c));
  if (config.kv_cache_dtype.has_value() && *config.kv_cache_dtype != DType::kBF16) {
    return invalid_argument(std::string("--kv-cache-dtype ") + dtype_name(*config.kv_cache_dtype) +
                            ": the CUDA KV cache is bf16 (auto or bf16)");
  }
  if (config.naive_kv_cache)
    return invalid_argument("--kv-cache naive: the CUDA runner has only the paged cache");
  std::unique_ptr<LlamaCudaModel> model;
  if (source.format == LoadFormat::kDummy) {
    const auto inv_freq = rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling);
    NS_ASSIGN_OR_RETURN(model, LlamaCudaModel::dummy(c, inv_freq, 0x5eed));
  } else {
    // The host model views the stored tensors (a GGUF mapping, safetensors
    // files): nothing is copied on the host but one row at a time.
    NS_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> host, LlamaModel::load(c, source.tensors, pool));
    NS_ASSIGN_OR_RETURN(model, LlamaCudaModel::upload(host->config(), host->weights(), host->inv_freq()));
  }
  LlamaCudaLimits lim;
  lim.max_tokens = config.max_num_batched_tokens;
  lim.max_seqs = config.max_num_seqs;
  lim.max_logits_rows = config.max_num_seqs;
  lim.max_blocks_per_seq = static_cast<int32_t>((max_model_len + config.block_size - 1) / config.block_size);
  lim.cublas_prefill = config.cublas_prefill;
  lim.cuda_graphs = !config.enforce_eager;
  const int64_t workspace = LlamaCudaModel::workspace_bytes(model->config(), lim);
  size_t free_b = 0, total_b = 0;
  NS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double util = config.gpu_memory_utilization;
  if (!(util > 0.0 && util <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization " + std::to_string(util) + " must be in (0, 1]");
  }
  const int64_t total = static_cast<int64_t>(total_b), in_use = static_cast<int64_t>(total_b - free_b);
  const int64_t budget = static_cast<int64_t>(util * static_cast<double>(total)) - in_use - workspace;
  const bool sized_elsewhere = config.num_blocks > 0 || config.kv_cache_bytes > 0;
  if (budget <= 0 && !sized_elsewhere) {
    return resource_exhausted("--gpu-memory-utilization " + std::to_string(util) + " of " + gib(total) +
                              " leaves no room for the KV cache: " + gib(in_use) + " in use (weights " +
                              gib(model->weight_bytes()) + "), step buffers " + gib(workspace));
  }
  return std::make_unique<LlamaCudaRunner>(std::move(model), lim, std::max<int64_t>(budget, 0));
}

}  // namespace nanoserve
