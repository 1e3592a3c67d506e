#pragma once
// The elementwise pass of a gated MLP, out[t, f] = bf16(act(gate) * up) over
// gate_up [T, 2F] bf16, for silu_mul_cuda.cu and gelu_mul_cuda.cu: each gives
// its activation as a functor (`Act{}(gate, up)`, f32: silu_mul.cuh's), and this header the
// shape checks, the layout and the launch. Included only from .cu files.
//
// One thread per unit of 8 outputs (two 16-byte loads, one 16-byte store)
// where F % 8 == 0 and the pointers allow (the up half then starts 16-byte
// aligned), else one thread per output. Flat over T * F units: a unit's math
// does not depend on where it sits, so neither does the result.

#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "core/tensor.h"
#include "ops/silu_mul/silu_mul.cuh"

namespace nanoserve::gated_mul {

constexpr int kThreads = 256;

template <typename Act, bool kVec>
__global__ void __launch_bounds__(kThreads) gated_mul_kernel(const uint16_t* __restrict__ gate_up, int64_t F,
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
    *reinterpret_cast<uint4*>(out + t * F + c) = swiglu::gated8(gv, uv, Act{});
  } else {
    const int64_t t = idx / F, f = idx - t * F;
    const uint16_t* g = gate_up + t * 2 * F + f;
    out[idx] = static_cast<uint16_t>(
        swiglu::f32_to_bf16_bits(Act{}(swiglu::bf16_bits_to_f32(g[0]), swiglu::bf16_bits_to_f32(g[F]))));
  }
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Checks the shapes (errors named after `name`) and launches on `s`.
template <typename Act>
void launch(const char* name, const Tensor& gate_up, const Tensor& out, cuda::Stream s) {
  NS_CHECK(gate_up.device() == Device::kCUDA && out.device() == Device::kCUDA) << name << ": device tensors";
  NS_CHECK(out.dtype() == DType::kBF16 && out.ndim() == 2 && out.is_contiguous())
      << name << ": out must be a contiguous [T, F] bf16 tensor, got " << dtype_name(out.dtype())
      << out.shape_string();
  const int64_t T = out.dim(0), F = out.dim(1);
  NS_CHECK(gate_up.dtype() == DType::kBF16 && gate_up.ndim() == 2 && gate_up.is_contiguous() &&
           gate_up.dim(0) == T && gate_up.dim(1) == 2 * F)
      << name << ": gate_up must be a contiguous [" << T << ", " << 2 * F << "] bf16 tensor, got "
      << dtype_name(gate_up.dtype()) << gate_up.shape_string();
  if (T == 0 || F == 0) return;
  const bool vec = F % 8 == 0 && aligned16(gate_up.data()) && aligned16(out.data());
  const int64_t units = vec ? T * F / 8 : T * F;
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  NS_CHECK(blocks <= INT32_MAX) << name << ": " << T << " x " << F << " is too large";
  const auto* gu = gate_up.data_as<const uint16_t>();
  auto kernel = vec ? gated_mul_kernel<Act, true> : gated_mul_kernel<Act, false>;
  cuda::launch_pdl(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s, gu, F, units,
                   out.data_as<uint16_t>());
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve::gated_mul
