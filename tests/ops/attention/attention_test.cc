#include "ops/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/random_weights.h"

namespace nanoserve {
namespace {

using testing::f32_tensor;
using testing::nan_tensor;
using testing::random_floats;

// Sequences of uneven lengths over histories laid out [n_kv_heads, max_len, head_dim].
struct Case {
  std::vector<int32_t> new_tokens;  // per sequence, this step
  std::vector<int32_t> context;     // per sequence, after the step
};

void run_case(const Case& c, int threads_a, int threads_b) {
  const int64_t n_kv = 3, n_rep = 3, n_heads = n_kv * n_rep, hd = 64;
  ForwardBatch batch;
  batch.seq_starts.push_back(0);
  for (size_t b = 0; b < c.new_tokens.size(); ++b) {
    batch.seq_ids.push_back(static_cast<int32_t>(b));
    batch.seq_starts.push_back(batch.seq_starts.back() + c.new_tokens[b]);
    batch.context_lens.push_back(c.context[b]);
    for (int32_t j = 0; j < c.new_tokens[b]; ++j) {
      batch.tokens.push_back(0);
      batch.positions.push_back(c.context[b] - c.new_tokens[b] + j);
    }
  }
  const int64_t T = batch.num_tokens();
  std::vector<std::vector<float>> ks, vs;
  KVHistory hist;
  int64_t max_len = 0;
  for (int32_t n : c.context) max_len = std::max<int64_t>(max_len, n);
  hist.pos_stride = hd;
  hist.head_stride = max_len * hd;
  for (size_t b = 0; b < c.context.size(); ++b) {
    ks.push_back(random_floats(n_kv * max_len * hd, 100 + static_cast<uint32_t>(b)));
    vs.push_back(random_floats(n_kv * max_len * hd, 200 + static_cast<uint32_t>(b)));
  }
  for (size_t b = 0; b < c.context.size(); ++b) {
    hist.k.push_back(ks[b].data());
    hist.v.push_back(vs[b].data());
  }
  const Tensor q = f32_tensor(random_floats(T * n_heads * hd, 7), {T, n_heads, hd});
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  Tensor ref = nan_tensor({T, n_heads, hd});
  attention_ref(q, batch, hist, static_cast<int>(n_rep), scale, ref);
  Tensor outs[2] = {nan_tensor({T, n_heads, hd}), nan_tensor({T, n_heads, hd})};
  const int threads[2] = {threads_a, threads_b};
  for (int i = 0; i < 2; ++i) {
    ThreadPool pool(threads[i]);
    std::vector<float> scratch(static_cast<size_t>(attention_scratch_floats(threads[i], max_len)));
    attention(q, batch, hist, static_cast<int>(n_rep), scale, outs[i], pool, scratch);
  }
  for (int64_t i = 0; i < ref.numel(); ++i) {
    ASSERT_FALSE(std::isnan(outs[0].data_as<float>()[i])) << "unwritten " << i;
    ASSERT_NEAR(outs[0].data_as<float>()[i], ref.data_as<float>()[i], 2e-5f) << i;
  }
  EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), static_cast<size_t>(ref.nbytes())), 0)
      << "thread counts " << threads_a << " vs " << threads_b;
}

TEST(Attention, DecodeBatchOfUnevenContexts) { run_case({{1, 1, 1, 1}, {1, 17, 97, 2048}}, 1, 3); }

TEST(Attention, PrefillIsCausalWithinTheStep) { run_case({{17, 5}, {17, 40}}, 2, 1); }

TEST(Attention, MixedPrefillAndDecode) { run_case({{1, 9, 1}, {33, 9, 2}}, 3, 2); }

TEST(Attention, FirstTokenCopiesItsValue) {
  // One position of history: softmax weight 1, the output is V[0] for every head sharing it.
  ForwardBatch batch;
  batch.tokens = {0};
  batch.positions = {0};
  batch.seq_starts = {0, 1};
  batch.seq_ids = {0};
  batch.context_lens = {1};
  std::vector<float> k = random_floats(2 * 8, 1), v = random_floats(2 * 8, 2);
  KVHistory hist{{k.data()}, {v.data()}, 8, 8};
  const Tensor q = f32_tensor(random_floats(4 * 8, 3), {1, 4, 8});
  Tensor out = nan_tensor({1, 4, 8});
  ThreadPool pool(2);
  std::vector<float> scratch(2);
  attention(q, batch, hist, 2, 0.3f, out, pool, scratch);
  for (int h = 0; h < 4; ++h) {
    for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(out.data_as<float>()[h * 8 + d], v[(h / 2) * 8 + d]);
  }
}

}  // namespace
}  // namespace nanoserve
