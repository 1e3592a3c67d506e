#pragma once
// CUDA sampling of one token per logits row, with exactly the rule of
// sample.h (the CPU Sampler's, bit for bit). Plain C++ declaration (no CUDA
// header); the kernel is in sample_cuda.cu, its design in docs/ops_cuda.md.

#include <cstdint>

#include "core/cuda/device_memory.cuh"
#include "core/tensor.h"
#include "step/sample_rows.h"

namespace nanoserve {

// tokens[r] = the token of row r, or kSampleOnHost.
//   logits: [R, V] f32 (device, contiguous), V <= kSampleMaxVocab
//   scaled: [R, V] f32 (device, contiguous) scratch: each sampled row's
//     logits over its temperature, written by a pass over all rows at once
//     and read by every later pass (the division made once an element)
//   params: [R] (device); argmax: [R] i32 (device), each row's greedy token
//   tokens: [R] i32 (device)
//   logprobs: [R] (device), written for rows with num_logprobs >= 0 and a
//     device token; null: no row's logprobs (num_logprobs ignored)
// No allocation; every argument is a device pointer, so a captured graph
// replays it for any params written into the same buffers.
void sample_cuda(const Tensor& logits, const Tensor& scaled, const SampleRowParams* params,
                 const int32_t* argmax, int32_t* tokens, SampleRowLogprobs* logprobs, cuda::Stream s);

}  // namespace nanoserve
