#pragma once
// Tensors in CUDA device memory, and copies between host and device.
// This header is plain C++ (no CUDA header), so .cc code built with
// NANOSERVE_CUDA can use it; the definitions live in device_memory.cu.
//
// Device tensors come from plain cudaMalloc (never managed memory) and are
// freed when the last Tensor sharing the storage goes away. Allocate them up
// front (a Workspace), not inside the step loop: cudaMalloc synchronises.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

struct CUstream_st;

namespace nanoserve::cuda {

using Stream = CUstream_st*;  // cudaStream_t; nullptr is the legacy default stream

// Number of usable CUDA devices. Never aborts: 0 when there is no driver or no
// device, with the runtime's reason in *why (if given).
int device_count(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  int64_t l2_bytes = 0;
  int64_t global_bytes = 0;
};
DeviceInfo device_info();

// Owning device tensor, contents uninitialised. 256-byte aligned.
Tensor empty(DType dtype, std::vector<int64_t> shape);

// Same-shape, same-dtype contiguous copies. Synchronous with respect to the host
// when stream is null (plain cudaMemcpy); otherwise queued on `stream`.
void copy_to_device(const Tensor& host_src, const Tensor& dev_dst, Stream stream = nullptr);
void copy_to_host(const Tensor& dev_src, const Tensor& host_dst, Stream stream = nullptr);
void copy_bytes_to_device(void* dev_dst, const void* host_src, int64_t bytes, Stream stream = nullptr);

Tensor to_device(const Tensor& host);  // new device tensor holding a copy
Tensor to_host(const Tensor& dev);     // new host tensor holding a copy

// Fills every byte of a contiguous device tensor with `byte` (0xFF makes f32,
// f16 and bf16 elements NaN: used to poison outputs in tests).
void fill_bytes(const Tensor& dev, uint8_t byte, Stream stream = nullptr);

// Pinned (page-locked) host memory of at least `bytes`, freed with its last owner.
std::shared_ptr<void> pinned_host(int64_t bytes);

void synchronize();  // waits for the whole device; checks for asynchronous errors

}  // namespace nanoserve::cuda
