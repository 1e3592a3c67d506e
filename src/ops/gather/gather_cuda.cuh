#pragma once
// CUDA row gather: the rows of the step that need logits, before the lm_head.
// Plain C++ declaration (no CUDA header); the kernel is in gather_cuda.cu.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// out[r, :] = x[rows[r], :] for r < num_rows: a byte copy, so any 2- or 4-byte
// dtype works (the model's is bf16 after the final norm).
//   x: [T, dim] (device); rows: [num_rows] i32 (device pointer)
//   out: [>= num_rows, dim], same dtype as x (device); rows past num_rows are left alone
// A row index outside [0, T) fills that output row with 0xFF bytes (NaN in
// f32, f16 and bf16) and reads nothing.
void gather_rows_cuda(const Tensor& x, const int32_t* rows, int32_t num_rows, const Tensor& out,
                      cuda::Stream s);

}  // namespace nanoserve
