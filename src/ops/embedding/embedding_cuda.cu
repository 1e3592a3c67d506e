// One thread block per token: the row is copied bf16 -> f32 (exact: a bf16 is
// the top half of an f32), 8 elements (16 bytes read, 32 written) a thread
// where dim % 8 == 0 and the pointers allow, else one element a thread.

#include "ops/embedding/embedding_cuda.cuh"

#include <algorithm>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"

namespace nanoserve {

namespace {

constexpr int kMaxThreads = 256;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

template <bool kVec>
__global__ void embedding_kernel(const uint16_t* __restrict__ table, const int32_t* __restrict__ tokens,
                                 int32_t vocab, int32_t dim, float scale, float* __restrict__ x) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int32_t t = static_cast<int32_t>(blockIdx.x);
  const int32_t id = tokens[t];
  float* out = x + static_cast<int64_t>(t) * dim;
  if (id < 0 || id >= vocab) {
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) out[i] = __uint_as_float(0x7fc00000u);
    return;
  }
  const uint16_t* row = table + static_cast<int64_t>(id) * dim;
  // times the family's scale (Gemma's sqrt(dim)); 1 leaves every value as it is.
  auto f32 = [scale](uint32_t bits16) { return __fmul_rn(bf16_bits_to_f32(bits16), scale); };
  if constexpr (kVec) {
    const uint4* src = reinterpret_cast<const uint4*>(row);
    float4* dst = reinterpret_cast<float4*>(out);
    for (int32_t v = threadIdx.x; v < dim / 8; v += blockDim.x) {
      const uint4 w = src[v];  // 8 bf16, element 0 in the low half of w.x
      dst[2 * v] = make_float4(f32(w.x & 0xffffu), f32(w.x >> 16), f32(w.y & 0xffffu), f32(w.y >> 16));
      dst[2 * v + 1] = make_float4(f32(w.z & 0xffffu), f32(w.z >> 16), f32(w.w & 0xffffu), f32(w.w >> 16));
    }
  } else {
    for (int32_t i = threadIdx.x; i < dim; i += blockDim.x) out[i] = f32(row[i]);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void embedding_cuda(const Tensor& table, const int32_t* tokens, int32_t num_tokens, const Tensor& x,
                    cuda::Stream s, float scale) {
  NS_CHECK(table.device() == Device::kCUDA && x.device() == Device::kCUDA)
      << "embedding_cuda: device tensors";
  NS_CHECK(table.dtype() == DType::kBF16 && table.ndim() == 2 && table.is_contiguous())
      << "embedding_cuda: table must be a contiguous [vocab, dim] bf16 tensor, got "
      << dtype_name(table.dtype()) << table.shape_string();
  NS_CHECK(x.dtype() == DType::kF32 && x.ndim() == 2 && x.is_contiguous() && x.dim(1) == table.dim(1))
      << "embedding_cuda: x must be a contiguous [T, " << table.dim(1) << "] f32 tensor, got "
      << dtype_name(x.dtype()) << x.shape_string();
  NS_CHECK(num_tokens >= 0 && num_tokens <= x.dim(0))
      << "embedding_cuda: " << num_tokens << " tokens for x of " << x.dim(0) << " rows";
  NS_CHECK(table.dim(0) <= INT32_MAX && table.dim(1) <= INT32_MAX) << "embedding_cuda: table too large";
  if (num_tokens == 0) return;
  NS_CHECK(tokens != nullptr) << "embedding_cuda: tokens is null";
  const int32_t vocab = static_cast<int32_t>(table.dim(0)), dim = static_cast<int32_t>(table.dim(1));
  const bool vec = dim % 8 == 0 && aligned16(table.data()) && aligned16(x.data());
  const int32_t units = vec ? dim / 8 : dim;
  const int threads = std::clamp((units + 31) / 32 * 32, 32, kMaxThreads);
  const auto* tab = table.data_as<const uint16_t>();
  if (vec) {
    cuda::launch_pdl(embedding_kernel<true>, dim3(num_tokens), dim3(threads), 0, s, tab, tokens, vocab, dim,
                     scale, x.data_as<float>());
  } else {
    cuda::launch_pdl(embedding_kernel<false>, dim3(num_tokens), dim3(threads), 0, s, tab, tokens, vocab, dim,
                     scale, x.data_as<float>());
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
