// gelu_tanh_mul_cuda: the gated pass of ops/silu_mul/gated_mul_launch.cuh with
// the CPU's gelu_tanh_mul as its activation.

#include "ops/gelu_mul/gelu_mul_cuda.cuh"

#include "ops/silu_mul/gated_mul_launch.cuh"

namespace nanoserve {

namespace {

// The CPU's gelu_tanh_mul, operation by operation (each rounded on its own, no
// contraction into fused multiply-adds): 0.5 x (1 + tanh(b (x + k x x x))) u.
struct GeluTanh {
  __device__ __forceinline__ float operator()(float x, float u) const {
    constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
    constexpr float kKappa = 0.044715f;
    const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kKappa, x), x), x);
    const float t = tanhf(__fmul_rn(kBeta, __fadd_rn(x, cube)));
    return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t)), u);
  }
};

}  // namespace

void gelu_tanh_mul_cuda(const Tensor& gate_up, const Tensor& out, cuda::Stream s) {
  gated_mul::launch<GeluTanh>("gelu_tanh_mul_cuda", gate_up, out, s);
}

}  // namespace nanoserve
