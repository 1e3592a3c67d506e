// One thread per element, flat: an element's value depends on itself alone.

#include "ops/softcap/softcap_cuda.cuh"

#include <cmath>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"

namespace nanoserve {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) softcap_kernel(float* __restrict__ x, int64_t n, float cap) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = __fmul_rn(cap, tanhf(__fdiv_rn(x[i], cap)));
}

}  // namespace

void softcap_cuda(const Tensor& x, float cap, cuda::Stream s) {
  NS_CHECK(x.device() == Device::kCUDA && x.dtype() == DType::kF32 && x.is_contiguous())
      << "softcap_cuda: x must be a contiguous f32 device tensor, got " << dtype_name(x.dtype())
      << x.shape_string();
  NS_CHECK(cap > 0.0f && std::isfinite(cap)) << "softcap_cuda: cap " << cap;
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  NS_CHECK(blocks <= INT32_MAX) << "softcap_cuda: " << n << " elements";
  cuda::launch_pdl(softcap_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, s,
                   x.data_as<float>(), n, cap);
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
