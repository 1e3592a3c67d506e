// Attention sinks (gpt-oss: one logit a query head joins the softmax's
// denominator, weighing no value), with and without a sliding window: the
// fast CPU kernel against the frozen reference, and bitwise against
// attend_row over a contiguous copy (the gather path's arithmetic). Sinks of
// -inf give the bits of no sinks; sinks ignored miss the reference by far.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"
#include "ops/attention/attention.h"
#include "ops/paged_attention/paged_attention.h"
#include "ops/paged_attention/paged_case.h"

namespace nanoserve {
namespace {

using Case = testing::PagedCase;

TEST(PagedAttention, SinksMatchReferenceAndGatherBitwise) {
  const Case c({{1, 1}, {17, 1}, {97, 1}, {97, 17}, {40, 40}}, 11);
  ThreadPool pool(2);
  const int64_t stride = paged_attention_cpu_scores_stride(Case::kRep, 97);
  std::vector<float> scores(2 * stride);
  // One sink a query head: above, among and below the scores.
  std::vector<float> sinks(Case::kKv * Case::kRep);
  for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = -3.0f + 1.0f * static_cast<float>(h);
  const std::vector<float> none(sinks.size(), -INFINITY);
  for (int32_t window : {0, 7}) {
    SCOPED_TRACE(::testing::Message() << "window " << window);
    std::vector<float> ref(c.q.size(), NAN), fast(c.q.size(), NAN), ignored(c.q.size(), NAN),
        fast_none(c.q.size(), NAN), plain(c.q.size(), NAN);
    ASSERT_TRUE(validate_paged_attention_args(c.args(ref.data(), window, 0.0f, sinks.data())).ok());
    paged_attention_reference(c.args(ref.data(), window, 0.0f, sinks.data()));
    paged_attention_reference(c.args(ignored.data(), window, 0.0f, nullptr));
    paged_attention_cpu(c.args(fast.data(), window, 0.0f, sinks.data()), pool, scores.data(), stride);
    paged_attention_cpu(c.args(fast_none.data(), window, 0.0f, none.data()), pool, scores.data(), stride);
    paged_attention_cpu(c.args(plain.data(), window, 0.0f, nullptr), pool, scores.data(), stride);
    const std::vector<float> gather = c.gather(window, 0.0f, sinks.data());
    float worst = 0, planted = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::fabs(fast[i] - ref[i]));
      planted = std::max(planted, std::fabs(ignored[i] - ref[i]));
      ASSERT_EQ(std::memcmp(&gather[i], &fast[i], sizeof(float)), 0) << "element " << i;
      ASSERT_EQ(std::memcmp(&fast_none[i], &plain[i], sizeof(float)), 0) << "element " << i;
    }
    EXPECT_LE(worst, 1e-5f);
    EXPECT_GT(planted, 1e-2f) << "the sinks do not bite";
  }
}

// The gather path's op (attention()) and its reference take the same sinks.
TEST(Attention, SinksMatchReference) {
  const Case c({{5, 5}, {33, 1}}, 12);
  ThreadPool pool(2);
  const int64_t row = int64_t{Case::kKv} * Case::kHd;
  std::vector<std::vector<float>> ks, vs;
  KVHistory hist;
  ForwardBatch batch;
  batch.seq_starts = c.starts;
  batch.positions = c.pos;
  batch.context_lens = c.ctx;
  batch.tokens.assign(c.pos.size(), 0);
  for (size_t b = 0; b < c.ctx.size(); ++b) batch.seq_ids.push_back(static_cast<int32_t>(b));
  for (size_t b = 0; b < c.ctx.size(); ++b) {
    ks.emplace_back(c.ctx[b] * row);
    vs.emplace_back(c.ctx[b] * row);
    for (int64_t p = 0; p < c.ctx[b]; ++p) {
      const int64_t slot =
          int64_t{c.tables[b * c.max_blocks + p / Case::kBlock]} * Case::kBlock + p % Case::kBlock;
      std::copy_n(c.k.data() + slot * row, row, ks.back().data() + p * row);
      std::copy_n(c.v.data() + slot * row, row, vs.back().data() + p * row);
    }
  }
  for (size_t b = 0; b < c.ctx.size(); ++b) {
    hist.k.push_back(ks[b].data());
    hist.v.push_back(vs[b].data());
  }
  hist.pos_stride = row;
  hist.head_stride = Case::kHd;
  const int64_t T = static_cast<int64_t>(c.pos.size()), H = Case::kKv * Case::kRep;
  std::vector<float> sinks(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) sinks[static_cast<size_t>(h)] = 0.5f * static_cast<float>(h) - 1.0f;
  std::vector<float> qv = c.q;
  const Tensor q = Tensor::view(qv.data(), DType::kF32, {T, H, Case::kHd}, nullptr);
  std::vector<float> ref_v(qv.size(), NAN), fast_v(qv.size(), NAN), paged_v(qv.size(), NAN);
  Tensor ref = Tensor::view(ref_v.data(), DType::kF32, {T, H, Case::kHd}, nullptr);
  Tensor fast = Tensor::view(fast_v.data(), DType::kF32, {T, H, Case::kHd}, nullptr);
  std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(pool.num_threads(), 33)));
  attention_ref(q, batch, hist, Case::kRep, 1.0f / 8.0f, ref, 0, 0.0f, sinks.data());
  attention(q, batch, hist, Case::kRep, 1.0f / 8.0f, fast, pool, scratch, 0, 0.0f, sinks.data());
  paged_attention_reference(c.args(paged_v.data(), 0, 0.0f, sinks.data()));
  for (size_t i = 0; i < qv.size(); ++i) {
    ASSERT_NEAR(fast_v[i], ref_v[i], 1e-5f) << "element " << i;
    ASSERT_NEAR(paged_v[i], ref_v[i], 1e-6f) << "element " << i;
  }
}

}  // namespace
}  // namespace nanoserve
