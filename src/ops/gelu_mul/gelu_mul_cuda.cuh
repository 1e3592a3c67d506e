#pragma once
// CUDA GeGLU (Gemma's MLP) over the fused gate/up GEMM's output. Plain C++
// declaration (no CUDA header); the kernel is in gelu_mul_cuda.cu.
// gelu_tanh_mul_ref (CPU) is the truth it is tested against, and the CPU
// forward's gelu_tanh_mul is the arithmetic it follows.

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// out[t, f] = bf16(gelu_tanh(gate) * up) with gate = gate_up[t, f], up = gate_up[t, F + f],
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), in f32.
//   gate_up: [T, 2F] bf16 (gate columns 0..F-1, up columns F..2F-1), out: [T, F] bf16 (device, contiguous)
void gelu_tanh_mul_cuda(const Tensor& gate_up, const Tensor& out, cuda::Stream s);

}  // namespace nanoserve
