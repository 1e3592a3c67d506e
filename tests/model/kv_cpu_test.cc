// The CPU runner's paged KV storage without a model, its blocks handed out
// by a BlockManager as the engine does: K, V and Q are pure functions of
// (sequence, position, layer), so a token gets the same inputs however it is
// batched, and any difference in outputs comes from the storage. One write,
// then either read: the fused read and the gather must agree bitwise, outputs
// and pools.

#include "model/kv_cpu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "kvcache/block_manager.h"

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

// The two halves of a paged cache, as the engine and the runner hold them.
struct PagedCache {
  std::unique_ptr<BlockManager> blocks;
  std::unique_ptr<CpuKV> storage;
  StepLimits limits;
};

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

// Runs one step over `cache`, through its read (fused, or gather then attention()).
void run_step(PagedCache& pc, const ModelConfig& c, const std::vector<Part>& parts, Outputs* outputs) {
  CpuKV& cache = *pc.storage;
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
    const Status rs = pc.blocks->reserve(p.handle, p.start + p.n_new);
    ASSERT_TRUE(rs.ok()) << rs.to_string();
  }
  pc.blocks->fill_batch(batch);
  const Status st = batch.validate(pc.limits);
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
    cache.attend(layer, batch, q, k, v, static_cast<int>(n_rep), scale, out);
    if (outputs) {
      for (int64_t t = 0; t < T; ++t) {
        auto& row = (*outputs)[token_keys[t]];
        row.insert(row.end(), out.data_as<float>() + t * c.n_heads * hd,
                   out.data_as<float>() + (t + 1) * c.n_heads * hd);
      }
    }
  }
}

CpuKVOptions options(int32_t block_size, int32_t num_blocks, bool fused, DType dtype = DType::kF32) {
  CpuKVOptions o;
  o.block_size = block_size;
  o.num_blocks = num_blocks;
  o.max_num_seqs = 8;
  o.max_context = 256;
  o.fused_read = fused;
  o.dtype = dtype;
  return o;
}

std::unique_ptr<PagedCache> make_cache(const ModelConfig& c, const CpuKVOptions& o, ThreadPool& pool) {
  auto pc = std::make_unique<PagedCache>();
  BlockManagerConfig bc;
  bc.num_blocks = o.num_blocks;
  bc.block_size = o.block_size;
  bc.max_num_seqs = o.max_num_seqs;
  bc.max_seq_len = o.max_context;
  bc.enable_prefix_caching = false;
  pc->blocks = std::make_unique<BlockManager>(bc);
  auto r = CpuKV::create(c, o, pool);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  pc->storage = std::move(r).value();
  pc->limits.vocab_size = 1;
  pc->limits.max_tokens = 64;
  pc->limits.max_seqs = o.max_num_seqs;
  pc->limits.max_logits_rows = 64;
  pc->storage->fill_limits(pc->limits);
  return pc;
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
Outputs run_plan(PagedCache& cache, const ModelConfig& c, const Plan& plan,
                 std::map<int, int32_t>* handles_out = nullptr) {
  std::map<int, int32_t> handles;
  Outputs outputs;
  for (const auto& step : plan.steps) {
    std::vector<Part> parts = step;
    for (Part& p : parts) {
      if (!handles.count(p.key)) {
        auto h = cache.blocks->add_sequence();
        EXPECT_TRUE(h.ok());
        handles[p.key] = *h;
      }
      p.handle = handles[p.key];
    }
    run_step(cache, c, parts, &outputs);
    EXPECT_TRUE(cache.blocks->check_invariants().ok());
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

TEST(CpuKV, FusedAndGatherReadsGiveIdenticalOutputsAndState) {
  const ModelConfig c = tiny_config();
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (int32_t bs : {1, 2, 16}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " block_size " << bs);
      ThreadPool pool(2);
      auto fused = make_cache(c, options(bs, 64 / bs + 8, true, dt), pool);
      auto gather = make_cache(c, options(bs, 64 / bs + 8, false, dt), pool);
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
        const auto tf = fused->blocks->block_table(h), tg = gather->blocks->block_table(h);
        ASSERT_TRUE(std::equal(tf.begin(), tf.end(), tg.begin(), tg.end())) << "table of seq " << key;
      }
      // Byte-identical pools over every slot the plan wrote (the rest was never initialised).
      std::map<int, int32_t> lens;
      for (const auto& step : interleaved_plan().steps)
        for (const Part& part : step) lens[part.key] = std::max(lens[part.key], part.start + part.n_new);
      const int64_t slot_bytes = dtype_bytes(dt, c.n_kv_heads * c.head_dim);
      for (auto [key, h] : hf) {
        const auto table = fused->blocks->block_table(h);
        for (int l = 0; l < c.n_layers; ++l) {
          for (int32_t pos = 0; pos < lens.at(key); ++pos) {
            const int64_t off = (static_cast<int64_t>(table[pos / bs]) * bs + pos % bs) * slot_bytes;
            const char* fk = static_cast<const char*>(fused->storage->k_pool(l).data()) + off;
            const char* gk = static_cast<const char*>(gather->storage->k_pool(l).data()) + off;
            const char* fv = static_cast<const char*>(fused->storage->v_pool(l).data()) + off;
            const char* gv = static_cast<const char*>(gather->storage->v_pool(l).data()) + off;
            ASSERT_EQ(0, std::memcmp(fk, gk, slot_bytes)) << "K of seq " << key << " pos " << pos;
            ASSERT_EQ(0, std::memcmp(fv, gv, slot_bytes)) << "V of seq " << key << " pos " << pos;
          }
        }
      }
    }
}

// A 16-bit pool holds K/V rounded to its dtype: the outputs stay within that
// rounding of the f32 pool's, and differ from them (the rounding is real).
TEST(CpuKV, HalfPoolsAreCloseToF32AndHalfTheBytes) {
  const ModelConfig c = tiny_config();
  ThreadPool pool(1);
  auto f32 = make_cache(c, options(4, 24, true, DType::kF32), pool);
  const Outputs ref = run_plan(*f32, c, interleaved_plan());
  for (auto [dt, tol] : {std::pair{DType::kF16, 4e-3f}, std::pair{DType::kBF16, 3e-2f}}) {
    SCOPED_TRACE(dtype_name(dt));
    auto half = make_cache(c, options(4, 24, true, dt), pool);
    EXPECT_EQ(half->storage->pool_bytes() * 2, f32->storage->pool_bytes());
    EXPECT_EQ(CpuKV::bytes_per_block(c, 4, dt) * 2,
              CpuKV::bytes_per_block(c, 4, DType::kF32));
    const Outputs got = run_plan(*half, c, interleaved_plan());
    float max_err = 0.0f;
    for (const auto& [key, row] : ref) {
      const auto& g = got.at(key);
      for (size_t i = 0; i < row.size(); ++i) max_err = std::max(max_err, std::fabs(row[i] - g[i]));
    }
    EXPECT_LT(max_err, tol);
    EXPECT_GT(max_err, 0.0f);
  }
}

TEST(CpuKV, SharedPoolGivesWhatEachSequenceGivesAlone) {
  const ModelConfig c = tiny_config();
  const Plan plan = interleaved_plan();
  ThreadPool pool(1);
  for (int32_t bs : {1, 4, 16}) {
    for (bool fused : {true, false}) {
      SCOPED_TRACE(testing::Message() << "block_size " << bs << (fused ? " fused" : " gather"));
      auto shared = make_cache(c, options(bs, 64 / bs + 8, fused), pool);
      std::map<int, int32_t> handles;
      const Outputs together = run_plan(*shared, c, plan, &handles);
      // The blocks really interleave: some sequence's table is not one contiguous run.
      bool scattered = false;
      for (auto [key, h] : handles) {
        const auto t = shared->blocks->block_table(h);
        for (size_t i = 1; i < t.size(); ++i) scattered |= t[i] != t[i - 1] + 1;
      }
      EXPECT_TRUE(scattered || bs == 16);
      for (int key : {0, 1, 2}) {
        auto alone_cache = make_cache(c, options(bs, 64 / bs + 8, fused), pool);
        const Outputs alone = run_plan(*alone_cache, c, only_key(plan, key));
        for (const auto& [k, row] : alone) {
          ASSERT_TRUE(bitwise_equal(row, together.at(k))) << "seq " << k.first << " pos " << k.second;
        }
      }
    }
  }
}

TEST(CpuKV, PoolsAreCompactGqa) {
  const ModelConfig c = tiny_config(/*n_layers=*/30, /*n_heads=*/9, /*n_kv_heads=*/3, /*head_dim=*/64);
  ThreadPool pool(1);
  auto cache = make_cache(c, options(16, 10, true), pool);
  EXPECT_EQ(cache->storage->k_pool(0).shape(), (std::vector<int64_t>{10, 16, 3, 64}));
  EXPECT_EQ(cache->storage->v_pool(29).shape(), (std::vector<int64_t>{10, 16, 3, 64}));
  // 30 layers * (K + V) * 10 blocks * 16 tokens * 3 kv heads * 64 dims * 4 bytes.
  EXPECT_EQ(cache->storage->pool_bytes(), int64_t{30} * 2 * 10 * 16 * 3 * 64 * 4);
  EXPECT_EQ(CpuKV::bytes_per_block(c, 16, DType::kF32), int64_t{30} * 2 * 16 * 3 * 64 * 4);
  EXPECT_EQ(CpuKV::bytes_per_block(c, 16, DType::kBF16), int64_t{30} * 2 * 16 * 3 * 64 * 2);
}

TEST(CpuKV, CreateNamesTheBadOption) {
  const ModelConfig c = tiny_config();
  ThreadPool pool(1);
  auto r = CpuKV::create(c, options(0, 4, true), pool);
  EXPECT_NE(r.status().message().find("block_size"), std::string::npos) << r.status().message();
  r = CpuKV::create(c, options(4, 0, true), pool);
  EXPECT_NE(r.status().message().find("num_blocks"), std::string::npos) << r.status().message();
  r = CpuKV::create(c, options(4, 4, true, DType::kQ8_0), pool);
  EXPECT_NE(r.status().message().find("dtype"), std::string::npos) << r.status().message();
}

// The batch the storage reads passed ForwardBatch::validate against the
// storage's limits: each index a write or read follows is refused there.
TEST(CpuKV, LimitsRefuseIndicesOutsideThePool) {
  const ModelConfig c = tiny_config(1);
  ThreadPool pool(1);
  auto cache = make_cache(c, options(4, 8, true), pool);
  const int32_t s = *cache->blocks->add_sequence();
  run_step(*cache, c, {{0, s, 0, 3}}, nullptr);
  ForwardBatch good;
  good.tokens = {0};
  good.positions = {3};
  good.seq_starts = {0, 1};
  good.seq_ids = {s};
  good.context_lens = {4};
  cache->blocks->fill_batch(good);
  EXPECT_TRUE(good.validate(cache->limits).ok());
  auto expect_bad = [&](ForwardBatch b, const char* what) {
    const Status st = b.validate(cache->limits);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
  };
  ForwardBatch b = good;
  b.slot_mapping[0] = 8 * 4;
  expect_bad(b, "slot_mapping");
  b = good;
  b.block_tables[0] = 8;
  expect_bad(b, "block_tables");
  b = good;
  b.positions[0] = 4;
  expect_bad(b, "position");
  b = good;
  b.context_lens[0] = 300;
  expect_bad(b, "context_len");
  b = good;
  b.slot_mapping.clear();
  expect_bad(b, "slot_mapping has 0 entries");
}

}  // namespace
}  // namespace nanoserve
