#include "model/runner_cuda.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "model/model_cpu.h"
#include "ops/rope/rope_freqs.h"

namespace nanoserve {

namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

}  // namespace

CudaRunner::CudaRunner(std::unique_ptr<CudaModel> model, const CudaLimits& limits, int64_t kv_budget_bytes)
    : model_(std::move(model)), limits_(limits), kv_budget_bytes_(kv_budget_bytes) {}

Status CudaRunner::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  CudaLimits lim = limits_;
  // The block tables' row stride is the longest sequence's table.
  lim.max_blocks_per_seq = std::max(lim.max_blocks_per_seq, 1);
  return model_->allocate(lim, num_blocks, block_size);
}

StatusOr<Tensor> CudaRunner::forward(const ForwardBatch& batch) {
  return model_->forward(batch, batch.need_logits);
}

StatusOr<std::unique_ptr<CudaRunner>> make_cuda_runner(const ModelSource& source, const CudaRunnerOptions& o,
                                                       ThreadPool& pool) {
  const ModelConfig& c = source.config;
  NS_RETURN_IF_ERROR(CudaModel::supports(c));  // by name, before the device is asked for
  std::string why;
  if (cuda::device_count(&why) == 0)
    return failed_precondition("--device cuda: no CUDA device (" + why + ")");
  if (o.kv_dtype != DType::kBF16 && o.kv_dtype != DType::kF8E4M3) {
    return invalid_argument(std::string("--kv-cache-dtype ") + dtype_name(o.kv_dtype) +
                            ": the CUDA KV cache is bf16 or fp8 (E4M3)");
  }
  if (o.fp8_weights && o.cublas_prefill) {
    return invalid_argument(
        "--quantization fp8 with --cublas-prefill: FP8 weights run on our own linears only");
  }
  std::unique_ptr<CudaModel> model;
  if (source.format == LoadFormat::kDummy) {
    const auto inv_freq = rope_inv_freqs(c.rope_dim, c.rope_theta, c.rope_scaling);
    NS_ASSIGN_OR_RETURN(model, CudaModel::dummy(c, inv_freq, 0x5eed));
  } else {
    // The host model views the stored tensors (a GGUF mapping, safetensors
    // files): nothing is copied on the host but one row at a time. An FP8
    // checkpoint's row-scaled linears stay E4M3 rows for the device's FP8
    // linears; its block-scaled ones come as bf16 (docs/model_cuda.md).
    std::shared_ptr<const TensorSource> fp8_rows = source.tensors->with_fp8_rows();
    const bool fp8_checkpoint = fp8_rows != nullptr;
    NS_ASSIGN_OR_RETURN(std::unique_ptr<CpuModel> host,
                        CpuModel::load(c, fp8_checkpoint ? fp8_rows : source.tensors, pool));
    NS_ASSIGN_OR_RETURN(model, CudaModel::upload(host->config(), host->weights(), host->inv_freq()));
    if (fp8_checkpoint) {
      const int64_t total = 4 * c.n_layers, fp8 = model->fp8_linears();
      std::string rest;
      if (fp8 < total) {
        rest = "; the others (block-wise scales, or a shape the FP8 kernel does not take) came as bf16";
        rest += o.fp8_weights ? ", requantized per channel now (--quantization fp8)"
                              : " (--quantization fp8 requantizes them per channel)";
      }
      NS_LOG(INFO) << source.tensors->describe() << ": " << fp8 << " of " << total
                   << " linears run as the checkpoint's FP8 E4M3 rows" << rest;
    }
  }
  if (o.cublas_prefill && model->fp8_linears() > 0) {
    return invalid_argument("--cublas-prefill with an FP8 checkpoint (" + source.tensors->describe() +
                            "): FP8 weights run on our own linears only");
  }
  if (o.fp8_weights && !model->fp8()) NS_RETURN_IF_ERROR(model->quantize_fp8());
  CudaLimits lim;
  lim.max_tokens = o.max_tokens;
  lim.max_seqs = o.max_seqs;
  lim.max_logits_rows = o.max_logits_rows > 0 ? o.max_logits_rows : o.max_seqs;
  lim.max_context = o.max_context;
  lim.max_blocks_per_seq = static_cast<int32_t>((o.max_context + o.block_size - 1) / o.block_size);
  lim.cublas_prefill = o.cublas_prefill;
  lim.cuda_graphs = o.cuda_graphs;
  lim.kv_dtype = o.kv_dtype;
  const int64_t workspace = CudaModel::workspace_bytes(model->config(), lim);
  size_t free_b = 0, total_b = 0;
  NS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const double util = o.gpu_memory_utilization;
  if (!(util > 0.0 && util <= 1.0)) {
    return invalid_argument("--gpu-memory-utilization " + std::to_string(util) + " must be in (0, 1]");
  }
  const int64_t total = static_cast<int64_t>(total_b), in_use = static_cast<int64_t>(total_b - free_b);
  const int64_t budget = static_cast<int64_t>(util * static_cast<double>(total)) - in_use - workspace;
  if (budget <= 0 && !o.kv_sized_elsewhere) {
    return resource_exhausted("--gpu-memory-utilization " + std::to_string(util) + " of " + gib(total) +
                              " leaves no room for the KV cache: " + gib(in_use) + " in use (weights " +
                              gib(model->weight_bytes()) + "), step buffers " + gib(workspace));
  }
  return std::make_unique<CudaRunner>(std::move(model), lim, std::max<int64_t>(budget, 0));
}

}  // namespace nanoserve
