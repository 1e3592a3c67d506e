#pragma once
// Device-side tensor initialisation: pseudo-random fills for dummy weights,
// and the dtype conversions of weight upload. Plain C++ declarations (no CUDA
// header); the kernels are in fill_cuda.cu.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// t[i] = fill_uniform_value(seed, i, scale) (fill.h) over the flat index i,
// stored as t's dtype: f32 exactly, bf16 rounded to nearest even (so a bf16
// value can round to +-scale itself). t: contiguous, f32 or bf16, device.
void fill_uniform_cuda(const Tensor& t, uint64_t seed, float scale, cuda::Stream s);

// dst_bf16[i] = bf16(src[i]), rounded to nearest even (NaN stays NaN, overflow
// becomes inf: only f32 can overflow bf16's range).
//   src: f32, f16 or bf16 (a copy); dst_bf16: bf16, same element count; both
//   contiguous, on the device.
void convert_to_bf16_cuda(const Tensor& src, const Tensor& dst_bf16, cuda::Stream s);

}  // namespace nanoserve
