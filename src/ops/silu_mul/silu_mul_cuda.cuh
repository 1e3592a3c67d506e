#pragma once
// CUDA SwiGLU over the fused gate/up GEMM's output. Plain C++ declaration (no
// CUDA header); the kernel is in silu_mul_cuda.cu. silu_mul_ref (CPU) is the
// truth it is tested against.

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// out[t, f] = bf16(silu(gate) * up) with gate = gate_up[t, f], up = gate_up[t, F + f],
// silu(g) = g / (1 + exp(-g)), in f32.
//   gate_up: [T, 2F] bf16 (gate columns 0..F-1, up columns F..2F-1), out: [T, F] bf16 (device, contiguous)
void silu_mul_cuda(const Tensor& gate_up, const Tensor& out, cuda::Stream s);

}  // namespace nanoserve
