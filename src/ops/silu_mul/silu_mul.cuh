#pragma once
// SwiGLU arithmetic on packed bf16, shared by silu_mul_cuda.cu and the linear
// kernels that read the SwiGLU of gate_up as their input (linear_cuda.cu,
// linear_cuda_wgmma.cu, moe_cuda_experts.cu), so both give the same bits;
// and gpt-oss's clamped SwiGLU, shared by moe_cuda.cu and moe_cuda_experts.cu. Included only from .cu files.

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

// gpt-oss's clamped SwiGLU (ops/moe/moe.h, MoeActivation::kClampedSwiglu),
// as clamped_swiglu (CPU) writes it: g' = min(g, limit) (a NaN gate stays
// NaN), u' = clamp(u, -limit, limit), (u' + 1) * (g' * (1 / (1 + exp(-(g' alpha))))).
__device__ __forceinline__ float clamped_swiglu(float g, float u, float alpha, float limit) {
  const float gc = limit < g ? limit : g;
  const float uc = u < -limit ? -limit : (limit < u ? limit : u);
  return (uc + 1.0f) * (gc * (1.0f / (1.0f + expf(-(gc * alpha)))));
}

// The activations as functors act(gate, up) (f32), for the packed forms below
// and the gated pass (gated_mul_launch.cuh).
struct SiluMul {
  __device__ __forceinline__ float operator()(float g, float u) const { return silu_mul(g, u); }
};
struct ClampedSwiglu {
  float alpha, limit;
  __device__ __forceinline__ float operator()(float g, float u) const {
    return clamped_swiglu(g, u, alpha, limit);
  }
};

// Two packed bf16 outputs from two packed gates and ups, each rounded on its own.
template <typename Act>
__device__ __forceinline__ uint32_t gated2(uint32_t g, uint32_t u, const Act& act) {
  return f32_to_bf16_bits(act(bf16_bits_to_f32(g & 0xffffu), bf16_bits_to_f32(u & 0xffffu))) |
         (f32_to_bf16_bits(act(bf16_bits_to_f32(g >> 16), bf16_bits_to_f32(u >> 16))) << 16);
}

// Eight outputs from eight gates and the eight ups at the same columns.
template <typename Act>
__device__ __forceinline__ uint4 gated8(const uint4& g, const uint4& u, const Act& act) {
  return make_uint4(gated2(g.x, u.x, act), gated2(g.y, u.y, act), gated2(g.z, u.z, act),
                    gated2(g.w, u.w, act));
}

__device__ __forceinline__ uint4 silu_mul8(const uint4& g, const uint4& u) {
  return gated8(g, u, SiluMul{});
}

__device__ __forceinline__ uint4 clamped_swiglu8(const uint4& g, const uint4& u, float alpha, float limit) {
  return gated8(g, u, ClampedSwiglu{alpha, limit});
}

}  // namespace nanoserve::swiglu
