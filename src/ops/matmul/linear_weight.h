#pragma once
// A linear layer's weight as the CUDA linears take it (linear_cuda.cuh):
//   w [N, K] bf16; or
//   w [N, K] F8_E4M3 with scale [N] f32, row n standing for w[n, :] * scale[n]
//   (per output channel, as vLLM's and compressed-tensors' FP8 checkpoints).
// Plain C++, so that model headers without CUDA can hold one.

#include <cstdint>

#include "core/tensor.h"

namespace nanoserve {

struct LinearWeight {
  LinearWeight() = default;
  LinearWeight(Tensor w) : w(std::move(w)) {}  // NOLINT: a bf16 weight is a LinearWeight
  LinearWeight(Tensor w, Tensor scale) : w(std::move(w)), scale(std::move(scale)) {}

  bool fp8() const { return w.dtype() == DType::kF8E4M3; }
  int64_t rows() const { return w.dim(0); }
  int64_t cols() const { return w.dim(1); }
  int64_t nbytes() const { return (w.defined() ? w.nbytes() : 0) + (scale.defined() ? scale.nbytes() : 0); }

  Tensor w;
  Tensor scale;  // [N] f32 with FP8 weights; undefined with bf16
};

}  // namespace nanoserve
