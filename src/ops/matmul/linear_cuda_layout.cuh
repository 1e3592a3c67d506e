#pragma once
// The k order in which the tiled kernel of linear_cuda.cuh reads x: within
// each 64-wide chunk of a row, 32-bit word 8 t + c (t < 4, c < 8: bf16
// elements 16 t + 2 c and 16 t + 2 c + 1) sits at word 4 c + t, so that
// step s of the mma reads one contiguous quarter (linear_cuda_common.cuh).
// The tiled kernel's own permute writes x so, and so may a kernel that
// produces x (rmsnorm_cuda's permuted output), which then spares that pass.
// Also where the FP8 kernel's tokens sit in its scratch, which a norm may
// write (rmsnorm_cuda's FP8 output). Device code; included from .cu files only.

#include <cstdint>

namespace nanoserve::linear_detail {

constexpr int kChunkWords = 32;  // 32-bit words of a 64-wide chunk

// Where word q (0..31) of a chunk goes.
__host__ __device__ constexpr int permuted_word(int q) {
  return 4 * (q & 7) + (q >> 3);
}

// The FP8 kernel's tokens in its scratch (linear_cuda_fp8.cu): M x K E4M3
// codes, rows contiguous, then from byte fp8_scales_offset(M, K) M f32
// scales; fp8_tokens_bytes in all.
__host__ __device__ constexpr int64_t fp8_scales_offset(int64_t M, int64_t K) {
  return (M * K + 15) / 16 * 16;
}
__host__ __device__ constexpr int64_t fp8_tokens_bytes(int64_t M, int64_t K) {
  return fp8_scales_offset(M, K) + M * 4;
}

}  // namespace nanoserve::linear_detail
