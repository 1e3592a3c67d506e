// CudaModel's swap area (docs/kvcache.md, "Swapping"): pinned host memory in
// the pools' layout and dtype, and the block copies between it and the pools, queued on
// the step's stream so that they are ordered before the next forward (and
// after the last one) without any host synchronisation.

#include <memory>
#include <string>

#include <unistd.h>

#include "core/cuda/cuda_check.cuh"
#include "core/cuda/device_memory.cuh"
#include "model/model_cuda.h"

namespace nanoserve {

Status CudaModel::allocate_swap(int32_t num_slots) {
  if (!step_) return failed_precondition("CudaModel::allocate_swap before allocate");
  if (swap_host_) return failed_precondition("CudaModel::allocate_swap called twice");
  if (num_slots < 1) return invalid_argument("swap space: num_slots must be >= 1");
  const ModelConfig& c = config_;
  // Bytes of one plane, in the pools' dtype (bf16 or f8e4m3).
  const int64_t plane =
      dtype_bytes(k_pools_.front().dtype(), int64_t{num_slots} * block_size_ * c.n_kv_heads * c.head_dim);
  const int64_t bytes = plane * 2 * c.n_layers;
  // Pinned pages cannot be paged out: more than half the machine's memory is refused up front
  // (cudaMallocHost would fail, or starve the host).
  const int64_t phys = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (phys > 0 && bytes > phys / 2) {
    return invalid_argument("swap space: " + std::to_string(bytes >> 20) +
                            " MiB of pinned memory is more than " + "half of this machine's " +
                            std::to_string(phys >> 20) + " MiB");
  }
  void* p = nullptr;
  if (const cudaError_t err = cudaMallocHost(&p, static_cast<size_t>(bytes)); err != cudaSuccess) {
    return resource_exhausted("swap space: cudaMallocHost of " + std::to_string(bytes >> 20) +
                              " MiB: " + cudaGetErrorString(err));
  }
  swap_host_ = std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  num_swap_slots_ = num_slots;
  return Status::ok_status();
}

Status CudaModel::swap_blocks(std::span<const BlockCopy> copies, bool out) {
  if (!swap_host_) return failed_precondition("swap copy without a swap area");
  const ModelConfig& c = config_;
  const int64_t L = c.n_layers;
  const size_t chunk = static_cast<size_t>(dtype_bytes(
      k_pools_.front().dtype(), int64_t{block_size_} * c.n_kv_heads * c.head_dim));  // one block, one plane
  const size_t host_plane = chunk * static_cast<size_t>(num_swap_slots_);
  auto* host = static_cast<uint8_t*>(swap_host_.get());
  auto stream = static_cast<cudaStream_t>(step_stream());
  // The pools are one allocation (allocate()): each layer's K (and V) plane a
  // fixed pitch after the last one's, so one 2D copy covers every layer. Should
  // a layout ever differ, each plane is copied on its own.
  auto base = [&](int64_t l, int kv) {
    return static_cast<uint8_t*>((kv == 0 ? k_pools_ : v_pools_)[l].data());
  };
  const ptrdiff_t pitch = L > 1 ? base(1, 0) - base(0, 0) : 0;
  bool uniform = pitch > 0;
  for (int64_t l = 1; l < L && uniform; ++l)
    uniform = base(l, 0) - base(l - 1, 0) == pitch && base(l, 1) - base(l - 1, 1) == pitch;
  for (const BlockCopy& cp : copies) {
    if (cp.block < 0 || cp.block >= num_blocks_ || cp.slot < 0 || cp.slot >= num_swap_slots_) {
      return invalid_argument("swap copy of block " + std::to_string(cp.block) + " / slot " +
                              std::to_string(cp.slot) + " outside the pool (" + std::to_string(num_blocks_) +
                              ") or the area (" + std::to_string(num_swap_slots_) + ")");
    }
  }
  const cudaMemcpyKind kind = out ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  for (size_t i = 0; i < copies.size();) {
    // A run: blocks and slots both consecutive.
    size_t n = 1;
    while (i + n < copies.size() && copies[i + n].block == copies[i].block + static_cast<int32_t>(n) &&
           copies[i + n].slot == copies[i].slot + static_cast<int32_t>(n))
      ++n;
    const size_t width = n * chunk;
    for (int kv = 0; kv < 2; ++kv) {
      // Host planes: [n_layers][2][slots]: layer l's K at 2l, V at 2l + 1.
      uint8_t* h = host + static_cast<size_t>(kv) * host_plane + copies[i].slot * chunk;
      const size_t h_pitch = 2 * host_plane;
      const int64_t rows = uniform ? L : 1;
      for (int64_t l = 0; l < L; l += rows) {
        uint8_t* d = base(l, kv) + static_cast<size_t>(copies[i].block) * chunk;
        uint8_t* hl = h + static_cast<size_t>(l) * h_pitch;
        const size_t d_pitch = uniform ? static_cast<size_t>(pitch) : width;
        const cudaError_t err =
            out ? cudaMemcpy2DAsync(hl, h_pitch, d, d_pitch, width, static_cast<size_t>(rows), kind, stream)
                : cudaMemcpy2DAsync(d, d_pitch, hl, h_pitch, width, static_cast<size_t>(rows), kind, stream);
        if (err != cudaSuccess) {
          return internal_error(std::string("swap ") + (out ? "out" : "in") + ": cudaMemcpy2DAsync: " +
                                cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
        }
      }
    }
    i += n;
  }
  return Status::ok_status();
}

}  // namespace nanoserve
