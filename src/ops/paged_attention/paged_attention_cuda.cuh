#pragma once
// CUDA paged attention: the KV write and the attention read through block
// tables, for bf16/f16 caches. Plain C++ declarations (no CUDA header), so the
// engine's .cc files built with NANOSERVE_CUDA can call them; the kernels live
// in paged_attention_cuda.cu. paged_attention_reference (CPU, f32) is the truth
// these are tested against.
//
// Pools, one per layer for K and one for V, as the CPU's:
//   [num_blocks, block_size, n_kv_heads, head_dim]  bf16 or f16
// (a head-major layout, one head's rows of a block contiguous, measured no
// faster and was removed: docs/log/kernels.md).
// block_size: a power of two >= 8. head_dim: 64 or 128.
// q, out: [T, n_heads, head_dim] in the pool dtype. n_heads = n_kv_heads * n_rep;
// query head h reads kv head h / n_rep.
//
// Determinism: how a row's context is split across thread blocks depends only on
// that row's context length (and head_dim), never on the batch, so a sequence's
// output is bitwise the same alone or in any batch, and whichever split-reduce
// variant runs.

#include <cstdint>
#include <vector>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "step/device_batch.cuh"

namespace nanoserve {

struct PagedAttentionCudaOptions {
  // The split plan (0: the defaults). It changes the order of the sums, so it is
  // a process-wide constant in the engine; other values are for benchmarks.
  int max_splits = 0;       // 1..kMaxSplits
  int min_split_tiles = 0;  // >= 1
  // Pipeline stages in flight per warp, 2..4. Changes no sum. 0: from the grid
  // size: 3 when every thread block of the launch fits at two an SM, else 2
  // (three blocks an SM), and never more than the longest split has tiles.
  int stages = 0;
  // Launch with programmatic dependent launch, so this call's launch overlaps
  // the tail of the kernel before it (the kernel waits before reading q, the
  // partials, or pool positions this step writes).
  bool dependent_launch = true;
  // With it, a thread block copies the rows of its first stages whose
  // positions lie before its sequence's first position in this step (written
  // by earlier steps, so stable) before that wait, the others after, paced: a
  // warp issues stage i's once stage i - 1 has landed, so the next call's
  // copies reach memory as a stream rather than one burst in front of this
  // call's q, refills and partials. Changes no sum.
  bool early_kv = true;
  // The rows of one sequence in an aligned window of positions share a thread
  // block, each (row, head) one column of the mma with its own causal end, so
  // an extend chunk reads each K/V tile once for the window: 16 columns (two
  // mma column tiles) of G heads, so 4 rows at G = 4, where no tile is held;
  // else 8 columns. Changes no sum.
  bool pair_rows = true;
  // In a launch whose blocks fit at two an SM, a split with more tiles than
  // stages reads its first tile into registers and refills that stage at
  // once, instead of once q has arrived and the tile is computed, and
  // computes its resident tiles as one batch. Changes no sum.
  bool hold_first_tile = true;
  // Where the first tile lies wholly before this step's rows, hold it and
  // issue the refill of its stage before the dependency wait, paced as one
  // more stage, so that no refill is on the chain after the wait (the next
  // call's early copies then move the whole split). Changes no sum.
  bool hold_before_wait = true;
  // Every row through the query-tiled kernel instead (paged_attention_query_tiles.cu):
  // 64 (row, head) slots of one sequence a block, on tensor cores, over whole
  // 64-key tiles, as flash attention lays out a prefill. Its rows are NOT
  // bitwise the split kernel's (another order of the sums): for steps that
  // gave up batch invariance (--cublas-prefill). The options above do not
  // apply to it, but dependent_launch.
  bool query_tiles = false;
};

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
  int32_t* items() const {
    return items_.data_as<int32_t>();
  }  // [max_rows * kMaxSplits], a launch's block list
  // The driver's cuTensorMapEncodeTiled (the type lives in a CUDA header).
  void* encode_tensor_map() const { return encode_tensor_map_; }

 private:
  int32_t max_rows_, n_heads_, head_dim_;
  int32_t sm_count_ = 0;
  void* encode_tensor_map_ = nullptr;
  Tensor partial_out_, partial_lse_, items_;
};

// Writes this step's K/V to their slots: k_pool[slot_mapping[t]] = k[t] (slot < 0: skipped).
//   k, v: [T, n_kv_heads, head_dim] device, pool dtype
void paged_kv_write_cuda(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const Tensor& k_pool,
                         const Tensor& v_pool, cuda::Stream stream = nullptr);

// Attention of every token of the step over its sequence's paged history,
// causal within the step: token t sees positions [0, positions[t]] of its
// sequence (as paged_attention_reference). A decode step has one token a sequence.
// The step's K/V must already be in the pools (paged_kv_write_cuda).
void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const DeviceBatch& batch, int n_rep, float scale,
                          PagedAttentionWorkspaceCuda& ws, const Tensor& out, cuda::Stream stream = nullptr,
                          const PagedAttentionCudaOptions& options = {});

// What paged_attention_cuda would bake into its launches for this batch (grid,
// pipeline depth, kernel variant, the length of the block list), packed: equal
// keys launch alike, so a CUDA graph captured for one batch replays for another
// with the same key (and the same token count), its metadata being read from
// the device. For a call of one launch: at most ws.max_rows() tokens (checked).
uint64_t paged_attention_cuda_launch_key(const DeviceBatch& batch, const Tensor& k_pool, int n_rep,
                                         const PagedAttentionWorkspaceCuda& ws,
                                         const PagedAttentionCudaOptions& options = {});

// How many thread blocks a row of context ctx is split over (1: no partials). For tests and benchmarks.
int paged_attention_cuda_num_splits(int ctx, int head_dim, const PagedAttentionCudaOptions& options = {});

}  // namespace nanoserve
