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

namespace nanoserve {
namespace {

// One layer of sequences (context, new tokens) over shuffled blocks of 16.
struct Case {
  static constexpr int32_t kBlock = 16, kKv = 2, kRep = 4, kHd = 64;
  std::vector<float> q, k, v;
  std::vector<int32_t> tables, ctx, starts{0}, pos;
  int32_t max_blocks = 0, num_blocks = 0;

  explicit Case(const std::vector<std::pair<int32_t, int32_t>>& seqs, uint32_t seed) {
    std::mt19937 rng(seed);
    for (auto [c, n] : seqs) max_blocks = std::max(max_blocks, (c + kBlock - 1) / kBlock);
    num_blocks = static_cast<int32_t>(seqs.size()) * max_blocks;
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables = perm;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    k.resize(size_t{1} * num_blocks * kBlock * kKv * kHd);
    v.resize(k.size());
    for (float& x : k) x = 4.0f * u(rng);  // scores of several units, as the sinks
    for (float& x : v) x = u(rng);
    for (auto [c, n] : seqs) {
      ctx.push_back(c);
      for (int32_t i = 0; i < n; ++i) pos.push_back(c - n + i);
      starts.push_back(starts.back() + n);
    }
    q.resize(size_t{1} * pos.size() * kKv * kRep * kHd);
    for (float& x : q) x = u(rng);
  }
  PagedAttentionArgs args(float* out, int32_t window, const float* sinks) const {
    PagedAttentionArgs a;
    a.q = q.data();
    a.k_pool = k.data();
    a.v_pool = v.data();
    a.block_tables = tables.data();
    a.context_lens = ctx.data();
    a.seq_starts = starts.data();
    a.positions = pos.data();
    a.out = out;
    a.num_tokens = static_cast<int32_t>(pos.size());
    a.num_seqs = static_cast<int32_t>(ctx.size());
    a.num_blocks = num_blocks;
    a.block_size = kBlock;
    a.max_blocks_per_seq = max_blocks;
    a.n_heads = kKv * kRep;
    a.n_kv_heads = kKv;
    a.head_dim = kHd;
    a.scale = 1.0f / 8.0f;
    a.window = window;
    a.sinks = sinks;
    return a;
  }
  // attend_row over each sequence's history copied out of the blocks.
  std::vector<float> gather(int32_t window, const float* sinks) const {
    const int64_t row = int64_t{kKv} * kHd;
    std::vector<float> out(q.size(), NAN);
    for (size_t b = 0; b < ctx.size(); ++b) {
      std::vector<float> kc(ctx[b] * row), vc(ctx[b] * row), scores(ctx[b]);
      for (int64_t p = 0; p < ctx[b]; ++p) {
        const int64_t slot = int64_t{tables[b * max_blocks + p / kBlock]} * kBlock + p % kBlock;
        std::copy_n(k.data() + slot * row, row, kc.data() + p * row);
        std::copy_n(v.data() + slot * row, row, vc.data() + p * row);
      }
      for (int32_t t = starts[b]; t < starts[b + 1]; ++t) {
        for (int64_t h = 0; h < kKv * kRep; ++h) {
          const int64_t kvh = h / kRep, off = (int64_t{t} * kKv * kRep + h) * kHd;
          attend_row(
              q.data() + off, kHd, attention_window_begin(pos[t], window), pos[t] + 1,
              [&](int64_t p) { return kc.data() + p * row + kvh * kHd; },
              [&](int64_t p) { return vc.data() + p * row + kvh * kHd; }, 1.0f / 8.0f, scores.data(),
              out.data() + off, 0.0f, sinks + h);
        }
      }
    }
    return out;
  }
};

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
    ASSERT_TRUE(validate_paged_attention_args(c.args(ref.data(), window, sinks.data())).ok());
    paged_attention_reference(c.args(ref.data(), window, sinks.data()));
    paged_attention_reference(c.args(ignored.data(), window, nullptr));
    paged_attention_cpu(c.args(fast.data(), window, sinks.data()), pool, scores.data(), stride);
    paged_attention_cpu(c.args(fast_none.data(), window, none.data()), pool, scores.data(), stride);
    paged_attention_cpu(c.args(plain.data(), window, nullptr), pool, scores.data(), stride);
    const std::vector<float> gather = c.gather(window, sinks.data());
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
  paged_attention_reference(c.args(paged_v.data(), 0, sinks.data()));
  for (size_t i = 0; i < qv.size(); ++i) {
    ASSERT_NEAR(fast_v[i], ref_v[i], 1e-5f) << "element " << i;
    ASSERT_NEAR(paged_v[i], ref_v[i], 1e-6f) << "element " << i;
  }
}

}  // namespace
}  // namespace nanoserve
