#pragma once
// Rotary position embedding in the GGUF llama layout: the converter permutes
// the Q/K rows so that each rotated pair is ADJACENT, (2i, 2i+1), rotated by
// angle pos * inv_freq[i] (ggml's "normal" rope mode, not NeoX's (i, i + d/2)).
//   x: [T, n_heads, head_dim] f32, rotated in place
//   positions: [T] absolute positions
//   inv_freq: [rope_dim / 2] (rope_freqs.h); dims past rope_dim are untouched

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace nanoserve {

void rope_ref(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq);
void rope(Tensor& x, std::span<const int32_t> positions, std::span<const float> inv_freq, ThreadPool& pool);

}  // namespace nanoserve
