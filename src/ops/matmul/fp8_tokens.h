#pragma once
// The tokens as the CUDA FP8 linears read them (W8A8, linear_cuda.cuh), on
// the host: each row of x rounded to bf16, then to E4M3 codes by the one
// FP8 rule (ops/matmul/fp8_quant.cuh: scale = max |row| / 448, 1 for a zero
// row; code = row / scale to nearest even, saturated), and back to
// code x scale. The CPU forward applies it to each layer linear's input when
// Workspace::fp8_tokens is set: a reference with the GPU's FP8 arithmetic.

#include <cstdint>

namespace nanoserve {

// x: [rows, cols] f32, row-major, replaced in place. NaN stays NaN.
void e4m3_tokens_round_trip(float* x, int64_t rows, int64_t cols);

}  // namespace nanoserve
