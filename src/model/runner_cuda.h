#pragma once
// The CUDA forward as the engine's ModelRunner (docs/model_cuda.md): every
// family of the table (model/arch.h). The same engine, scheduler, block
// manager and sampler as on the CPU; underneath, model/model_cuda.h with its
// bf16 or fp8 KV pools.
//
// Plain C++ (no CUDA header); defined in runner_cuda.cu, so only a build
// with NANOSERVE_CUDA has it.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "model/model_cuda.h"
#include "model/model_runner.h"
#include "model/model_source.h"

namespace nanoserve {

class ThreadPool;

struct CudaRunnerOptions {
  int32_t max_tokens = 512;  // tokens in one step
  int32_t max_seqs = 64;     // sequences in one step
  // Logits rows in one step: one per sequence, and one per proposed token
  // under speculative decoding; 0 means max_seqs.
  int32_t max_logits_rows = 0;
  int64_t max_context = 0;        // longest sequence; >= 1
  int32_t block_size = 16;        // the engine's KV block size
  bool cublas_prefill = false;    // CudaLimits::cublas_prefill
  bool fp8_weights = false;       // CudaModel::quantize_fp8 once the weights are resident
  bool cuda_graphs = true;        // CudaLimits::cuda_graphs
  DType kv_dtype = DType::kBF16;  // CudaLimits::kv_dtype: kBF16 or kF8E4M3 (--kv-cache-dtype)
  // The share of the device's memory for weights, KV and step buffers
  // together (vLLM's --gpu-memory-utilization); in (0, 1].
  double gpu_memory_utilization = 0.9;
  bool kv_sized_elsewhere = false;  // --num-blocks or --kv-cache-memory set the pool
};

class CudaRunner final : public ModelRunner {
 public:
  // kv_budget_bytes: what --gpu-memory-utilization leaves for the pools once
  // the weights are resident and the step buffers of `limits` are counted.
  CudaRunner(std::unique_ptr<CudaModel> model, const CudaLimits& limits, int64_t kv_budget_bytes);

  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_bytes_per_block(int32_t block_size) const override {
    return CudaModel::kv_bytes_per_block(model_->config(), block_size, limits_.kv_dtype);
  }
  int64_t kv_cache_budget_bytes() const override { return kv_budget_bytes_; }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override;
  StepLimits step_limits() const override { return model_->step_limits(); }
  // The split attention kernel reads a windowed row from up to two tiles
  // (256 tokens at head_dim 64, 128 at 128) before its window (paged_attention_common.cuh,
  // sliding_first): those blocks must stay held.
  int64_t window_read_margin() const override { return 256; }
  StatusOr<Tensor> forward(const ForwardBatch& batch) override;
  // The step runs on the device while the engine makes the last step's outputs.
  Status launch(const ForwardBatch& batch) override { return model_->launch(batch, batch.need_logits); }
  StatusOr<Tensor> wait() override { return model_->wait(); }
  bool overlaps_steps() const override { return true; }
  std::span<const int32_t> greedy_tokens() const override { return model_->argmax(); }
  bool samples_on_device() const override { return true; }
  std::span<const int32_t> sampled_tokens() const override { return model_->sampled(); }
  std::span<const SampleRowLogprobs> sampled_logprobs() const override { return model_->sampled_logprobs(); }
  std::span<const float> logits_row(int32_t row) override { return model_->logits_row(row); }

  // Swap area: pinned host memory, copies on the step's stream (CudaModel::swap_blocks).
  bool can_swap() const override { return true; }
  Status init_swap_space(int32_t num_slots) override { return model_->allocate_swap(num_slots); }
  Status swap_out(std::span<const BlockCopy> copies) override { return model_->swap_blocks(copies, true); }
  Status swap_in(std::span<const BlockCopy> copies) override { return model_->swap_blocks(copies, false); }
  // vLLM's default, 4 GiB of pinned host memory (the copy measured 55 GB/s
  // each way on the H100, docs/engine.md).
  int64_t default_swap_space_bytes() const override { return int64_t{4} << 30; }
  // docs/engine.md, "Preemption: swap or recompute": a pinned copy over the
  // host link at kCopyBytesPerS, against a prefill whose rate scales with the
  // weights' bytes (kPrefillWeightBytesPerS / weight_bytes: ~30k tok/s for
  // the 8B shape's 16 GB of bf16 on the H200).
  SwapCostRates swap_cost_rates() const override {
    return {kCopyBytesPerS,
            kPrefillWeightBytesPerS / static_cast<double>(std::max<int64_t>(1, model_->weight_bytes()))};
  }
  static constexpr double kCopyBytesPerS = 50e9;
  static constexpr double kPrefillWeightBytesPerS = 4.8e14;

  CudaModel& model() { return *model_; }
  // The step buffers init_kv_cache allocates (CudaModel::workspace_bytes).
  int64_t workspace_bytes() const { return CudaModel::workspace_bytes(model_->config(), limits_); }

 private:
  std::unique_ptr<CudaModel> model_;
  CudaLimits limits_;
  int64_t kv_budget_bytes_;
};

// The CUDA runner for an opened model source: GGUF or safetensors weights
// uploaded (converted or dequantized to bf16), or dummy weights made on the
// device. The KV budget is gpu_memory_utilization of the device's memory
// (vLLM's meaning: weights, KV and workspace together) less what is in use.
// `pool` serves the host model that views the weights while they upload.
// UNIMPLEMENTED (CudaModel::supports) for a shape the kernels do not take.
StatusOr<std::unique_ptr<CudaRunner>> make_cuda_runner(const ModelSource& source,
                                                       const CudaRunnerOptions& options, ThreadPool& pool);

}  // namespace nanoserve
