#pragma once
// The KV write of the CUDA paged attention (device code), included only by
// paged_attention_cuda.cu, which launches it: this step's K and V rows to
// their pool slots, in either pool layout; into an FP8 pool, quantized
// (core/kv_quant.h).

#include "core/cuda/kv_quant.cuh"
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

// The same into E4M3 pools: k, v [T, n_kv, head_dim] bf16, each element
// quantized with its pool's scale (cuda::kv_f8_quantize). An item is 8
// elements: one 16-byte load, one 8-byte store; s (PoolStrides) in items.
__global__ void paged_kv_write_f8_kernel(const uint4* k, const uint4* v, uint2* k_pool, uint2* v_pool,
                                         const int32_t* slot_mapping, int n_kv, int head_items,
                                         int block_size_log2, PoolStrides s, float k_scale, float v_scale) {
  const int t = blockIdx.x;
  const int slot = slot_mapping[t];
  if (slot < 0) return;  // padding token
  const int items = n_kv * head_items;
  const int64_t src = static_cast<int64_t>(t) * items;
  const int64_t base = (slot >> block_size_log2) * s.block + (slot & ((1 << block_size_log2) - 1)) * s.token;
  auto quantize8 = [](uint4 x, float scale) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    uint32_t q[2] = {0u, 0u};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t bits16 = (w[e / 2] >> (16 * (e % 2))) & 0xffffu;
      const uint32_t b = cuda::kv_f8_quantize(__uint_as_float(bits16 << 16), scale);
      q[e / 4] |= b << (8 * (e % 4));
    }
    return make_uint2(q[0], q[1]);
  };
  for (int c = threadIdx.x; c < items; c += blockDim.x) {
    const int64_t dst = base + (c / head_items) * s.head + c % head_items;
    k_pool[dst] = quantize8(k[src + c], k_scale);
    v_pool[dst] = quantize8(v[src + c], v_scale);
  }
}

}  // namespace nanoserve::paged_attention_kernels
