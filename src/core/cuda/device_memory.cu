#include "core/cuda/device_memory.cuh"

#include <memory>

#include "core/cuda/cuda_check.cuh"

namespace nanoserve::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later checks do not see it
    return 0;
  }
  if (n == 0 && why) *why = "the runtime reports 0 devices";
  return n;
}

DeviceInfo device_info() {
  int dev = 0;
  NS_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NS_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  DeviceInfo info;
  info.name = prop.name;
  info.sm_count = prop.multiProcessorCount;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.l2_bytes = prop.l2CacheSize;
  info.global_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  return info;
}

Tensor empty(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const int64_t bytes = std::max<int64_t>(256, (dtype_bytes(dtype, n) + 255) / 256 * 256);
  void* p = nullptr;
  NS_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
  std::shared_ptr<void> owner(p, [](void* q) {
    // At process exit the runtime may already be unloaded; that is not an error.
    const cudaError_t err = cudaFree(q);
    NS_CHECK(err == cudaSuccess || err == cudaErrorCudartUnloading)
        << "cudaFree: " << cudaGetErrorString(err);
  });
  return Tensor::view(p, dtype, std::move(shape), std::move(owner), Device::kCUDA);
}

namespace {
void check_same(const Tensor& a, const Tensor& b) {
  NS_CHECK(a.dtype() == b.dtype() && a.shape() == b.shape())
      << dtype_name(a.dtype()) << a.shape_string() << " vs " << dtype_name(b.dtype()) << b.shape_string();
  NS_CHECK(a.is_contiguous() && b.is_contiguous()) << "copies need contiguous tensors";
}

void copy(void* dst, const void* src, int64_t bytes, cudaMemcpyKind kind, Stream stream) {
  if (bytes == 0) return;
  if (stream == nullptr) {
    NS_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(bytes), kind));
  } else {
    NS_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream));
  }
}
}  // namespace

void copy_to_device(const Tensor& host_src, const Tensor& dev_dst, Stream stream) {
  check_same(host_src, dev_dst);
  NS_CHECK(host_src.device() == Device::kCPU && dev_dst.device() == Device::kCUDA)
      << "copy_to_device: wrong devices";
  copy(dev_dst.data(), host_src.data(), host_src.nbytes(), cudaMemcpyHostToDevice, stream);
}

void copy_to_host(const Tensor& dev_src, const Tensor& host_dst, Stream stream) {
  check_same(dev_src, host_dst);
  NS_CHECK(dev_src.device() == Device::kCUDA && host_dst.device() == Device::kCPU)
      << "copy_to_host: wrong devices";
  copy(host_dst.data(), dev_src.data(), dev_src.nbytes(), cudaMemcpyDeviceToHost, stream);
}

void copy_bytes_to_device(void* dev_dst, const void* host_src, int64_t bytes, Stream stream) {
  copy(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, stream);
}

Tensor to_device(const Tensor& host) {
  Tensor dev = empty(host.dtype(), host.shape());
  copy_to_device(host, dev);
  return dev;
}

Tensor to_host(const Tensor& dev) {
  Tensor host = Tensor::empty(dev.dtype(), dev.shape());
  copy_to_host(dev, host);
  return host;
}

void fill_bytes(const Tensor& dev, uint8_t byte, Stream stream) {
  NS_CHECK(dev.device() == Device::kCUDA && dev.is_contiguous())
      << "fill_bytes: needs a contiguous device tensor";
  NS_CUDA_CHECK(cudaMemsetAsync(dev.data(), byte, static_cast<size_t>(dev.nbytes()), stream));
  if (stream == nullptr) NS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

std::shared_ptr<void> pinned_host(int64_t bytes) {
  void* p = nullptr;
  NS_CUDA_CHECK(cudaMallocHost(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16))));
  return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
}

void synchronize() {
  NS_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace nanoserve::cuda
