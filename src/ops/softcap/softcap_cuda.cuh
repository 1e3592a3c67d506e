#pragma once
// CUDA soft-capping of the final logits (Gemma 2), in place. Plain C++
// declaration (no CUDA header); the kernel is in softcap_cuda.cu. The CPU
// forward's softcap_into (model/model_cpu.cc) is the arithmetic it follows.

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// x[i] = cap * tanh(x[i] / cap) for every element, in f32 (a division, as
// transformers writes it, not a product with 1 / cap).
//   x: [R, V] f32 (device, contiguous); cap > 0
void softcap_cuda(const Tensor& x, float cap, cuda::Stream s);

}  // namespace nanoserve
