#pragma once
// The CPU forward as the engine's ModelRunner (docs/engine.md), with its KV
// storage: per-layer pool tensors it owns (model/kv_cpu.h), paged
// f32/f16/bf16 or the naive per-sequence layout.

#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "model/kv_cpu.h"
#include "model/model_cpu.h"
#include "model/model_runner.h"

namespace nanoserve {

struct CpuRunnerOptions {
  int64_t max_tokens = 512;   // tokens in one step
  int32_t max_num_seqs = 64;  // sequences in one step, and the naive layout's rows
  int64_t max_logits_rows =
      0;  // token rows with logits in one step (0: max_num_seqs; more for speculative decoding)
  int64_t max_context = 0;    // longest sequence; >= 1
  CpuKVLayout kv_layout = CpuKVLayout::kPaged;
  DType kv_dtype = DType::kF32;  // paged: kF32, kF16, kBF16 or kF8E4M3; per sequence: kF32
  bool fused_read = true;        // paged: attention straight from the blocks (false: gather)
  // What the engine's swap-or-recompute choice assumes of this runner's prefill
  // (SmolLM2-135M Q4_1 on one core of the 2-core dev VM: ~3.9 ms a token).
  double prefill_tokens_per_s = 250.0;
};

class CpuRunner final : public ModelRunner {
 public:
  // `pool` runs the forward's and the storage's threads and must outlive the runner.
  CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options, ThreadPool& pool);

  const ModelConfig& config() const override { return model_->config(); }
  int64_t kv_bytes_per_block(int32_t block_size) const override;
  bool kv_blocks_shareable() const override { return options_.kv_layout == CpuKVLayout::kPaged; }
  Status init_kv_cache(int32_t num_blocks, int32_t block_size) override;
  StepLimits step_limits() const override;
  StatusOr<Tensor> forward(const ForwardBatch& batch) override;

  // Swap area: a separate host allocation in the pool's layout (CpuKV::init_swap).
  bool can_swap() const override { return options_.kv_layout == CpuKVLayout::kPaged; }
  Status init_swap_space(int32_t num_slots) override;
  Status swap_out(std::span<const BlockCopy> copies) override;
  Status swap_in(std::span<const BlockCopy> copies) override;
  // A memcpy within host memory against the CPU's prefill (docs/engine.md): kCpuCopyBytesPerS and
  // options.prefill_tokens_per_s. No swap area unless the engine is given one.
  SwapCostRates swap_cost_rates() const override {
    return {kCpuCopyBytesPerS, options_.prefill_tokens_per_s};
  }
  // Block-sized memcpy on one core of the 2-core dev VM: ~12 GB/s (2026-12-05); 10 assumed.
  static constexpr double kCpuCopyBytesPerS = 10e9;

  // Times every later forward's phases into *profile (null: stop timing).
  void set_profile(ForwardProfile* profile) { ws_.profile = profile; }
  CpuKV* kv() { return kv_.get(); }  // null before init_kv_cache

 private:
  std::unique_ptr<CpuModel> model_;
  CpuRunnerOptions options_;
  ThreadPool& pool_;
  Workspace ws_;
  std::unique_ptr<CpuKV> kv_;
};

}  // namespace nanoserve
