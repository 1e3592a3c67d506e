// silu_mul_cuda: the gated pass of ops/silu_mul/gated_mul_launch.cuh with
// silu_mul.cuh's silu(gate) * up, the arithmetic the linear kernels that read the
// SwiGLU of gate_up share (so both give the same bits).

#include "ops/silu_mul/silu_mul_cuda.cuh"

#include "ops/silu_mul/gated_mul_launch.cuh"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve {

void silu_mul_cuda(const Tensor& gate_up, const Tensor& out, cuda::Stream s) {
  gated_mul::launch<swiglu::SiluMul>("silu_mul_cuda", gate_up, out, s);
}

}  // namespace nanoserve
