#pragma once
// CUDA token embedding lookup. Plain C++ declarations (no CUDA header); the
// kernel is in embedding_cuda.cu. embedding_ref (CPU) is the truth it is tested
// against.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"

namespace nanoserve {

// x[t, :] = f32(table[tokens[t], :]) * scale for t < num_tokens (the product
// in f32; Gemma scales its embeddings by sqrt(dim), 1 elsewhere, exact).
//   table: [vocab, dim] bf16 (device); tokens: [num_tokens] i32 (device pointer)
//   x: [>= num_tokens, dim] f32 (device); rows past num_tokens are left alone
// A token id outside [0, vocab) writes a NaN row and reads nothing: the id is
// only known on the device, so it cannot be reported here; the NaN reaches the
// logits, where it shows.
void embedding_cuda(const Tensor& table, const int32_t* tokens, int32_t num_tokens, const Tensor& x,
                    cuda::Stream s, float scale = 1.0f);

}  // namespace nanoserve
