#pragma once
// Sampling on the device: one token per logits row, with the CPU Sampler's
// rules (engine/sampler.h) for temperature, top-k, top-p and min-p, and the
// logprobs of the raw row. Plain C++ (no CUDA header): the runner fills these
// structs on the host; sample_cuda.cuh has the kernel's entry point.
//
// The rule, per row (V logits, params p, the request's uniform u):
//  - greedy (p.temperature == 0, which the engine sends below 1e-5): the argmax the runner computed (argmax.h);
//  - else l = x / T (only when T != 1), m = max l; a row whose m is not
//    finite (T so small that l overflows, or nothing but -inf) takes the
//    argmax too (the CPU sampler refuses such a row);
//  - the top-k set, top-p, min-p and the draw exactly as Sampler::sample:
//    ranked by (l desc, id asc), weights exp_nonpos(l - m) in f32, the sums in
//    the Sampler's fixed orders, u * total walked in rank order (id order when
//    no filter is on). For the same logits, params and u the token is the
//    CPU Sampler's token, bit for bit;
//  - a row whose ranked walk reaches past kSampleWindow candidates (top-p or
//    min-p keep more, or top-k > kSampleWindow with neither) is not drawn:
//    its token is kSampleOnHost, and the host runs the CPU Sampler on it with
//    the same u.
// NaN logits rank as -inf (the CPU Sampler has no rule for them).

#include <cstdint>

namespace nanoserve {

inline constexpr int32_t kSampleMaxLogprobs = 20;
inline constexpr int32_t kSampleWindow = 8192;      // ranked candidates one row may walk
inline constexpr int32_t kSampleMaxVocab = 262144;  // 256 blocks of 1024 ids
inline constexpr int32_t kSampleOnHost = -1;        // token: the host must sample this row

// One row's request. The runner packs R of them into one pinned buffer and
// copies them with one memcpy before the step (the captured graph reads them).
struct SampleRowParams {
  double u = 0.0;             // the request's Rng::next_double(), [0, 1); unused when greedy
  float temperature = 0.0f;   // 0: greedy
  int32_t top_k = -1;         // <= 0 or >= V: off
  float top_p = 1.0f;         // >= 1: off
  float min_p = 0.0f;         // <= 0: off
  int32_t num_logprobs = -1;  // -1: none; else the chosen token's logprob and the top min(n, 20)
  int32_t pad_ = 0;
};
static_assert(sizeof(SampleRowParams) == 32);

// One row's logprobs (of the raw row: log-softmax before temperature), as
// Sampler::logprobs: the chosen token's, and the n most likely, ties to the
// lowest id. Written only for rows that asked and were drawn on the device.
struct SampleRowLogprobs {
  float logprob = 0.0f;  // the chosen token's
  int32_t n = 0;         // top entries written
  int32_t top_ids[kSampleMaxLogprobs] = {};
  float top_logprobs[kSampleMaxLogprobs] = {};
};
static_assert(sizeof(SampleRowLogprobs) == 8 + 8 * kSampleMaxLogprobs);

}  // namespace nanoserve
