#pragma once
// The k order in which the tiled kernel of linear_cuda.cuh reads x: within
// each 64-wide chunk of a row, 32-bit word 8 t + c (t < 4, c < 8: bf16
// elements 16 t + 2 c and 16 t + 2 c + 1) sits at word 4 c + t, so that
// step s of the mma reads one contiguous quarter (linear_cuda_common.cuh).
// The tiled kernel's own permute writes x so, and so may a kernel that
// produces x (rmsnorm_cuda's permuted output), which then spares that pass.
// Device code; included from .cu files only.

namespace nanoserve::linear_detail {

constexpr int kChunkWords = 32;  // 32-bit words of a 64-wide chunk

// Where word q (0..31) of a chunk goes.
__host__ __device__ constexpr int permuted_word(int q) {
  return 4 * (q & 7) + (q >> 3);
}

}  // namespace nanoserve::linear_detail
