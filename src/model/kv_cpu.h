#pragma once
// The CPU runner's KV storage (docs/kvcache.md): plain per-layer tensors,
// which the runner owns, and the read each layer's attention goes through.
// The block manager (kvcache/) decides which blocks a sequence holds; every
// ForwardBatch carries that (block_tables, slot_mapping), validated once by
// the engine against limits() before the forward.
//
// Layouts:
//   kPaged          k_pool(l), v_pool(l)  [num_blocks, block_size, n_kv_heads, head_dim]
//                   f32, f16, bf16 or f8e4m3 (E4M3 with a K and a V scale per
//                   layer, core/kv_quant.h), shared by every sequence; one write, then
//                   either read: fused (paged_attention_cpu through the block
//                   tables) or gather (a contiguous f32 copy, then attention()).
//                   Both give bitwise-identical outputs within one dtype.
//   kPerSequence    k_pool(l), v_pool(l)  [max_num_seqs, n_kv_heads, max_context, head_dim] f32,
//                   row seq_id of each sequence's history, read in place (the
//                   naive cache, --kv-cache naive: the reference the paged one is
//                   held to). Blocks cannot be shared: no prefix caching.
// The pools are not zero-filled: a slot is always written before any read reaches it.
//
// Swap area (paged only, init_swap): per layer k_swap(l), v_swap(l)
// [num_slots, block_size, n_kv_heads, head_dim] in the pool dtype, a separate
// host allocation that blocks are copied out to and back from
// (docs/kvcache.md, "Swapping"). On the CPU it is the same memory as the pool,
// so it saves no recompute memory-wise; it runs the engine's swap logic.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/kv_quant.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/model_runner.h"
#include "ops/attention/attention.h"
#include "step/forward_batch.h"

namespace nanoserve {

enum class CpuKVLayout { kPaged, kPerSequence };

struct CpuKVOptions {
  CpuKVLayout layout = CpuKVLayout::kPaged;
  int32_t num_blocks = 0;     // paged: >= 1
  int32_t block_size = 16;    // paged: tokens per block
  DType dtype = DType::kF32;  // paged: kF32, kF16, kBF16 or kF8E4M3; per sequence: kF32
  int64_t max_context = 0;    // longest context a step may attend; >= 1
  int32_t max_num_seqs = 64;  // sequences in one step (per sequence: also the rows)
  bool fused_read = true;     // paged: the fused read; false: the gather
};

class CpuKV {
 public:
  // INVALID_ARGUMENT naming the option when the options or the model shape
  // cannot make the storage. `pool` runs the reads' threads and must outlive it.
  static StatusOr<std::unique_ptr<CpuKV>> create(const ModelConfig& config, const CpuKVOptions& options,
                                                 ThreadPool& pool);
  // Per-sequence storage for tests: max_num_seqs rows of max_context positions, f32.
  static CpuKV per_sequence(const ModelConfig& config, int32_t max_num_seqs, int64_t max_context,
                            ThreadPool& pool);
  // K+V bytes of one paged block over all layers.
  static int64_t bytes_per_block(const ModelConfig& config, int32_t block_size, DType dtype);

  // The storage's half of the step limits: num_blocks, block_size,
  // max_blocks_per_seq (paged) and max_context; the caller sets the rest.
  void fill_limits(StepLimits& limits) const;

  // One layer's attention of a validated batch: writes this step's k, v, then
  // reads as the layout says.
  //   q, out: [T, n_heads, head_dim] f32; k, v: [T, n_kv_heads, head_dim] f32
  //   window: the layer's sliding window (0: none)
  //   softcap: the attention scores' soft-cap (0: none)
  //   sinks: [n_heads] f32 sink logits (gpt-oss; ops/attention/attention.h), or null
  void attend(int layer, const ForwardBatch& batch, const Tensor& q, const Tensor& k, const Tensor& v,
              int n_rep, float scale, Tensor& out, int64_t window = 0, float softcap = 0.0f,
              const float* sinks = nullptr);

  // Creates the swap area of num_slots blocks (paged only); FAILED_PRECONDITION when it exists
  // or the layout is per sequence.
  Status init_swap(int32_t num_slots);
  int32_t num_swap_slots() const { return num_swap_slots_; }
  // Copies each block's K and V, every layer, to its slot (out) or from its slot into the block (in).
  // Synchronous. PRECOND: ids inside the pool and the area (NS_CHECK).
  void swap_blocks(std::span<const BlockCopy> copies, bool out);
  const Tensor& k_swap(int layer) const { return k_swap_[static_cast<size_t>(layer)]; }
  const Tensor& v_swap(int layer) const { return v_swap_[static_cast<size_t>(layer)]; }

  // How many times each half of attend() ran, over the storage's life: one
  // write per layer and step, then one read of the layout's kind.
  struct Counts {
    int64_t writes = 0, fused_reads = 0, gathers = 0, per_sequence_reads = 0;
  };
  const Counts& counts() const { return counts_; }

  CpuKVLayout layout() const { return o_.layout; }
  bool fused_read() const { return o_.layout == CpuKVLayout::kPaged && o_.fused_read; }
  int32_t num_blocks() const { return o_.num_blocks; }
  int32_t block_size() const { return o_.block_size; }
  DType dtype() const { return o_.dtype; }
  int64_t pool_bytes() const;  // K+V of all layers
  const Tensor& k_pool(int layer) const { return k_[static_cast<size_t>(layer)]; }
  const Tensor& v_pool(int layer) const { return v_[static_cast<size_t>(layer)]; }
  // An fp8 pool's per-layer scales: 1.0 (vLLM's default) unless set. One per
  // layer, finite and > 0. read_scales: what the reads dequantize with, where
  // a test plants a mismatch; empty, the same as `scales`.
  Status set_kv_scales(std::vector<KvScales> scales, std::vector<KvScales> read_scales = {});
  const std::vector<KvScales>& kv_scales() const { return write_scales_; }

 private:
  CpuKV(const ModelConfig& config, const CpuKVOptions& o, ThreadPool& pool);
  void write_per_sequence(int layer, const ForwardBatch& batch, const Tensor& k, const Tensor& v);

  CpuKVOptions o_;
  int64_t n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  ThreadPool& pool_;
  std::vector<Tensor> k_, v_;  // [n_layers], layout above
  std::vector<KvScales> write_scales_, read_scales_;  // [n_layers], fp8 pools
  std::vector<Tensor> k_swap_,
      v_swap_;  // [n_layers] swap area, [num_swap_slots, block_size, n_kv_heads, head_dim]
  int32_t num_swap_slots_ = 0;

  // Read scratch, sized at creation.
  std::vector<float> scores_;   // fused read and attention(): one score row per thread
  Tensor gather_k_, gather_v_;  // gather: [positions, n_kv_heads, head_dim] f32; grown if shared
                                // prefixes make a step's histories longer than the pool
  std::vector<int64_t> gather_scratch_;
  KVHistory history_;
  Counts counts_;
};

}  // namespace nanoserve
