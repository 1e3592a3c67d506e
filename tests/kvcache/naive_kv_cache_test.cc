#include "kvcache/naive_kv_cache.h"

#include <gtest/gtest.h>

#include <vector>

namespace nanoserve {
namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 3;
  c.dim = 12;
  return c;
}

ForwardBatch step(std::vector<int32_t> seqs, std::vector<int32_t> n_new, std::vector<int32_t> start) {
  ForwardBatch b;
  b.seq_starts.push_back(0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int32_t j = 0; j < n_new[i]; ++j) {
      b.tokens.push_back(0);
      b.positions.push_back(start[i] + j);
    }
    b.seq_starts.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seq_ids.push_back(seqs[i]);
    b.context_lens.push_back(start[i] + n_new[i]);
  }
  return b;
}

// K value encodes (seq, pos, head, dim) so a misplaced row is visible.
float code(int32_t seq, int32_t pos, int64_t h, int64_t d) { return seq * 1000 + pos * 10 + h * 3 + d * 0.1f; }

TEST(NaiveKVCache, AppendWritesAndReturnsWholeHistory) {
  const ModelConfig c = tiny_config();
  NaiveKVCache cache(c, 3, 8);
  // Step 1: slot 2 prefills 3 tokens, slot 0 prefills 1. Step 2: both decode one.
  const std::vector<ForwardBatch> steps = {step({2, 0}, {3, 1}, {0, 0}), step({0, 2}, {1, 1}, {1, 3})};
  for (const ForwardBatch& b : steps) {
    ASSERT_TRUE(cache.begin_step(b).ok());
    const int64_t T = b.num_tokens();
    Tensor k = Tensor::empty(DType::kF32, {T, c.n_kv_heads, c.head_dim});
    Tensor v = Tensor::empty(DType::kF32, {T, c.n_kv_heads, c.head_dim});
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      for (int32_t t = b.seq_starts[s]; t < b.seq_starts[s + 1]; ++t) {
        for (int64_t h = 0; h < c.n_kv_heads; ++h) {
          for (int64_t d = 0; d < c.head_dim; ++d) {
            k.data_as<float>()[(t * c.n_kv_heads + h) * c.head_dim + d] = code(b.seq_ids[s], b.positions[t], h, d);
            v.data_as<float>()[(t * c.n_kv_heads + h) * c.head_dim + d] = -code(b.seq_ids[s], b.positions[t], h, d);
          }
        }
      }
    }
    for (int layer = 0; layer < 2; ++layer) {
      const KVHistory& hist = cache.append(layer, k, v);
      ASSERT_EQ(hist.k.size(), static_cast<size_t>(b.num_seqs()));
      for (int32_t s = 0; s < b.num_seqs(); ++s) {
        for (int32_t p = 0; p < b.context_lens[s]; ++p) {
          for (int64_t h = 0; h < c.n_kv_heads; ++h) {
            for (int64_t d = 0; d < c.head_dim; ++d) {
              const int64_t off = p * hist.pos_stride + h * hist.head_stride + d;
              ASSERT_EQ(hist.k[s][off], code(b.seq_ids[s], p, h, d)) << "seq " << s << " pos " << p;
              ASSERT_EQ(hist.v[s][off], -code(b.seq_ids[s], p, h, d));
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(cache.seq_len(0), 2);
  EXPECT_EQ(cache.seq_len(1), 0);
  EXPECT_EQ(cache.seq_len(2), 4);
  EXPECT_FALSE(cache.has_fused_read());
}

TEST(NaiveKVCache, RejectsBadStepsAndChangesNothing) {
  NaiveKVCache cache(tiny_config(), 2, 4);
  ASSERT_TRUE(cache.begin_step(step({0}, {2}, {0})).ok());
  EXPECT_EQ(cache.begin_step(step({2}, {1}, {0})).code(), StatusCode::kInvalidArgument);     // no slot 2
  EXPECT_EQ(cache.begin_step(step({0}, {1}, {3})).code(), StatusCode::kInvalidArgument);     // skips position 2
  EXPECT_TRUE(cache.begin_step(step({0}, {1}, {1})).ok());  // restarts from position 1 (a recompute)
  EXPECT_EQ(cache.begin_step(step({0}, {3}, {2})).code(), StatusCode::kInvalidArgument);     // past max_seq_len
  EXPECT_EQ(cache.begin_step(step({1, 1}, {1, 1}, {0, 0})).code(), StatusCode::kInvalidArgument);  // twice
  ForwardBatch odd = step({1}, {2}, {0});
  odd.positions[1] = 5;
  EXPECT_EQ(cache.begin_step(odd).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.seq_len(0), 2);
  EXPECT_EQ(cache.seq_len(1), 0);
}

TEST(NaiveKVCache, FreeSequenceStartsOver) {
  NaiveKVCache cache(tiny_config(), 1, 4);
  ASSERT_TRUE(cache.begin_step(step({0}, {4}, {0})).ok());
  EXPECT_EQ(cache.seq_len(0), 4);
  cache.free_sequence(0);
  EXPECT_EQ(cache.seq_len(0), 0);
  EXPECT_TRUE(cache.begin_step(step({0}, {1}, {0})).ok());
}

}  // namespace
}  // namespace nanoserve
