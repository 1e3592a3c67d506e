// One thread block per gathered row; 16-byte copies where the row bytes and
// pointers allow, else 2-byte copies (every supported dtype is a whole number
// of 2-byte words).

#include "ops/gather/gather_cuda.cuh"

#include <algorithm>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"

namespace nanoserve {

namespace {

constexpr int kMaxThreads = 256;

// W: the copy word (uint4 or uint16_t); words: a row's words.
template <typename W>
__global__ void gather_rows_kernel(const W* __restrict__ x, const int32_t* __restrict__ rows, int32_t num_src,
                                   int64_t words, W* __restrict__ out) {
  cuda::wait_primary_grid();  // launched dependent (core/cuda/launch.cuh)
  cuda::launch_dependents();
  const int32_t r = static_cast<int32_t>(blockIdx.x);
  const int32_t src = rows[r];
  W* dst = out + static_cast<int64_t>(r) * words;
  if (src < 0 || src >= num_src) {
    W nan_word;
    if constexpr (sizeof(W) == 16) {
      nan_word = make_uint4(~0u, ~0u, ~0u, ~0u);
    } else {
      nan_word = static_cast<W>(0xffffu);
    }
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = nan_word;
    return;
  }
  const W* from = x + static_cast<int64_t>(src) * words;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = from[i];
}

}  // namespace

void gather_rows_cuda(const Tensor& x, const int32_t* rows, int32_t num_rows, const Tensor& out,
                      cuda::Stream s) {
  NS_CHECK(x.device() == Device::kCUDA && out.device() == Device::kCUDA)
      << "gather_rows_cuda: device tensors";
  NS_CHECK(x.ndim() == 2 && x.is_contiguous() && out.ndim() == 2 && out.is_contiguous())
      << "gather_rows_cuda: contiguous 2-d tensors, got x" << x.shape_string() << " out"
      << out.shape_string();
  NS_CHECK(x.dtype() == out.dtype() && x.dim(1) == out.dim(1))
      << "gather_rows_cuda: x " << dtype_name(x.dtype()) << x.shape_string() << " vs out "
      << dtype_name(out.dtype()) << out.shape_string();
  const int64_t elem = dtype_bytes(x.dtype(), 1);
  NS_CHECK(!dtype_info(x.dtype()).quantized && (elem == 2 || elem == 4))
      << "gather_rows_cuda: dtype " << dtype_name(x.dtype());
  NS_CHECK(num_rows >= 0 && num_rows <= out.dim(0))
      << "gather_rows_cuda: " << num_rows << " rows for out of " << out.dim(0);
  NS_CHECK(x.dim(0) <= INT32_MAX) << "gather_rows_cuda: x has too many rows";
  if (num_rows == 0 || x.dim(1) == 0) return;
  NS_CHECK(rows != nullptr) << "gather_rows_cuda: rows is null";
  const int64_t row_bytes = x.dim(1) * elem;
  const int32_t num_src = static_cast<int32_t>(x.dim(0));
  const bool vec = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out.data()) % 16 == 0;
  const int64_t words = vec ? row_bytes / 16 : row_bytes / 2;
  const int threads = static_cast<int>(std::clamp<int64_t>((words + 31) / 32 * 32, 32, kMaxThreads));
  if (vec) {
    cuda::launch_pdl(gather_rows_kernel<uint4>, dim3(num_rows), dim3(threads), 0, s, x.data_as<const uint4>(),
                     rows, num_src, words, out.data_as<uint4>());
  } else {
    cuda::launch_pdl(gather_rows_kernel<uint16_t>, dim3(num_rows), dim3(threads), 0, s,
                     x.data_as<const uint16_t>(), rows, num_src, words, out.data_as<uint16_t>());
  }
  NS_CUDA_CHECK_LAUNCH();
}

}  // namespace nanoserve
