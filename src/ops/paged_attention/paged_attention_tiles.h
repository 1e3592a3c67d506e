#pragma once
// The tile arithmetic's kernels (paged_attention_tiles.cu), which
// paged_attention_cuda runs for PagedAttentionKernel::kTiles. Plain C++
// declarations; the arguments are paged_attention_cuda's, already checked
// there (block_size_log2: the pools' block size).

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "ops/paged_attention/paged_attention_cuda.cuh"

namespace nanoserve::paged_attention_kernels {

// Opts every tile kernel into its dynamic shared memory, once, outside any
// step or graph capture (PagedAttentionWorkspaceCuda's constructor).
void opt_in_tile_kernels();

// The thread blocks a kv head of the query-tiled kernel's grid: its tiles of
// rows (of the sequences with several rows in the step).
int query_tile_count(const DeviceBatch& batch, int n_rep);
// The splits a decode row of the batch may have (the decode grid's y; 0:
// the batch has no decode row).
int tile_decode_splits(const DeviceBatch& batch);
// The decode launch's shape, neither of which changes a sum:
//   group, the consecutive splits of a row a decode block walks (1, 2 or 4).
// Over fp8 pools, the largest of at most half the row's splits that
// leaves at least kGroupBlocksPerSm blocks an SM, so that a block's fixed
// cost (its pipeline's first copies, q, the epilogue) is paid once for
// several splits where the grid has blocks to spare; 1 over 16-bit pools,
// which run near the copy ceiling without it and lose 1-4% with it
// (docs/log/kernels.md).
//   stages, the pipeline's (3, two blocks an SM, where the grid's blocks fit
// in one wave so; else 2, three an SM).
// A non-zero `group` or `stages` (PagedAttentionTuning's) is taken as given.
// paged_attention_cuda's launch and its graph key both read it from here.
constexpr int kMaxSplitGroup = 4;
constexpr int kGroupBlocksPerSm = 12;  // four waves at three blocks an SM
struct TileDecodeShape {
  int group, stages;
};
TileDecodeShape tile_decode_shape(const DeviceBatch& batch, int n_kv, int sm_count, DType kv_dtype, int group,
                                  int stages);

// Every row of the step: the rows of sequences with several rows through the
// query-tiled kernel, the others through the decode kernel.
void launch_tiles(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool, const DeviceBatch& batch,
                  int n_rep, float scale, PagedAttentionWorkspaceCuda& ws, const Tensor& out,
                  cuda::Stream stream, int block_size_log2, bool dependent_launch, bool early_kv,
                  TileDecodeShape decode,      // tile_decode_shape's
                  const KvScales& kv_scales);  // an fp8 pool's

}  // namespace nanoserve::paged_attention_kernels
