#pragma once
// The one E4M3 quantization rule of the FP8 linears, for weight rows
// (quantize_fp8_rows_cuda), token rows (linear_cuda_fp8.cu) and a norm's
// FP8 output (rmsnorm_cuda): scale = max |row| / 448 (1 for a zero row),
// code = row / scale rounded to nearest even and saturated (core/half.h's
// f32_to_f8e4m3 on the host, bit for bit). Device code; .cu files only.

#include <cuda_fp8.h>

#include <cstdint>

namespace nanoserve::linear_detail {

__device__ __forceinline__ float e4m3_scale(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

// The scale of a row that a block's threads read, from each thread's max
// |value| (amax): reduced over the block (blockDim.x a multiple of 32; the
// caller's __shared__ warp_max holds blockDim.x / 32 floats), then
// e4m3_scale. Every thread of the block must call it; it synchronises once.
// A max is exact in any order, so the scale is the row's whatever the split.
__device__ __forceinline__ float e4m3_block_scale(float amax, float* warp_max) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = warp_max[0];
  for (int i = 1; i < static_cast<int>(blockDim.x / 32); ++i) amax = fmaxf(amax, warp_max[i]);
  return e4m3_scale(amax);
}

__device__ __forceinline__ uint32_t e4m3_code(float v, float scale) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3));
}

}  // namespace nanoserve::linear_detail
