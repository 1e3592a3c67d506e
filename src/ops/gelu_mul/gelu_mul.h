#pragma once
// GeGLU (Gemma's MLP): out = gelu_tanh(gate) * up, elementwise, with GELU's
// tanh approximation (PyTorch's approximate="tanh", HF's gelu_pytorch_tanh):
//   gelu_tanh(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
//   gate, up, out: [T, F] f32 (out may alias gate or up)

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

// Plain truth, in double.
void gelu_tanh_mul_ref(const Tensor& gate, const Tensor& up, Tensor& out);
// f32, threads over elements; each element's arithmetic is fixed.
void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool);

}  // namespace nanoserve
