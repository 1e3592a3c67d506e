#pragma once
// CUDA paged attention: the KV write and the attention read through block
// tables, for bf16/f16 caches and E4M3 (fp8) caches with per-layer scales. Plain C++ declarations (no CUDA
// header), so the engine's .cc files built with NANOSERVE_CUDA can call them; the kernels live in
// paged_attention_cuda.cu. paged_attention_reference (CPU, f32) is the truth these are tested against.
//
// Pools, one per layer for K and one for V, as the CPU's:
//   [num_blocks, block_size, n_kv_heads, head_dim]  bf16, f16 or f8e4m3
// An f8e4m3 pool holds e4m3(x / scale) with its layer's scale (KvScales,
// core/kv_quant.h); q, out and the written K/V are then bf16, and the kernel
// dequantizes a tile once it has landed in shared memory (bf16(f32(q) *
// scale), the element the bf16 kernel would read), then computes as over a
// bf16 pool: its output is bitwise the bf16 kernel's over the dequantized pool.
// (a head-major layout, one head's rows of a block contiguous, measured no
// faster and was removed: docs/log/kernels.md).
// block_size: a power of two >= 8. head_dim: 64, 128 or 256 (256: the split
// kernel only, its plain variant, at most 3 pipeline stages; over any pool).
// q, out: [T, n_heads, head_dim] in the pool dtype (bf16 for an fp8 pool). n_heads = n_kv_heads * n_rep;
// query head h reads kv head h / n_rep.
//
// Determinism: how a row's context is split across thread blocks depends only on
// that row's context length (and head_dim), never on the batch, so a sequence's
// output is bitwise the same alone or in any batch, and whichever split-reduce
// variant runs.

#include <cstdint>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/kv_quant.h"
#include "core/tensor.h"
#include "step/device_batch.cuh"

namespace nanoserve {

// Which arithmetic a call runs; each is batch-invariant (a row's output bits
// depend on its own context alone). kSplit: the split kernel, for every
// model. kTiles (paged_attention_tiles.cuh): the tile arithmetic, one chain
// a 64-key tile per (row, head), computed by a query-tiled kernel for the
// rows of sequences with several rows in the step (64 (row, head) slots of
// one sequence a block, as flash attention lays out a prefill) and by a
// decode kernel for single rows, to the same bits. bf16, f16 and fp8 pools
// (an fp8 tile dequantized as the split kernel does), head_dim 64 and 128,
// at most 16 query heads a kv head, no sliding window, soft-capping or sinks.
// The two arithmetics differ in their last bits: a model runs one of them
// for every step. The split kernel's tuning knobs, for benchmarks and tests,
// are in paged_attention_tuning.cuh.
enum class PagedAttentionKernel : uint8_t { kSplit, kTiles };

// Whether kTiles serves a model of these attention features.
bool paged_attention_tiles_support(int head_dim, int n_rep, int sliding_window, float softcap, bool sinks,
                                   DType kv_dtype);

// Scratch for split rows, allocated once. Rows beyond max_rows are processed in
// several launches (same result: the split plan is per row).
class PagedAttentionWorkspaceCuda {
 public:
  static constexpr int kMaxSplits = 32;
  PagedAttentionWorkspaceCuda(int32_t max_rows, int32_t n_heads, int32_t head_dim);

  int32_t max_rows() const { return max_rows_; }
  int32_t n_heads() const { return n_heads_; }
  int32_t head_dim() const { return head_dim_; }
  int32_t sm_count() const { return sm_count_; }  // of the current device
  float* partial_out() const {
    return partial_out_.data_as<float>();
  }  // [max_rows, n_heads, kMaxSplits, head_dim]
  float* partial_lse() const {
    return partial_lse_.data_as<float>();
  }  // [max_rows, n_heads, kMaxSplits] (log2)
  float* partial_ml() const {
    return partial_ml_.data_as<float>();
  }  // [max_rows, n_heads, kMaxSplits, 2] the tile decode kernel's (m, l)
  int32_t* items() const {
    return items_.data_as<int32_t>();
  }  // [max_rows * kMaxSplits], a launch's block list
  // The driver's cuTensorMapEncodeTiled (the type lives in a CUDA header).
  void* encode_tensor_map() const { return encode_tensor_map_; }

 private:
  int32_t max_rows_, n_heads_, head_dim_;
  int32_t sm_count_ = 0;
  void* encode_tensor_map_ = nullptr;
  Tensor partial_out_, partial_lse_, partial_ml_, items_;
};

// Writes this step's K/V to their slots: k_pool[slot_mapping[t]] = k[t] (slot < 0: skipped).
//   k, v: [T, n_kv_heads, head_dim] device, pool dtype (bf16 into an fp8 pool,
//   quantized with `scales`, which only an fp8 pool reads)
void paged_kv_write_cuda(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const Tensor& k_pool,
                         const Tensor& v_pool, cuda::Stream stream = nullptr, const KvScales& scales = {});

// Attention of every token of the step over its sequence's paged history,
// causal within the step: token t sees positions [0, positions[t]] of its
// sequence (as paged_attention_reference), or with a sliding window W > 0
// [positions[t] + 1 - W, positions[t]] (attention_window_begin; the split
// kernel only). A decode step has one token a sequence. The step's K/V must
// already be in the pools (paged_kv_write_cuda). softcap > 0 caps each scaled
// score to softcap * tanh(score / softcap) before the softmax (Gemma 2; the
// split kernel only), as paged_attention_reference does. sinks: [n_heads]
// f32 device pointer (gpt-oss; the split kernel only), query head h's sink
// logit joining its softmax's denominator as paged_attention_reference's
// PagedAttentionArgs::sinks; null: none. A row's split plan, and so its bits'
// independence of the batch, is the same with sinks as without. kv_scales: an
// fp8 pool's (both arithmetics dequantize a landed tile by the same rule).
// Soft-capping and sinks act on the scores, after the dequantized tile: they
// compose with an fp8 pool as with a bf16 one.
void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const DeviceBatch& batch, int n_rep, float scale, PagedAttentionWorkspaceCuda& ws,
                          const Tensor& out, cuda::Stream stream = nullptr,
                          PagedAttentionKernel kernel = PagedAttentionKernel::kSplit, int sliding_window = 0,
                          float softcap = 0.0f, const float* sinks = nullptr, const KvScales& kv_scales = {});

// What paged_attention_cuda would bake into its launches for this batch (grid,
// pipeline depth, kernel variant, the length of the block list), packed: equal
// keys launch alike, so a CUDA graph captured for one batch replays for another
// with the same key (and the same token count), its metadata being read from
// the device. For a call of one launch: at most ws.max_rows() tokens (checked).
uint64_t paged_attention_cuda_launch_key(const DeviceBatch& batch, const Tensor& k_pool, int n_rep,
                                         const PagedAttentionWorkspaceCuda& ws,
                                         PagedAttentionKernel kernel = PagedAttentionKernel::kSplit,
                                         int sliding_window = 0);

}  // namespace nanoserve
