// Elementwise, grid-stride over the flat index (weight upload and dummy fills
// happen once, before the first step: simple beats fast here).

#include "ops/fill/fill_cuda.cuh"

#include <cuda_fp16.h>

#include <algorithm>

#include "core/cuda/cuda_check.cuh"
#include "ops/fill/fill.h"

namespace nanoserve {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

template <bool kBf16>
__global__ void fill_uniform_kernel(void* __restrict__ t, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const float v = fill_uniform_value(seed, static_cast<uint64_t>(i), scale);
    if constexpr (kBf16) {
      static_cast<uint16_t*>(t)[i] = f32_to_bf16_bits(v);
    } else {
      static_cast<float*>(t)[i] = v;
    }
  }
}

// kSrc: 0 f32, 1 f16, 2 bf16.
template <int kSrc>
__global__ void convert_kernel(const void* __restrict__ src, int64_t n, uint16_t* __restrict__ dst) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    if constexpr (kSrc == 0) {
      dst[i] = f32_to_bf16_bits(static_cast<const float*>(src)[i]);
    } else if constexpr (kSrc == 1) {
      dst[i] = f32_to_bf16_bits(__half2float(static_cast<const __half*>(src)[i]));  // f16 -> f32 is exact
    } else {
      dst[i] = static_cast<const uint16_t*>(src)[i];
    }
  }
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void fill_uniform_cuda(const Tensor& t, uint64_t seed, float scale, cuda::Stream s) {
  NS_CHECK(t.device() == Device::kCUDA && t.is_contiguous())
      << "fill_uniform_cuda: a contiguous device tensor";
  NS_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16)
      << "fill_uniform_cuda: f32 or bf16, got " << dtype_name(t.dtype());
  const int64_t n = t.numel();
  if (n == 0) return;
  if (t.dtype() == DType::kBF16) {
    fill_uniform_kernel<true><<<blocks_for(n), kThreads, 0, s>>>(t.data(), n, seed, scale);
  } else {
    fill_uniform_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(t.data(), n, seed, scale);
  }
  NS_CUDA_CHECK_LAUNCH();
}

void convert_to_bf16_cuda(const Tensor& src, const Tensor& dst_bf16, cuda::Stream s) {
  NS_CHECK(src.device() == Device::kCUDA && dst_bf16.device() == Device::kCUDA && src.is_contiguous() &&
           dst_bf16.is_contiguous())
      << "convert_to_bf16_cuda: contiguous device tensors";
  NS_CHECK(dst_bf16.dtype() == DType::kBF16 && dst_bf16.numel() == src.numel())
      << "convert_to_bf16_cuda: dst must be bf16 of " << src.numel() << " elements, got "
      << dtype_name(dst_bf16.dtype()) << dst_bf16.shape_string();
  const int64_t n = src.numel();
  if (n == 0) return;
  uint16_t* dst = dst_bf16.data_as<uint16_t>();
  switch (src.dtype()) {
    case DType::kF32: convert_kernel<0><<<blocks_for(n), kThreads, 0, s>>>(src.data(), n, dst); break;
    case DType::kF16: convert_kernel<1><<<blocks_for(n), kThreads, 0, s>>>(src.data(), n, dst); break;
    case DType::kBF16: convert_kernel<2><<<blocks_for(n), kThreads, 0, s>>>(src.data(), n, dst); break;
    default: NS_CHECK(false) << "convert_to_bf16_cuda: source dtype " << dtype_name(src.dtype());
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
