#pragma once
// Causal attention of this step's queries over each sequence's K/V history
// (the gather path: ops/paged_attention/paged_kv.h, or the CPU runner's
// per-sequence storage).
//   q, out: [T, n_heads, head_dim] f32
//   Token t of sequence b attends to history positions [0, positions[t]]: itself
//   and what came before (PRECOND: positions[t] < context_lens[b], as the cache's
//   ForwardBatch::validate checks); with a sliding window w > 0, only the last
//   w of those (attend_row.h's attention_window_begin). Query head h reads kv
//   head h / n_rep (GQA by index). softcap > 0: each scaled score becomes
//   softcap * tanh(score / softcap) before the softmax (Gemma 2); 0: none.
//   sinks [n_heads] f32 (gpt-oss): head h's sink logit joins its softmax's
//   denominator, exp(sinks[h] - m) beside the scores' (not scaled, weighing
//   no value); null: none.

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "step/forward_batch.h"

namespace nanoserve {

// Each sequence's K/V history for one layer, as a gather read returns it.
// K of sequence b, position p, kv head h starts at
//   k[b] + p * pos_stride + h * head_stride   (f32, head_dim contiguous)
// for p in [0, batch.context_lens[b]). The same for V.
struct KVHistory {
  std::vector<const float*> k;  // [B]
  std::vector<const float*> v;  // [B]
  int64_t pos_stride = 0;
  int64_t head_stride = 0;
};

// Plain truth: double accumulation, no shared code with the fast path.
void attention_ref(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
                   Tensor& out, int64_t window = 0, float softcap = 0.0f, const float* sinks = nullptr);

// Scratch floats attention() needs: one row of scores per thread.
int64_t attention_scratch_floats(int n_threads, int64_t max_context);

// Threads over (token, head); each row reduced by attend_row (attend_row.h),
// the same reduction the fused paged read uses, so both agree bitwise.
void attention(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
               Tensor& out, ThreadPool& pool, std::span<float> scratch, int64_t window = 0,
               float softcap = 0.0f, const float* sinks = nullptr);

}  // namespace nanoserve
