#pragma once
// The split kernel's tuning knobs, for benchmarks and tests
// (bench/paged_attention_cuda_bench.cu, tests/ops/paged_attention): the
// engine runs the defaults through paged_attention_cuda.cuh's entry points,
// which take only the kernel. Every knob but the split plan changes no sum;
// the split plan is a process-wide constant in the engine.

#include <cstdint>

#include "ops/paged_attention/paged_attention_cuda.cuh"

namespace nanoserve {

struct PagedAttentionTuning {
  // The split plan (0: the defaults). It changes the order of the sums, so it is
  // a process-wide constant in the engine; other values are for benchmarks.
  int max_splits = 0;       // 1..kMaxSplits
  int min_split_tiles = 0;  // >= 1
  // Pipeline stages in flight per warp, 2..4 (the tile arithmetic: its
  // decode kernel's stages, 2 or 3; 0: tile_decode_shape). Changes no sum. 0: from the grid
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
  // The tile arithmetic instead (PagedAttentionKernel::kTiles: the
  // query-tiled and the tile decode kernels). Its rows are NOT bitwise the
  // split kernel's (another order of the sums). The options above do not
  // apply to it, but dependent_launch and early_kv.
  bool tiles = false;
  // The tile decode kernel's consecutive splits a block (1, 2 or 4; 0:
  // tile_decode_shape). Changes no sum.
  int split_group = 0;
};

// paged_attention_cuda and paged_attention_cuda_launch_key (paged_attention_cuda.cuh)
// with every knob given.
void paged_attention_cuda(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                          const DeviceBatch& batch, int n_rep, float scale, PagedAttentionWorkspaceCuda& ws,
                          const Tensor& out, cuda::Stream stream, const PagedAttentionTuning& tuning,
                          int sliding_window = 0, float softcap = 0.0f, const float* sinks = nullptr,
                          const KvScales& kv_scales = {});
uint64_t paged_attention_cuda_launch_key(const DeviceBatch& batch, const Tensor& k_pool, int n_rep,
                                         const PagedAttentionWorkspaceCuda& ws,
                                         const PagedAttentionTuning& tuning, int sliding_window = 0);

// How many thread blocks a row of context ctx is split over (1: no partials).
int paged_attention_cuda_num_splits(int ctx, int head_dim, const PagedAttentionTuning& tuning = {});

}  // namespace nanoserve
