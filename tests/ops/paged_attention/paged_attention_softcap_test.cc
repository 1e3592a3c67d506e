// Soft-capped attention scores (Gemma 2: cap * tanh(score / cap) before the
// softmax), with and without a sliding window: the fast CPU kernel against
// the frozen reference, and bitwise against attend_row over a contiguous
// copy (the gather path's arithmetic). A cap that is ignored misses the
// reference by far more than the tolerance.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"
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
    for (float& x : k) x = 4.0f * u(rng);  // scores of several units: a cap of 2 bites
    for (float& x : v) x = u(rng);
    for (auto [c, n] : seqs) {
      ctx.push_back(c);
      for (int32_t i = 0; i < n; ++i) pos.push_back(c - n + i);
      starts.push_back(starts.back() + n);
    }
    q.resize(size_t{1} * pos.size() * kKv * kRep * kHd);
    for (float& x : q) x = u(rng);
  }
  PagedAttentionArgs args(float* out, int32_t window, float softcap) const {
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
    a.softcap = softcap;
    return a;
  }
  // attend_row over each sequence's history copied out of the blocks.
  std::vector<float> gather(int32_t window, float softcap) const {
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
              out.data() + off, softcap);
        }
      }
    }
    return out;
  }
};

TEST(PagedAttention, SoftCapMatchesReferenceAndGatherBitwise) {
  const Case c({{1, 1}, {17, 1}, {97, 1}, {97, 17}, {40, 40}}, 7);
  ThreadPool pool(2);
  const int64_t stride = paged_attention_cpu_scores_stride(Case::kRep, 97);
  std::vector<float> scores(2 * stride);
  for (int32_t window : {0, 7}) {
    SCOPED_TRACE(testing::Message() << "window " << window);
    std::vector<float> ref(c.q.size(), NAN), fast(c.q.size(), NAN), uncapped(c.q.size(), NAN);
    ASSERT_TRUE(validate_paged_attention_args(c.args(ref.data(), window, 2.0f)).ok());
    paged_attention_reference(c.args(ref.data(), window, 2.0f));
    paged_attention_reference(c.args(uncapped.data(), window, 0.0f));
    paged_attention_cpu(c.args(fast.data(), window, 2.0f), pool, scores.data(), stride);
    const std::vector<float> gather = c.gather(window, 2.0f);
    float worst = 0, planted = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::fabs(fast[i] - ref[i]));
      planted = std::max(planted, std::fabs(uncapped[i] - ref[i]));
      ASSERT_EQ(std::memcmp(&gather[i], &fast[i], sizeof(float)), 0) << "element " << i;
    }
    EXPECT_LE(worst, 1e-5f);
    EXPECT_GT(planted, 1e-2f) << "the cap does not bite";
  }
  std::vector<float> out(c.q.size());
  EXPECT_FALSE(validate_paged_attention_args(c.args(out.data(), 0, -1.0f)).ok());
}

}  // namespace
}  // namespace nanoserve
