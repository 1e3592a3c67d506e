#pragma once
// The KV write of the CUDA paged attention (device code), included only by
// paged_attention_cuda.cu, which launches it: this step's K and V rows to
// their pool slots, in either pool layout.

#include "ops/paged_attention/paged_attention_common.cuh"

namespace nanoserve::paged_attention_kernels {

// k_pool[slot_mapping[t]] = k[t], the same for v. A token's row is n_kv heads of
// head_chunks 16-byte chunks; s (PoolStrides in chunks) places head h of slot
// (block b, offset i) at b * block + h * head + i * token.
__global__ void paged_kv_write_kernel(const uint4* k, const uint4* v, uint4* k_pool, uint4* v_pool,
                                      const int32_t* slot_mapping, int n_kv, int head_chunks,
                                      int block_size_log2, PoolStrides s) {
  const int t = blockIdx.x;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // padding token
  const int chunks = n_kv * head_chunks;
  const int64_t src = static_cast<int64_t>(t) * chunks;
  const int64_t base = (slot >> block_size_log2) * s.block + (slot & ((1 << block_size_log2) - 1)) * s.token;
  for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
    const int64_t dst = base + (c / head_chunks) * s.head + c % head_chunks;
    k_pool[dst] = k[src + c];
    v_pool[dst] = v[src + c];
  }
}

}  // namespace nanoserve::paged_attention_kernels
