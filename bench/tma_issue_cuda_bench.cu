// What a bulk copy (cp.async.bulk, global -> shared) costs the warp that issues
// it, by copy size: one warp a thread block, one or two blocks an SM, each block
// copying a fixed number of bytes from scattered 4 KB-aligned places of a 4 GiB
// buffer as copies of 256 B .. 16 KB, all completing on one mbarrier. Prints,
// per configuration, the median time a warp spends issuing its copies, the
// median and worst time until they have all landed, and the bytes of all blocks
// over the whole span. The paged attention kernel's copy path (docs/kernels.md,
// v6) is sized from these numbers.
//
//   tma_issue_cuda_bench

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/ptx.cuh"

namespace {

using nanoserve::cuda::smem_addr;

constexpr int kReps = 5;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One warp: `copies` copies of copy_bytes each, source 4 KB pages picked by a
// hash, destinations cycling through the first smem_bytes of shared memory. Writes
// (start, issued, landed) in ns to out[3 * block].
__global__ void issue_kernel(const char* src, int64_t src_pages, int copy_bytes, int copies, int smem_bytes,
                             uint64_t* out, uint32_t seed) {
  extern __shared__ __align__(128) char smem[];
  __shared__ uint64_t bar;
  const int lane = threadIdx.x;
  if (lane == 0) {
    nanoserve::cuda::mbarrier_init(&bar, 1);
    nanoserve::cuda::mbarrier_arrive_expect_tx(&bar, static_cast<uint32_t>(copies) * copy_bytes);
  }
  nanoserve::cuda::fence_for_async_proxy();
  __syncwarp();
  const uint64_t t0 = global_ns();
  for (int c = lane; c < copies; c += 32) {
    uint32_t h = (blockIdx.x * 0x9E3779B1u + static_cast<uint32_t>(c) * 0x85EBCA77u) ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    const int64_t page = h % src_pages;
    const int in_page = (c * copy_bytes) % 4096 / copy_bytes * copy_bytes;  // 0 for copies >= 4 KB
    nanoserve::cuda::bulk_copy(smem + c % (smem_bytes / copy_bytes) * copy_bytes, src + page * 4096 + in_page,
                               copy_bytes, &bar);
  }
  __syncwarp();
  const uint64_t t1 = global_ns();
  nanoserve::cuda::mbarrier_wait(&bar, 0);
  const uint64_t t2 = global_ns();
  if (lane == 0) {
    out[3 * blockIdx.x] = t0;
    out[3 * blockIdx.x + 1] = t1;
    out[3 * blockIdx.x + 2] = t2;
  }
}

}  // namespace

int main() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  const int64_t src_bytes = int64_t{4} << 30;
  char* src = nullptr;
  NS_CUDA_CHECK(cudaMalloc(&src, src_bytes));
  NS_CUDA_CHECK(cudaMemset(src, 1, src_bytes));
  uint64_t* out = nullptr;
  NS_CUDA_CHECK(cudaMalloc(&out, 3 * sizeof(uint64_t) * 2 * sms));
  constexpr int kMaxSmem = 200 * 1024;
  NS_CUDA_CHECK(cudaFuncSetAttribute(issue_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSmem));
  std::printf("%d SMs; one warp a block\n", sms);
  std::printf(
      "| blocks/SM | bytes/block | copy bytes | copies | issue us (median) | landed us (median) | "
      "landed us (worst) | TB/s |\n|---|---|---|---|---|---|---|---|\n");
  for (int per_sm : {1, 2}) {
    const int smem = kMaxSmem / per_sm;
    for (int per_block : {32768, 131072}) {
      for (int copy_bytes : {256, 1024, 4096, 16384}) {
        const int copies = per_block / copy_bytes;
        const int blocks = sms * per_sm;
        std::vector<double> issued, landed;
        double tbs = 0;
        for (int rep = 0; rep < kReps; ++rep) {
          issue_kernel<<<blocks, 32, smem>>>(src, src_bytes / 4096, copy_bytes, copies, smem, out,
                                             static_cast<uint32_t>(rep) * 7919u);
          NS_CUDA_CHECK_LAUNCH();
          NS_CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<uint64_t> h(3 * static_cast<size_t>(blocks));
          NS_CUDA_CHECK(cudaMemcpy(h.data(), out, 8 * h.size(), cudaMemcpyDeviceToHost));
          uint64_t first = ~uint64_t{0}, last = 0;
          for (int b = 0; b < blocks; ++b) {
            issued.push_back((h[3 * b + 1] - h[3 * b]) / 1e3);
            landed.push_back((h[3 * b + 2] - h[3 * b]) / 1e3);
            first = std::min(first, h[3 * b]);
            last = std::max(last, h[3 * b + 2]);
          }
          if (rep > 0)
            tbs = std::max(tbs, static_cast<double>(per_block) * blocks / ((last - first) * 1e-9) / 1e12);
        }
        std::sort(issued.begin(), issued.end());
        std::sort(landed.begin(), landed.end());
        std::printf("| %d | %d | %d | %d | %.2f | %.2f | %.2f | %.2f |\n", per_sm, per_block, copy_bytes,
                    copies, issued[issued.size() / 2], landed[landed.size() / 2], landed.back(), tbs);
      }
    }
  }
  NS_CUDA_CHECK(cudaFree(src));
  NS_CUDA_CHECK(cudaFree(out));
  return 0;
}
