#pragma once
// SwiGLU: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise.
//   gate, up, out: [T, F] f32 (out may alias gate or up)

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

void silu_mul_ref(const Tensor& gate, const Tensor& up, Tensor& out);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out, ThreadPool& pool);

}  // namespace nanoserve
