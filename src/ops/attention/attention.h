#pragma once
// Causal attention of this step's queries over each sequence's K/V history
// (the gather path; kvcache/kv_cache.h).
//   q, out: [T, n_heads, head_dim] f32
//   Token t of sequence b attends to history positions [0, positions[t]]: itself
//   and what came before (PRECOND: positions[t] < context_lens[b], as the cache's
//   begin_step checks). Query head h reads kv head h / n_rep (GQA by index).

#include <span>

#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kvcache/kv_cache.h"
#include "model/forward_batch.h"

namespace nanoserve {

// Plain truth: double accumulation, no shared code with the fast path.
void attention_ref(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
                   Tensor& out);

// Scratch floats attention() needs: one row of scores per thread.
int64_t attention_scratch_floats(int n_threads, int64_t max_context);

// Threads over (token, head); each row reduced by attend_row (attend_row.h),
// the same reduction the fused paged read uses, so both agree bitwise.
void attention(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
               Tensor& out, ThreadPool& pool, std::span<float> scratch);

}  // namespace nanoserve
