#pragma once
// The query-tiled attention kernel (paged_attention_query_tiles.cu), which
// paged_attention_cuda runs under PagedAttentionTuning::query_tiles.
// Plain C++ declarations; the arguments are paged_attention_cuda's, already
// checked there (block_size_log2: the pools' block size).

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "ops/paged_attention/paged_attention_cuda.cuh"

namespace nanoserve::paged_attention_kernels {

// The thread blocks a kv head of the kernel's grid: its tiles of rows.
int query_tile_count(const DeviceBatch& batch, int n_rep);

void launch_query_tiles(const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                        const DeviceBatch& batch, int n_rep, float scale, PagedAttentionWorkspaceCuda& ws,
                        const Tensor& out, cuda::Stream stream, int block_size_log2,
                        bool dependent_launch);

}  // namespace nanoserve::paged_attention_kernels
