#pragma once
// CUDA RMSNorm over the f32 residual stream, with an optional fused residual
// add. Plain C++ declarations (no CUDA header); the kernels are in
// rmsnorm_cuda.cu. rmsnorm_ref (CPU) is the truth they are tested against.
//
// Determinism: one thread block per row, its size a function of dim alone, and
// the sum of squares reduced in one fixed order (each thread's elements in
// index order, a butterfly within each warp, the warp totals in warp order), so
// a row's output is bitwise the same whatever T is.

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// What out receives: the bf16 rows as x's; the same in the k order in which
// linear_cuda's tiled kernel reads its input (linear_cuda_layout.cuh:
// linear_cuda_permuted then takes out with no permute pass); or, for an FP8
// linear, its E4M3 tokens (out is then that linear's scratch, at least
// linear_cuda_scratch_elems(T, dim) bf16, which linear_cuda_fp8_tokens
// reads: bitwise the natural rows through linear_cuda). The last two need
// dim % 64 == 0 and 16-byte aligned tensors.
enum class RmsNormOut { kNatural, kLinearTiled, kFp8Tokens };

// out[t] = bf16(x[t] * rsqrt(mean(x[t]^2) + eps) * w), in f32.
//   x: [T, dim] f32, w: [dim] f32, out: [T, dim] bf16 (all device, contiguous)
void rmsnorm_cuda(const Tensor& x, const Tensor& w, float eps, const Tensor& out, cuda::Stream s,
                  RmsNormOut order = RmsNormOut::kNatural);

// The residual add, then the norm: x[t] += f32(delta[t]) (x is updated in
// place), then out[t] = rmsnorm(x[t]) as above. With delta_bias, x[t] +=
// f32(delta[t]) + delta_bias (gpt-oss's o_proj bias), the sum in f32.
//   delta: [T, dim] bf16 (the o_proj or down_proj output); delta_bias: [dim] f32 or null
void add_rmsnorm_cuda(const Tensor& x, const Tensor& delta, const Tensor& w, float eps, const Tensor& out,
                      cuda::Stream s, RmsNormOut order = RmsNormOut::kNatural,
                      const Tensor* delta_bias = nullptr);

// Gemma's sandwich norm of the sublayer's output, the residual add, then the
// next norm: x[t] += rmsnorm(f32(delta[t])) * post_w (in f32, not rounded to
// bf16), then out[t] = rmsnorm(x[t]) * w as above. Both norms use eps.
//   post_w: [dim] f32 (the post-attention or post-feed-forward norm weight)
void post_norm_add_rmsnorm_cuda(const Tensor& x, const Tensor& delta, const Tensor& post_w, const Tensor& w,
                                float eps, const Tensor& out, cuda::Stream s,
                                RmsNormOut order = RmsNormOut::kNatural);

}  // namespace nanoserve
