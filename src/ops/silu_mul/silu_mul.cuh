#pragma once
// SwiGLU arithmetic on packed bf16, shared by silu_mul_cuda.cu and the linear
// kernels that read the SwiGLU of gate_up as their input (linear_cuda.cu,
// linear_cuda_wgmma.cu), so both give the same bits. Included only from .cu files.

#include <cstdint>

namespace nanoserve::swiglu {

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

__device__ __forceinline__ uint32_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;  // NaN stays NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;                    // nearest even
}

// silu(g) * u in f32, silu(g) = g / (1 + exp(-g)).
__device__ __forceinline__ float silu_mul(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

// Two packed bf16 outputs from two packed gates and ups.
__device__ __forceinline__ uint32_t silu_mul2(uint32_t g, uint32_t u) {
  return f32_to_bf16_bits(silu_mul(bf16_bits_to_f32(g & 0xffffu), bf16_bits_to_f32(u & 0xffffu))) |
         (f32_to_bf16_bits(silu_mul(bf16_bits_to_f32(g >> 16), bf16_bits_to_f32(u >> 16))) << 16);
}

// Eight outputs from eight gates and the eight ups at the same columns.
__device__ __forceinline__ uint4 silu_mul8(const uint4& g, const uint4& u) {
  return make_uint4(silu_mul2(g.x, u.x), silu_mul2(g.y, u.y), silu_mul2(g.z, u.z), silu_mul2(g.w, u.w));
}

}  // namespace nanoserve::swiglu
