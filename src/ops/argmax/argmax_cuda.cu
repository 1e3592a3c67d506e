// One thread block of 1024 threads per row. Each thread scans its elements
// (16-byte loads, 8 in flight a thread, where V % 4 == 0 and the row is
// aligned; else one float at a time), then the block reduces the (value,
// index) pairs. The comparison is a strict total order on the numbers (value
// descending, then index ascending) and NaN is never taken, so the winner is
// the same whatever the order of the reduction: exactly argmax_ref's.
//
// One block streams a row of V floats from one SM: about V * 4 bytes at tens
// of GB/s (a 128k-vocab row is 0.5 MB, a few microseconds); many rows fill the
// GPU. Splitting a row over blocks would need a workspace.

#include "ops/argmax/argmax_cuda.cuh"

#include <climits>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"

namespace nanoserve {

namespace {

constexpr int kThreads = 1024;
constexpr int kUnroll = 8;

struct Best {
  float v;
  int32_t i;  // INT32_MAX: nothing taken yet
};

// a beats b: larger value, or the same value at a lower index. NaN never reaches here.
__device__ __forceinline__ bool beats(float av, int32_t ai, float bv, int32_t bi) {
  return av > bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void take(Best& b, float v, int32_t i) {
  if (!isnan(v) && beats(v, i, b.v, b.i)) b = {v, i};
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const float* __restrict__ logits, int32_t V, int32_t* __restrict__ out) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  // -inf with no index: a real -inf at any index beats it (same value, lower index).
  Best b{-INFINITY, INT32_MAX};
  if constexpr (kVec) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int32_t n4 = V / 4;
    for (int32_t base = threadIdx.x; base < n4; base += kThreads * kUnroll) {
      float4 r[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t q = base + u * kThreads;
        r[u] = q < n4 ? __ldcs(row4 + q) : make_float4(NAN, NAN, NAN, NAN);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int32_t i = 4 * (base + u * kThreads);
        take(b, r[u].x, i);
        take(b, r[u].y, i + 1);
        take(b, r[u].z, i + 2);
        take(b, r[u].w, i + 3);
      }
    }
  } else {
    for (int32_t i = threadIdx.x; i < V; i += kThreads) take(b, __ldcs(row + i), i);
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, b.v, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, b.i, off);
    if (beats(ov, oi, b.v, b.i)) b = {ov, oi};
  }
  __shared__ float warp_v[kThreads / 32];
  __shared__ int32_t warp_i[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_v[warp] = b.v;
    warp_i[warp] = b.i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (beats(warp_v[w], warp_i[w], b.v, b.i)) b = {warp_v[w], warp_i[w]};
    }
    out[blockIdx.x] = b.i == INT32_MAX ? V - 1 : b.i;
  }
}

}  // namespace

void argmax_cuda(const Tensor& logits, int32_t* out, cuda::Stream s) {
  NS_CHECK(logits.device() == Device::kCUDA) << "argmax_cuda: logits must be on the device";
  NS_CHECK(logits.dtype() == DType::kF32 && logits.ndim() == 2 && logits.is_contiguous())
      << "argmax_cuda: logits must be a contiguous [R, V] f32 tensor, got " << dtype_name(logits.dtype())
      << logits.shape_string();
  const int64_t R = logits.dim(0), V = logits.dim(1);
  NS_CHECK(V > 0 && V <= (int64_t{1} << 30) && R <= INT32_MAX)
      << "argmax_cuda: shape " << logits.shape_string();
  if (R == 0) return;
  NS_CHECK(out != nullptr) << "argmax_cuda: out is null";
  const bool vec = V % 4 == 0 && reinterpret_cast<uintptr_t>(logits.data()) % 16 == 0;
  const int32_t v32 = static_cast<int32_t>(V);
  if (vec) {
    cuda::launch_pdl(argmax_kernel<true>, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, s,
                     logits.data_as<const float>(), v32, out);
  } else {
    cuda::launch_pdl(argmax_kernel<false>, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, s,
                     logits.data_as<const float>(), v32, out);
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
