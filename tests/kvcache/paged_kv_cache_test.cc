// PagedKVCache without a model: K, V and Q are pure functions of (sequence,
// position, layer), so a token gets the same inputs however it is batched,
// and any difference in outputs comes from the cache.

#include "kvcache/paged_kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "ops/attention/attend_row.h"

namespace nanoserve {
namespace {

ModelConfig tiny_config(int64_t n_layers = 3, int64_t n_heads = 6, int64_t n_kv_heads = 2,
                        int64_t head_dim = 8) {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.dim = n_heads * head_dim;
  c.context_length = 256;
  return c;
}

// A deterministic value in [-1, 1) for (what, key, position, layer, index).
float synth(int what, int key, int pos, int layer, int64_t i) {
  uint64_t h = 0x9E3779B97F4A7C15ull * (what + 1);
  for (uint64_t x : {uint64_t(key), uint64_t(pos), uint64_t(layer), uint64_t(i)}) {
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return static_cast<float>(h >> 40) / static_cast<float>(1ull << 23) - 1.0f;
}

// One step's work for one sequence: `n_new` tokens of logical sequence `key`
// (which the cache knows as `handle`), continuing from `start`.
struct Part {
  int key;
  int32_t handle;
  int32_t start;
  int32_t n_new;
};

// Output rows per (key, position): [n_layers][n_heads * head_dim] flattened.
using Outputs = std::map<std::pair<int, int>, std::vector<float>>;

// Runs one step over `cache`, with the fused read if it has one, else the
// gather path plus ordinary attention through attend_row (as the model does).
void run_step(PagedKVCache& cache, const ModelConfig& c, const std::vector<Part>& parts, Outputs* outputs) {
  ForwardBatch batch;
  batch.seq_starts.push_back(0);
  std::vector<std::pair<int, int>> token_keys;
  for (const Part& p : parts) {
    for (int32_t i = 0; i < p.n_new; ++i) {
      batch.tokens.push_back(0);
      batch.positions.push_back(p.start + i);
      token_keys.push_back({p.key, p.start + i});
    }
    batch.seq_starts.push_back(batch.num_tokens());
    batch.seq_ids.push_back(p.handle);
    batch.context_lens.push_back(p.start + p.n_new);
  }
  const Status st = cache.begin_step(batch);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const int64_t T = batch.num_tokens(), hd = c.head_dim, n_rep = c.n_rep();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int layer = 0; layer < c.n_layers; ++layer) {
    Tensor q = Tensor::empty(DType::kF32, {T, c.n_heads, hd});
    Tensor k = Tensor::empty(DType::kF32, {T, c.n_kv_heads, hd});
    Tensor v = Tensor::empty(DType::kF32, {T, c.n_kv_heads, hd});
    for (int64_t t = 0; t < T; ++t) {
      auto [key, pos] = token_keys[t];
      for (int64_t i = 0; i < c.n_heads * hd; ++i)
        q.data_as<float>()[t * c.n_heads * hd + i] = synth(0, key, pos, layer, i);
      for (int64_t i = 0; i < c.n_kv_heads * hd; ++i) {
        k.data_as<float>()[t * c.n_kv_heads * hd + i] = synth(1, key, pos, layer, i);
        v.data_as<float>()[t * c.n_kv_heads * hd + i] = synth(2, key, pos, layer, i);
      }
    }
    Tensor out = Tensor::empty(DType::kF32, {T, c.n_heads, hd});
    std::fill(out.data_as<float>(), out.data_as<float>() + out.numel(), NAN);
    if (cache.has_fused_read()) {
      cache.paged_attention(layer, q, k, v, static_cast<int>(n_rep), scale, out);
    } else {
      const KVHistory& h = cache.append(layer, k, v);
      std::vector<float> scores(cache.max_seq_len());
      for (int32_t b = 0; b < batch.num_seqs(); ++b) {
        for (int32_t t = batch.seq_starts[b]; t < batch.seq_starts[b + 1]; ++t) {
          for (int64_t qh = 0; qh < c.n_heads; ++qh) {
            const int64_t kvh = qh / n_rep;
            auto k_row = [&](int64_t p) { return h.k[b] + p * h.pos_stride + kvh * h.head_stride; };
            auto v_row = [&](int64_t p) { return h.v[b] + p * h.pos_stride + kvh * h.head_stride; };
            const int64_t off = (t * c.n_heads + qh) * hd;
            attend_row(q.data_as<float>() + off, hd, batch.positions[t] + 1, k_row, v_row, scale,
                       scores.data(), out.data_as<float>() + off);
          }
        }
      }
    }
    if (outputs) {
      for (int64_t t = 0; t < T; ++t) {
        auto& row = (*outputs)[token_keys[t]];
        row.insert(row.end(), out.data_as<float>() + t * c.n_heads * hd,
                   out.data_as<float>() + (t + 1) * c.n_heads * hd);
      }
    }
  }
}

PagedKVCacheOptions options(int32_t block_size, int32_t num_blocks, bool fused) {
  PagedKVCacheOptions o;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 128;
  o.fused_read = fused;
  return o;
}

std::unique_ptr<PagedKVCache> make_cache(const ModelConfig& c, const PagedKVCacheOptions& o,
                                         ThreadPool* pool = nullptr) {
  auto r = PagedKVCache::create(c, o, pool);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return std::move(r).value();
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The step plan used by several tests: three sequences whose blocks interleave
// in the pool (prefills of uneven lengths, then decodes, with a chunked prefill).
struct Plan {
  std::vector<std::vector<Part>> steps;  // handles filled in by the runner (key -> handle)
};
Plan interleaved_plan() {
  Plan p;
  p.steps.push_back({{0, 0, 0, 5}});
  p.steps.push_back({{1, 0, 0, 3}, {0, 0, 5, 1}});
  p.steps.push_back({{2, 0, 0, 9}, {1, 0, 3, 1}, {0, 0, 6, 1}});  // key 2 prefill of 9
  for (int s = 0; s < 6; ++s) p.steps.push_back({{0, 0, 7 + s, 1}, {1, 0, 4 + s, 1}, {2, 0, 9 + s, 1}});
  p.steps.push_back({{2, 0, 15, 7}, {0, 0, 13, 1}});  // a second chunk for key 2
  for (int s = 0; s < 4; ++s) p.steps.push_back({{1, 0, 10 + s, 1}, {2, 0, 22 + s, 1}});
  return p;
}

// Runs the plan, adding each key's sequence on first sight. Returns outputs.
Outputs run_plan(PagedKVCache& cache, const ModelConfig& c, const Plan& plan,
                 std::map<int, int32_t>* handles_out = nullptr) {
  std::map<int, int32_t> handles;
  Outputs outputs;
  for (const auto& step : plan.steps) {
    std::vector<Part> parts = step;
    for (Part& p : parts) {
      if (!handles.count(p.key)) {
        auto h = cache.add_sequence();
        EXPECT_TRUE(h.ok());
        handles[p.key] = *h;
      }
      p.handle = handles[p.key];
    }
    run_step(cache, c, parts, &outputs);
    EXPECT_EQ(cache.num_free_blocks() + cache.num_used_blocks(), cache.num_blocks());
  }
  if (handles_out) *handles_out = handles;
  return outputs;
}

// Only one key's steps of the plan, in order.
Plan only_key(const Plan& plan, int key) {
  Plan p;
  for (const auto& step : plan.steps) {
    for (const Part& part : step) {
      if (part.key == key) p.steps.push_back({part});
    }
  }
  return p;
}

TEST(PagedKVCache, FusedAndGatherReadsGiveIdenticalOutputsAndState) {
  const ModelConfig c = tiny_config();
  for (int32_t bs : {1, 2, 16}) {
    SCOPED_TRACE(testing::Message() << "block_size " << bs);
    ThreadPool pool(2);
    auto fused = make_cache(c, options(bs, 64 / bs + 8, true), &pool);
    auto gather = make_cache(c, options(bs, 64 / bs + 8, false), &pool);
    std::map<int, int32_t> hf, hg;
    const Outputs of = run_plan(*fused, c, interleaved_plan(), &hf);
    const Outputs og = run_plan(*gather, c, interleaved_plan(), &hg);
    ASSERT_EQ(of.size(), og.size());
    for (const auto& [key, row] : of) {
      ASSERT_TRUE(bitwise_equal(row, og.at(key))) << "seq " << key.first << " pos " << key.second;
      for (float x : row) ASSERT_FALSE(std::isnan(x));
    }
    // State: same tables, byte-identical pools.
    ASSERT_EQ(hf, hg);
    for (auto [key, h] : hf) {
      const auto tf = fused->block_table(h), tg = gather->block_table(h);
      ASSERT_TRUE(std::equal(tf.begin(), tf.end(), tg.begin(), tg.end())) << "table of seq " << key;
      EXPECT_EQ(fused->seq_len(h), gather->seq_len(h));
    }
    EXPECT_EQ(fused->num_free_blocks(), gather->num_free_blocks());
    for (int l = 0; l < c.n_layers; ++l) {
      ASSERT_EQ(0, std::memcmp(fused->k_pool(l).data(), gather->k_pool(l).data(), fused->k_pool(l).nbytes()));
      ASSERT_EQ(0, std::memcmp(fused->v_pool(l).data(), gather->v_pool(l).data(), fused->v_pool(l).nbytes()));
    }
  }
}

TEST(PagedKVCache, SharedPoolGivesWhatEachSequenceGivesAlone) {
  const ModelConfig c = tiny_config();
  const Plan plan = interleaved_plan();
  for (int32_t bs : {1, 4, 16}) {
    for (bool fused : {true, false}) {
      SCOPED_TRACE(testing::Message() << "block_size " << bs << (fused ? " fused" : " gather"));
      auto shared = make_cache(c, options(bs, 64 / bs + 8, fused));
      std::map<int, int32_t> handles;
      const Outputs together = run_plan(*shared, c, plan, &handles);
      // The blocks really interleave: some sequence's table is not one contiguous run.
      bool scattered = false;
      for (auto [key, h] : handles) {
        const auto t = shared->block_table(h);
        for (size_t i = 1; i < t.size(); ++i) scattered |= t[i] != t[i - 1] + 1;
      }
      EXPECT_TRUE(scattered || bs == 16);
      for (int key : {0, 1, 2}) {
        auto alone_cache = make_cache(c, options(bs, 64 / bs + 8, fused));
        const Outputs alone = run_plan(*alone_cache, c, only_key(plan, key));
        for (const auto& [k, row] : alone) {
          ASSERT_TRUE(bitwise_equal(row, together.at(k))) << "seq " << k.first << " pos " << k.second;
        }
      }
    }
  }
}

TEST(PagedKVCache, PoolsAreCompactGqa) {
  const ModelConfig c = tiny_config(/*n_layers=*/30, /*n_heads=*/9, /*n_kv_heads=*/3, /*head_dim=*/64);
  auto cache = make_cache(c, options(16, 10, true));
  EXPECT_EQ(cache->k_pool(0).shape(), (std::vector<int64_t>{10, 16, 3, 64}));
  EXPECT_EQ(cache->v_pool(29).shape(), (std::vector<int64_t>{10, 16, 3, 64}));
  // 30 layers * (K + V) * 10 blocks * 16 tokens * 3 kv heads * 64 dims * 4 bytes.
  EXPECT_EQ(cache->pool_bytes(), int64_t{30} * 2 * 10 * 16 * 3 * 64 * 4);
  EXPECT_EQ(PagedKVCache::bytes_per_block(c, 16), int64_t{30} * 2 * 16 * 3 * 64 * 4);
}

TEST(PagedKVCache, PoolSizedFromTokenOrByteBudget) {
  const ModelConfig c = tiny_config();
  PagedKVCacheOptions o = options(16, 0, true);
  o.max_tokens = 100;
  EXPECT_EQ(make_cache(c, o)->num_blocks(), 7);  // ceil(100 / 16)
  o.max_tokens = 0;
  o.max_bytes = PagedKVCache::bytes_per_block(c, 16) * 5 + 17;
  EXPECT_EQ(make_cache(c, o)->num_blocks(), 5);
  o.max_bytes = 10;
  auto r = PagedKVCache::create(c, o, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("max_bytes"), std::string::npos);
  o.max_bytes = 0;
  EXPECT_FALSE(PagedKVCache::create(c, o, nullptr).ok());
  o = options(0, 4, true);
  r = PagedKVCache::create(c, o, nullptr);
  EXPECT_NE(r.status().message().find("block_size"), std::string::npos);
}

TEST(PagedKVCache, BlockTableGrowsWhenCrossingIntoANewBlock) {
  const ModelConfig c = tiny_config(1);
  auto cache = make_cache(c, options(4, 8, true));
  const int32_t s = *cache->add_sequence();
  run_step(*cache, c, {{0, s, 0, 3}}, nullptr);
  EXPECT_EQ(cache->block_table(s).size(), 1u);
  run_step(*cache, c, {{0, s, 3, 1}}, nullptr);  // fills block 0
  EXPECT_EQ(cache->block_table(s).size(), 1u);
  run_step(*cache, c, {{0, s, 4, 1}}, nullptr);  // crosses into block 1
  EXPECT_EQ(cache->block_table(s).size(), 2u);
  EXPECT_EQ(cache->seq_len(s), 5);
  EXPECT_EQ(cache->num_used_blocks(), 2);
  // Slot of position 4: second block, offset 0.
  EXPECT_EQ(cache->slot_mapping()[0], cache->block_table(s)[1] * 4);
}

TEST(PagedKVCache, ReserveFailsCleanlyWhenBlocksRunOut) {
  const ModelConfig c = tiny_config(1);
  auto cache = make_cache(c, options(4, 5, true));
  const int32_t a = *cache->add_sequence();
  const int32_t b = *cache->add_sequence();
  EXPECT_TRUE(cache->can_allocate(20));
  EXPECT_FALSE(cache->can_allocate(21));
  ASSERT_TRUE(cache->reserve(a, 12).ok());  // 3 blocks
  EXPECT_EQ(cache->num_free_blocks(), 2);
  EXPECT_EQ(cache->blocks_needed(b, 9), 3);
  EXPECT_FALSE(cache->can_reserve(b, 9));
  const Status st = cache->reserve(b, 9);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->num_free_blocks(), 2) << "a failed reserve must allocate nothing";
  EXPECT_EQ(cache->block_table(b).size(), 0u);
  // A step that needs more blocks than are free fails and changes nothing.
  ForwardBatch batch;
  batch.tokens.assign(9, 0);
  for (int i = 0; i < 9; ++i) batch.positions.push_back(i);
  batch.seq_starts = {0, 9};
  batch.seq_ids = {b};
  batch.context_lens = {9};
  EXPECT_EQ(cache->begin_step(batch).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(cache->num_free_blocks(), 2);
  EXPECT_EQ(cache->seq_len(b), 0);
  // Preempt a: its blocks come back and b fits.
  cache->free_sequence(a);
  EXPECT_EQ(cache->num_free_blocks(), 5);
  EXPECT_TRUE(cache->begin_step(batch).ok());
  EXPECT_EQ(cache->num_used_blocks(), 3);
  EXPECT_EQ(cache->num_live_seqs(), 1);
}

TEST(PagedKVCache, SequenceHandlesAreBoundedAndReused) {
  const ModelConfig c = tiny_config(1);
  PagedKVCacheOptions o = options(4, 8, true);
  o.max_num_seqs = 2;
  auto cache = make_cache(c, o);
  const int32_t a = *cache->add_sequence();
  const int32_t b = *cache->add_sequence();
  EXPECT_NE(a, b);
  EXPECT_EQ(cache->add_sequence().status().code(), StatusCode::kResourceExhausted);
  cache->free_sequence(a);
  EXPECT_FALSE(cache->is_live(a));
  EXPECT_EQ(*cache->add_sequence(), a);
}

TEST(PagedKVCache, BeginStepRejectsInconsistentBatches) {
  const ModelConfig c = tiny_config(1);
  auto cache = make_cache(c, options(4, 8, true));
  const int32_t s = *cache->add_sequence();
  run_step(*cache, c, {{0, s, 0, 3}}, nullptr);
  auto batch_for = [&](int32_t seq, int32_t first_pos, int32_t ctx) {
    ForwardBatch b;
    b.tokens = {0};
    b.positions = {first_pos};
    b.seq_starts = {0, 1};
    b.seq_ids = {seq};
    b.context_lens = {ctx};
    return b;
  };
  EXPECT_TRUE(cache->begin_step(batch_for(s, 3, 4)).ok());
  Status st = cache->begin_step(batch_for(s, 6, 7));  // skips positions 4, 5
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("does not continue"), std::string::npos) << st.message();
  st = cache->begin_step(batch_for(s + 1, 0, 1));  // never added
  EXPECT_NE(st.message().find("not a live sequence"), std::string::npos) << st.message();
  ForwardBatch twice = batch_for(s, 4, 5);
  twice.tokens.push_back(0);
  twice.positions.push_back(4);
  twice.seq_starts.push_back(2);
  twice.seq_ids.push_back(s);
  twice.context_lens.push_back(5);
  st = cache->begin_step(twice);
  EXPECT_NE(st.message().find("twice"), std::string::npos) << st.message();
  st = cache->begin_step(batch_for(s, 4, 6));  // position does not match context_len
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
}

TEST(PagedKVCacheDeathTest, FreeOfUnknownSequenceAborts) {
  const ModelConfig c = tiny_config(1);
  auto cache = make_cache(c, options(4, 8, true));
  const int32_t s = *cache->add_sequence();
  cache->free_sequence(s);
  EXPECT_DEATH(cache->free_sequence(s), "unknown sequence handle");
}

TEST(PagedKVCache, FillBatchTablesMatchesTheStep) {
  const ModelConfig c = tiny_config(1);
  auto cache = make_cache(c, options(2, 16, true));
  const int32_t a = *cache->add_sequence();
  const int32_t b = *cache->add_sequence();
  run_step(*cache, c, {{0, a, 0, 3}, {1, b, 0, 2}}, nullptr);
  ForwardBatch batch;
  cache->fill_batch_tables(batch);
  EXPECT_EQ(batch.max_blocks_per_seq, cache->max_blocks_per_seq());
  ASSERT_EQ(batch.slot_mapping.size(), 5u);
  const auto ta = cache->block_table(a), tb = cache->block_table(b);
  EXPECT_EQ(batch.block_tables[0], ta[0]);
  EXPECT_EQ(batch.block_tables[1], ta[1]);
  EXPECT_EQ(batch.block_tables[2], -1);
  EXPECT_EQ(batch.block_tables[batch.max_blocks_per_seq], tb[0]);
  EXPECT_EQ(batch.slot_mapping[2], ta[1] * 2 + 0);
  EXPECT_EQ(batch.slot_mapping[4], tb[0] * 2 + 1);
}

}  // namespace
}  // namespace nanoserve
