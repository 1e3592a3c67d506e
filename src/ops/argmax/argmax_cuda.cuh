#pragma once
// CUDA greedy argmax over the logit rows, with exactly argmax_ref's rule (see
// argmax.h: largest value, ties to the lowest index, NaN never wins, an all-NaN
// row gives V - 1). Plain C++ declaration (no CUDA header); the kernel is in
// argmax_cuda.cu.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// out[r] = argmax(logits[r, :]).
//   logits: [R, V] f32 (device, contiguous); out: [R] i32 device pointer
void argmax_cuda(const Tensor& logits, int32_t* out, cuda::Stream s);

}  // namespace nanoserve
