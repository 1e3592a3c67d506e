// One thread per unit of 8 outputs (two 16-byte loads, one 16-byte store) where
// F % 8 == 0 and the pointers allow, else one thread per output, as
// silu_mul_cuda. Flat over T * F units: a unit's math does not depend on where
// it sits, so neither does the result.

#include "ops/gelu_mul/gelu_mul_cuda.cuh"

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve {

namespace {

constexpr int kThreads = 256;

using swiglu::bf16_bits_to_f32;
using swiglu::f32_to_bf16_bits;

// The CPU's gelu_tanh_mul, operation by operation (each rounded on its own, no
// contraction into fused multiply-adds): 0.5 x (1 + tanh(b (x + k x x x))) u.
__device__ __forceinline__ float gelu_tanh_mul(float x, float u) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float cube = __fmul_rn(__fmul_rn(__fmul_rn(kKappa, x), x), x);
  const float t = tanhf(__fmul_rn(kBeta, __fadd_rn(x, cube)));
  return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t)), u);
}

__device__ __forceinline__ uint32_t gelu_mul2(uint32_t g, uint32_t u) {
  return f32_to_bf16_bits(gelu_tanh_mul(bf16_bits_to_f32(g & 0xffffu), bf16_bits_to_f32(u & 0xffffu))) |
         (f32_to_bf16_bits(gelu_tanh_mul(bf16_bits_to_f32(g >> 16), bf16_bits_to_f32(u >> 16))) << 16);
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) gelu_mul_kernel(const uint16_t* __restrict__ gate_up, int64_t F,
                                                            int64_t units, uint16_t* __restrict__ out) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= units) return;
  if constexpr (kVec) {
    const int64_t per_row = F / 8;
    const int64_t t = idx / per_row, c = (idx - t * per_row) * 8;  // row, first column
    const uint16_t* g = gate_up + t * 2 * F + c;
    const uint4 gv = *reinterpret_cast<const uint4*>(g);
    const uint4 uv = *reinterpret_cast<const uint4*>(g + F);
    *reinterpret_cast<uint4*>(out + t * F + c) = make_uint4(gelu_mul2(gv.x, uv.x), gelu_mul2(gv.y, uv.y),
                                                            gelu_mul2(gv.z, uv.z), gelu_mul2(gv.w, uv.w));
  } else {
    const int64_t t = idx / F, f = idx - t * F;
    const uint16_t* g = gate_up + t * 2 * F + f;
    out[idx] = static_cast<uint16_t>(
        f32_to_bf16_bits(gelu_tanh_mul(bf16_bits_to_f32(g[0]), bf16_bits_to_f32(g[F]))));
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void gelu_tanh_mul_cuda(const Tensor& gate_up, const Tensor& out, cuda::Stream s) {
  NS_CHECK(gate_up.device() == Device::kCUDA && out.device() == Device::kCUDA)
      << "gelu_tanh_mul_cuda: device tensors";
  NS_CHECK(out.dtype() == DType::kBF16 && out.ndim() == 2 && out.is_contiguous())
      << "gelu_tanh_mul_cuda: out must be a contiguous [T, F] bf16 tensor, got " << dtype_name(out.dtype())
      << out.shape_string();
  const int64_t T = out.dim(0), F = out.dim(1);
  NS_CHECK(gate_up.dtype() == DType::kBF16 && gate_up.ndim() == 2 && gate_up.is_contiguous() &&
           gate_up.dim(0) == T && gate_up.dim(1) == 2 * F)
      << "gelu_tanh_mul_cuda: gate_up must be a contiguous [" << T << ", " << 2 * F << "] bf16 tensor, got "
      << dtype_name(gate_up.dtype()) << gate_up.shape_string();
  if (T == 0 || F == 0) return;
  const bool vec = F % 8 == 0 && aligned16(gate_up.data()) && aligned16(out.data());
  const int64_t units = vec ? T * F / 8 : T * F;
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  NS_CHECK(blocks <= INT32_MAX) << "gelu_tanh_mul_cuda: " << T << " x " << F << " is too large";
  const auto* gu = gate_up.data_as<const uint16_t>();
  if (vec) {
    cuda::launch_pdl(gelu_mul_kernel<true>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s, gu, F,
                     units, out.data_as<uint16_t>());
  } else {
    cuda::launch_pdl(gelu_mul_kernel<false>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s, gu, F,
                     units, out.data_as<uint16_t>());
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
