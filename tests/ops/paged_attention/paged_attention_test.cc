// The fast CPU kernel against the frozen reference, on fresh random inputs
// and awkward shapes: block sizes 1 and 16, contexts 1, 17, 97 and 2048,
// uneven sequences (decode tokens and a causal prefill chunk in one batch),
// block tables scattered over the pool, output filled with NaN first.

#include "ops/paged_attention/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "ops/attention/attend_row.h"

namespace nanoserve {
namespace {

// f32 kernel against the f64 reference: |fast - ref| <= kAtol + kRtol * |ref|.
constexpr float kAtol = 2e-6f;
constexpr float kRtol = 1e-5f;

struct Problem {
  int32_t block_size, n_heads, n_kv_heads, head_dim;
  std::vector<float> q, k_pool, v_pool;
  std::vector<int32_t> block_tables, context_lens, seq_starts, positions;
  int32_t num_blocks = 0, max_blocks_per_seq = 0, num_tokens = 0;
  int32_t window = 0;  // sliding window (0: none)
  // 16-bit pools (kv_dtype kF16 / kBF16): the same layout, read instead of the f32 ones.
  DType kv_dtype = DType::kF32;
  std::vector<uint16_t> k16, v16;

  PagedAttentionArgs args(float* out) const {
    PagedAttentionArgs a;
    a.q = q.data();
    a.k_pool = k_pool.data();
    a.v_pool = v_pool.data();
    a.block_tables = block_tables.data();
    a.context_lens = context_lens.data();
    a.seq_starts = seq_starts.data();
    a.positions = positions.data();
    a.out = out;
    a.num_tokens = num_tokens;
    a.num_seqs = static_cast<int32_t>(context_lens.size());
    a.num_blocks = num_blocks;
    a.block_size = block_size;
    a.max_blocks_per_seq = max_blocks_per_seq;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    a.window = window;
    a.kv_dtype = kv_dtype;
    a.k_pool16 = k16.data();
    a.v_pool16 = v16.data();
    return a;
  }
};

// Sequences given as (context_len, new tokens this step); blocks of all
// sequences are a shuffled permutation of the pool, so tables interleave.
Problem make_problem(std::mt19937& rng, int32_t block_size, int32_t n_kv_heads, int32_t n_rep,
                     int32_t head_dim, const std::vector<std::pair<int32_t, int32_t>>& seqs) {
  Problem p;
  p.block_size = block_size;
  p.n_kv_heads = n_kv_heads;
  p.n_heads = n_kv_heads * n_rep;
  p.head_dim = head_dim;
  int32_t total_blocks = 0;
  for (auto [ctx, n_new] : seqs) {
    const int32_t nb = (ctx + block_size - 1) / block_size;
    total_blocks += nb;
    p.max_blocks_per_seq = std::max(p.max_blocks_per_seq, nb);
  }
  p.num_blocks = total_blocks + 3;  // spare blocks that nobody reads
  std::vector<int32_t> perm(p.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t pool_floats = int64_t{p.num_blocks} * block_size * n_kv_heads * head_dim;
  p.k_pool.resize(pool_floats);
  p.v_pool.resize(pool_floats);
  for (auto& x : p.k_pool) x = 2.0f * u(rng);  // scores of a few units, a peaked softmax
  for (auto& x : p.v_pool) x = u(rng);
  p.block_tables.assign(seqs.size() * p.max_blocks_per_seq, -1);
  p.seq_starts.push_back(0);
  int32_t next = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    auto [ctx, n_new] = seqs[b];
    const int32_t nb = (ctx + block_size - 1) / block_size;
    for (int32_t i = 0; i < nb; ++i) p.block_tables[b * p.max_blocks_per_seq + i] = perm[next++];
    p.context_lens.push_back(ctx);
    for (int32_t i = 0; i < n_new; ++i) p.positions.push_back(ctx - n_new + i);
    p.seq_starts.push_back(p.seq_starts.back() + n_new);
  }
  p.num_tokens = p.seq_starts.back();
  p.q.resize(int64_t{p.num_tokens} * p.n_heads * head_dim);
  for (auto& x : p.q) x = u(rng);
  return p;
}

std::vector<float> run_cpu(const Problem& p, int n_threads) {
  ThreadPool pool(n_threads);
  const int64_t stride = paged_attention_cpu_scores_stride(
      p.n_heads / p.n_kv_heads, *std::max_element(p.context_lens.begin(), p.context_lens.end()));
  std::vector<float> scores(n_threads * stride);
  std::vector<float> out(p.q.size(), std::numeric_limits<float>::quiet_NaN());
  paged_attention_cpu(p.args(out.data()), pool, scores.data(), stride);
  return out;
}

std::vector<float> run_ref(const Problem& p) {
  std::vector<float> out(p.q.size(), std::numeric_limits<float>::quiet_NaN());
  paged_attention_reference(p.args(out.data()));
  return out;
}

TEST(PagedAttention, CpuMatchesReferenceForAwkwardShapes) {
  std::mt19937 rng(20261129);
  // Decode tokens at contexts 1, 17, 97 and 2048, plus a 17-token prefill
  // chunk ending at 97 and a whole 17-token prompt (causal within the step).
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1},    {17, 1},  {97, 1},
                                                         {2048, 1}, {97, 17}, {17, 17}};
  float worst = 0.0f;  // largest error as a fraction of its tolerance
  for (int32_t block_size : {1, 16}) {
    for (int32_t n_rep : {1, 3, 4, 8}) {
      for (int32_t head_dim : {64, 128}) {
        SCOPED_TRACE(testing::Message()
                     << "block_size " << block_size << " n_rep " << n_rep << " head_dim " << head_dim);
        const Problem p = make_problem(rng, block_size, /*n_kv_heads=*/2, n_rep, head_dim, seqs);
        {
          std::vector<float> dummy(p.q.size());
          ASSERT_TRUE(validate_paged_attention_args(p.args(dummy.data())).ok());
        }
        const std::vector<float> ref = run_ref(p);
        const std::vector<float> fast = run_cpu(p, 2);
        for (size_t i = 0; i < ref.size(); ++i) {
          ASSERT_FALSE(std::isnan(ref[i])) << "reference left element " << i << " unwritten";
          ASSERT_FALSE(std::isnan(fast[i])) << "cpu kernel left element " << i << " unwritten";
          const float err = std::fabs(fast[i] - ref[i]);
          const float tol = kAtol + kRtol * std::fabs(ref[i]);
          worst = std::max(worst, err / tol);
          ASSERT_LE(err, tol) << "element " << i << ": " << fast[i] << " vs " << ref[i];
        }
      }
    }
  }
  RecordProperty("worst_error_over_tolerance", testing::PrintToString(worst));
}

TEST(PagedAttention, CpuIsBitwiseIndependentOfThreadCount) {
  std::mt19937 rng(7);
  const Problem p = make_problem(rng, 16, 3, 3, 64, {{300, 1}, {5, 5}, {129, 40}, {64, 1}});
  const std::vector<float> one = run_cpu(p, 1);
  for (int n_threads : {2, 3, 5}) {
    const std::vector<float> many = run_cpu(p, n_threads);
    ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float))) << n_threads << " threads";
  }
}

// The gather path's arithmetic: copy each history out of the blocks, then
// attend_row per (token, query head) over the contiguous copy.
std::vector<float> run_gather_attend_row(const Problem& p) {
  const int64_t hd = p.head_dim, row = int64_t{p.n_kv_heads} * hd, n_rep = p.n_heads / p.n_kv_heads;
  std::vector<float> out(p.q.size(), std::numeric_limits<float>::quiet_NaN());
  for (size_t b = 0; b + 1 < p.seq_starts.size(); ++b) {
    const int64_t ctx = p.context_lens[b];
    std::vector<float> k(ctx * row), v(ctx * row), scores(ctx);
    for (int64_t pos = 0; pos < ctx; ++pos) {
      const int64_t slot =
          int64_t{p.block_tables[b * p.max_blocks_per_seq + pos / p.block_size]} * p.block_size +
          pos % p.block_size;
      std::copy_n(p.k_pool.data() + slot * row, row, k.data() + pos * row);
      std::copy_n(p.v_pool.data() + slot * row, row, v.data() + pos * row);
    }
    for (int32_t t = p.seq_starts[b]; t < p.seq_starts[b + 1]; ++t) {
      for (int64_t qh = 0; qh < p.n_heads; ++qh) {
        const int64_t kvh = qh / n_rep, off = (int64_t{t} * p.n_heads + qh) * hd;
        attend_row(
            p.q.data() + off, hd, attention_window_begin(p.positions[t], p.window), p.positions[t] + 1,
            [&](int64_t i) { return k.data() + i * row + kvh * hd; },
            [&](int64_t i) { return v.data() + i * row + kvh * hd; },
            1.0f / std::sqrt(static_cast<float>(hd)), scores.data(), out.data() + off);
      }
    }
  }
  return out;
}

TEST(PagedAttention, CpuIsBitwiseTheGatherPathsAttendRow) {
  std::mt19937 rng(11);
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1}, {97, 1}, {2048, 1}, {97, 17}};
  for (int32_t block_size : {1, 16}) {
    for (int32_t n_rep : {1, 3, 4, 8, 20}) {  // 20 > attend_rows' 16 rows per pass
      for (int32_t head_dim : {64, 128}) {
        SCOPED_TRACE(testing::Message()
                     << "block_size " << block_size << " n_rep " << n_rep << " head_dim " << head_dim);
        const Problem p = make_problem(rng, block_size, /*n_kv_heads=*/2, n_rep, head_dim, seqs);
        const std::vector<float> gather = run_gather_attend_row(p);
        const std::vector<float> fast = run_cpu(p, 2);
        for (size_t i = 0; i < gather.size(); ++i) {
          ASSERT_EQ(std::memcmp(&gather[i], &fast[i], sizeof(float)), 0)
              << "element " << i << ": " << fast[i] << " vs " << gather[i];
        }
      }
    }
  }
}

// Sliding windows of 1, 7, 16 (a block) and 40 positions over decode tokens
// and prefill chunks that cross them: near the reference, bitwise the gather
// path's, and a window one longer (an off-by-one) lands far outside the
// tolerance.
TEST(PagedAttention, SlidingWindowMatchesReferenceAndGather) {
  std::mt19937 rng(41);
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1},   {6, 1},   {97, 1},
                                                         {97, 17}, {40, 40}, {300, 3}};
  for (int32_t window : {1, 7, 16, 40}) {
    for (int32_t block_size : {1, 16}) {
      SCOPED_TRACE(testing::Message() << "window " << window << " block_size " << block_size);
      Problem p = make_problem(rng, block_size, /*n_kv_heads=*/2, /*n_rep=*/4, 64, seqs);
      p.window = window;
      const std::vector<float> ref = run_ref(p), fast = run_cpu(p, 2), gather = run_gather_attend_row(p);
      Problem wider = p;
      wider.window = window + 1;
      const std::vector<float> off_by_one = run_ref(wider);
      float worst_planted = 0.0f;
      for (size_t i = 0; i < ref.size(); ++i) {
        const float tol = kAtol + kRtol * std::fabs(ref[i]);
        ASSERT_LE(std::fabs(fast[i] - ref[i]), tol) << "element " << i << ": " << fast[i] << " vs " << ref[i];
        ASSERT_EQ(std::memcmp(&gather[i], &fast[i], sizeof(float)), 0) << "element " << i;
        worst_planted = std::max(worst_planted, std::fabs(off_by_one[i] - fast[i]) / tol);
      }
      EXPECT_GT(worst_planted, 100.0f) << "a window one longer would pass";
    }
  }
  // No window equals a window as long as the longest context.
  Problem p = make_problem(rng, 16, 2, 2, 64, seqs);
  const std::vector<float> none = run_cpu(p, 2);
  p.window = 300;
  EXPECT_EQ(run_cpu(p, 2), none);
}

// The rows of a prefill chunk (here up to 33 tokens a sequence, several
// tiles, with and without a sliding window, over f32 and 16-bit pools) equal,
// bit for bit, the same rows decoded one token at a time: a batch of that
// token alone at its position. A decoded row that misses one position (a
// planted off-by-one) is seen.
TEST(PagedAttention, PrefillChunkRowsEqualTheSameRowsDecodedAlone) {
  std::mt19937 rng(2026);
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{97, 33}, {200, 20}, {9, 9}, {50, 1}};
  int planted_runs = 0, planted_seen = 0;
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int32_t n_rep : {1, 3, 4}) {
      for (int32_t window : {0, 16}) {
        const int32_t head_dim = n_rep == 4 ? 128 : 64;
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " n_rep " << n_rep << " window " << window);
        Problem p = make_problem(rng, 16, /*n_kv_heads=*/2, n_rep, head_dim, seqs);
        p.window = window;
        if (dtype != DType::kF32) {
          p.kv_dtype = dtype;
          auto narrow = [&](const std::vector<float>& f) {
            std::vector<uint16_t> h(f.size());
            for (size_t i = 0; i < f.size(); ++i)
              h[i] = dtype == DType::kF16 ? f32_to_fp16(f[i]) : f32_to_bf16(f[i]);
            return h;
          };
          p.k16 = narrow(p.k_pool);
          p.v16 = narrow(p.v_pool);
        }
        const std::vector<float> chunk = run_cpu(p, 2);
        const int64_t row = int64_t{p.n_heads} * head_dim;
        for (size_t b = 0; b + 1 < p.seq_starts.size(); ++b) {
          for (int32_t t = p.seq_starts[b]; t < p.seq_starts[b + 1]; ++t) {
            Problem one = p;
            one.block_tables.assign(p.block_tables.begin() + b * p.max_blocks_per_seq,
                                    p.block_tables.begin() + (b + 1) * p.max_blocks_per_seq);
            one.context_lens = {p.positions[t] + 1};
            one.seq_starts = {0, 1};
            one.positions = {p.positions[t]};
            one.num_tokens = 1;
            one.q.assign(p.q.begin() + t * row, p.q.begin() + (t + 1) * row);
            const std::vector<float> alone = run_cpu(one, 1);
            ASSERT_EQ(std::memcmp(alone.data(), chunk.data() + t * row, row * sizeof(float)), 0)
                << "token " << t << " at position " << p.positions[t];
            if (t + 1 == p.seq_starts[b + 1]) {  // the last token: a position > 0 (more than V's copy)
              // Planted: the decoded token misses its first position.
              one.window = window > 0 && p.positions[t] + 1 > window - 1 ? window - 1 : p.positions[t];
              const std::vector<float> planted = run_cpu(one, 1);
              ++planted_runs;
              planted_seen +=
                  std::memcmp(planted.data(), chunk.data() + t * row, head_dim * sizeof(float)) != 0;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(planted_seen, planted_runs) << "a row that misses one position passed";
}

TEST(PagedAttention, SingleContextCopiesV) {
  // With one position the softmax is exactly 1, so the output is that V row.
  std::mt19937 rng(3);
  const Problem p = make_problem(rng, 4, 1, 2, 8, {{1, 1}});
  const std::vector<float> ref = run_ref(p);
  const std::vector<float> fast = run_cpu(p, 1);
  const int32_t blk = p.block_tables[0];
  for (int d = 0; d < 8; ++d) {
    const float v = p.v_pool[int64_t{blk} * 4 * 8 + d];
    EXPECT_EQ(ref[d], v);
    EXPECT_EQ(ref[8 + d], v);
    EXPECT_EQ(fast[d], v);
    EXPECT_EQ(fast[8 + d], v);
  }
}

TEST(PagedAttention, ValidateNamesTheProblem) {
  std::mt19937 rng(5);
  Problem p = make_problem(rng, 16, 2, 2, 64, {{20, 2}, {5, 1}});
  std::vector<float> out(p.q.size());
  EXPECT_TRUE(validate_paged_attention_args(p.args(out.data())).ok());

  Problem bad_pos = p;
  bad_pos.positions[0] = 20;  // == context_len
  Status st = validate_paged_attention_args(bad_pos.args(out.data()));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("position 20"), std::string::npos) << st.message();

  Problem bad_block = p;
  bad_block.block_tables[1] = bad_block.num_blocks;
  st = validate_paged_attention_args(bad_block.args(out.data()));
  EXPECT_NE(st.message().find("outside the pool"), std::string::npos) << st.message();

  Problem bad_heads = p;
  bad_heads.n_heads = 3;
  st = validate_paged_attention_args(bad_heads.args(out.data()));
  EXPECT_NE(st.message().find("multiple of n_kv_heads"), std::string::npos) << st.message();

  Problem bad_starts = p;
  bad_starts.seq_starts.back() = 2;
  st = validate_paged_attention_args(bad_starts.args(out.data()));
  EXPECT_NE(st.message().find("num_tokens"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace nanoserve
