#pragma once
// The block list of an attention launch whose rows share blocks (pair_rows):
// one entry per (leading row, split) that has work, in row then split order,
// so the split kernel's grid holds no block that would only return. Device
// code, included only by paged_attention_cuda.cu, which launches it just
// before the split kernel and sizes that grid from the same count on the host
// (row_blocks over the pinned copy of the metadata).

#include <cub/block/block_scan.cuh>

#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve::paged_attention_kernels {

constexpr int kItemsThreads = 1024;

// One block: thread i counts row r0 + i's blocks, a scan places them.
// items: [n_items], (row - row_offset) << kItemSplitBits | split.
template <typename T, int HD, int kWindow>
__global__ void __launch_bounds__(kItemsThreads)
    attention_items_kernel(const __grid_constant__ AttnParams<T> p, int32_t* __restrict__ items) {
  using Scan = cub::BlockScan<int, kItemsThreads>;
  __shared__ typename Scan::TempStorage scan;
  launch_dependents();  // the split kernel may be scheduled; it waits for this list
  // The list of the previous layer's launch may still be read until the kernel before has finished.
  wait_primary_grid();
  const int rows = p.row_end - p.row_offset;
  int base = 0;
  for (int r0 = 0; r0 < rows; r0 += kItemsThreads) {
    const int u = r0 + static_cast<int>(threadIdx.x);
    const int n =
        u < rows ? row_blocks(p.row_meta, p.positions, p.row_offset, p.row_end, p.row_offset + u, kWindow,
                              Geometry<HD>::kTileTokens, p.max_splits, p.min_split_tiles, p.sliding_window)
                 : 0;
    int at = 0, total = 0;
    Scan(scan).ExclusiveSum(n, at, total);
    for (int s = 0; s < n; ++s) items[base + at + s] = u << kItemSplitBits | s;
    base += total;
    __syncthreads();  // the scan's storage is reused
  }
}

}  // namespace nanoserve::paged_attention_kernels
