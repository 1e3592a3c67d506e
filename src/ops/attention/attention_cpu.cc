#include <functional>

#include "core/check.h"
#include "ops/attention/attend_row.h"
#include "ops/attention/attention.h"

namespace nanoserve {

namespace {
// Multiply-adds (over scores and values, per head) below which one thread runs the step.
constexpr int64_t kMinParallelWork = 1 << 16;
}  // namespace

int64_t attention_scratch_floats(int n_threads, int64_t max_context) { return n_threads * max_context; }

void attention(const Tensor& q, const ForwardBatch& batch, const KVHistory& hist, int n_rep, float scale,
               Tensor& out, ThreadPool& pool, std::span<float> scratch, int64_t window, float softcap,
               const float* sinks) {
  const int64_t T = q.dim(0), n_heads = q.dim(1), head_dim = q.dim(2);
  NS_CHECK(out.dim(0) == T && out.dim(1) == n_heads && out.dim(2) == head_dim && n_heads % n_rep == 0)
      << "attention shapes";
  NS_CHECK(static_cast<int64_t>(hist.k.size()) == batch.num_seqs()) << "history for every sequence";
  int64_t max_ctx = 0;
  for (int32_t c : batch.context_lens) max_ctx = std::max<int64_t>(max_ctx, c);
  NS_CHECK(static_cast<int64_t>(scratch.size()) >= attention_scratch_floats(pool.num_threads(), max_ctx))
      << "attention scratch " << scratch.size() << " for context " << max_ctx;
  const float* qs = q.data_as<const float>();
  float* os = out.data_as<float>();
  // Work items are (token, head) pairs; the sequence of a token is found by a
  // walk over seq_starts, which the items of one thread share.
  auto items = [&](int64_t begin, int64_t end, int thread) {
    float* scores = scratch.data() + thread * max_ctx;
    int32_t b = 0;
    for (int64_t item = begin; item < end; ++item) {
      const int32_t t = static_cast<int32_t>(item / n_heads);
      const int64_t h = item % n_heads;
      while (batch.seq_starts[b + 1] <= t) ++b;
      const int64_t n_ctx = static_cast<int64_t>(batch.positions[t]) + 1;
      NS_CHECK(n_ctx >= 1 && n_ctx <= batch.context_lens[b]) << "token " << t << " at position " << batch.positions[t];
      const float* kb = hist.k[b] + (h / n_rep) * hist.head_stride;
      const float* vb = hist.v[b] + (h / n_rep) * hist.head_stride;
      const int64_t ps = hist.pos_stride;
      attend_row(
          qs + (t * n_heads + h) * head_dim, head_dim, attention_window_begin(batch.positions[t], window),
          n_ctx, [&](int64_t p) { return kb + p * ps; }, [&](int64_t p) { return vb + p * ps; }, scale,
          scores, os + (t * n_heads + h) * head_dim, softcap, sinks != nullptr ? sinks + h : nullptr);
    }
  };
  // A decode step over short histories is a few microseconds of work: waking
  // the pool would cost more than it saves.
  int64_t work = 0;
  for (int64_t t = 0; t < T; ++t) work += (batch.positions[t] + 1) * n_heads * head_dim;
  if (work < kMinParallelWork) {
    items(0, T * n_heads, 0);
  } else {
    pool.parallel_for(T * n_heads, std::ref(items));
  }
}

}  // namespace nanoserve
