// The engine with prefix caching over the fake model, whose output depends on
// exactly the K/V its history holds: a cache hit that handed a sequence the
// wrong blocks would change the tokens the oracle predicts.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_greedy;
using testing::FakeModel;

constexpr int32_t kVocab = 64;

struct Rig {
  std::unique_ptr<Engine> engine;
  FakeModel* model = nullptr;  // owned by the engine
};

Rig make(bool caching, int32_t num_blocks = 64, int32_t budget = 32) {
  EngineConfig c;
  c.num_blocks = num_blocks;
  c.block_size = 4;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = budget;
  c.enable_prefix_caching = caching;
  auto model = std::make_unique<FakeModel>(kVocab, budget, 8);
  Rig s;
  s.model = model.get();
  auto e = Engine::create(c, std::move(model), nullptr);
  NS_CHECK(e.ok()) << e.status().to_string();
  s.engine = std::move(e).value();
  return s;
}

SamplingParams greedy(int32_t n) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

std::vector<int32_t> run_one(Engine& e, const std::vector<int32_t>& prompt, int32_t n) {
  const RequestId id = e.add_request(prompt, greedy(n)).value();
  std::vector<int32_t> got;
  std::vector<RequestOutput> outs;
  while (e.has_unfinished()) {
    EXPECT_TRUE(e.step(outs).ok());
    for (const RequestOutput& o : outs) {
      if (o.id == id) got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
    }
  }
  return got;
}

std::vector<int32_t> tokens(int32_t n, int32_t seed) {
  std::vector<int32_t> v(n);
  for (int32_t i = 0; i < n; ++i) v[i] = (seed * 7 + i * 13) % kVocab;
  return v;
}

TEST(PrefixCache, GreedyWithAHitEqualsWithoutAndComputesLess) {
  Rig on = make(true), off = make(false);
  const std::vector<int32_t> system = tokens(21, 1);
  int64_t computed_on = 0, computed_off = 0;
  for (int q = 0; q < 4; ++q) {
    std::vector<int32_t> prompt = system;
    const std::vector<int32_t> question = tokens(3 + q, 10 + q);
    prompt.insert(prompt.end(), question.begin(), question.end());
    const std::vector<int32_t> want = fake_greedy(prompt, kVocab, 6, -1);
    const int64_t before_on = on.model->tokens_computed(), before_off = off.model->tokens_computed();
    EXPECT_EQ(run_one(*on.engine, prompt, 6), want) << "question " << q;
    EXPECT_EQ(run_one(*off.engine, prompt, 6), want) << "question " << q;
    computed_on += on.model->tokens_computed() - before_on;
    computed_off += off.model->tokens_computed() - before_off;
    if (q > 0) {
      // 20 of the 21 system tokens are whole blocks of 4: only the rest is computed.
      EXPECT_EQ(on.model->tokens_computed() - before_on, off.model->tokens_computed() - before_off - 20)
          << "question " << q;
    }
  }
  EXPECT_LT(computed_on, computed_off);
  const EngineStats st = on.engine->stats();
  EXPECT_EQ(st.prefix_cache_hits, 3 * 20);
  EXPECT_EQ(st.prefix_cache_queries, 4 * 21 + 3 + 4 + 5 + 6);
  EXPECT_EQ(off.engine->stats().prefix_cache_hits, 0);
  EXPECT_EQ(off.engine->stats().prefix_cache_queries, st.prefix_cache_queries);
  EXPECT_GT(st.num_cached_blocks, 0);
}

// The same prompt again: a hit on every full block but never on the last
// token, whose logits the first sample needs.
TEST(PrefixCache, WholePromptHitStillComputesTheLastToken) {
  for (int32_t len : {8, 9, 12}) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << len);
    Rig on = make(true);
    const std::vector<int32_t> prompt = tokens(len, 3);
    const std::vector<int32_t> want = fake_greedy(prompt, kVocab, 4, -1);
    EXPECT_EQ(run_one(*on.engine, prompt, 4), want);
    const int64_t before = on.model->tokens_computed();
    EXPECT_EQ(run_one(*on.engine, prompt, 4), want);
    const int64_t hit = (len - 1) / 4 * 4;
    EXPECT_EQ(on.engine->stats().prefix_cache_hits, hit);
    // The prompt's uncached tail, then 3 decodes.
    EXPECT_EQ(on.model->tokens_computed() - before, len - hit + 3);
  }
}

// Requests running side by side share the cached blocks of their common
// prefix; a step that fails ends its requests with an error and caches
// nothing it computed.
TEST(PrefixCache, SharedWhileRunningAndFailedStepsCacheNothing) {
  Rig on = make(true);
  const std::vector<int32_t> system = tokens(16, 5);
  EXPECT_EQ(run_one(*on.engine, system, 1), fake_greedy(system, kVocab, 1, -1));
  const int32_t cached = on.engine->block_manager().num_cached_blocks();
  std::vector<RequestId> ids;
  for (int q = 0; q < 3; ++q) {
    std::vector<int32_t> p = system;
    p.push_back(q);
    ids.push_back(on.engine->add_request(p, greedy(20)).value());
  }
  std::vector<RequestOutput> outs;
  ASSERT_TRUE(on.engine->step(outs).ok());
  // The three hold the system prompt's 4 cached blocks together.
  const BlockManager& bm = on.engine->block_manager();
  EXPECT_TRUE(bm.check_invariants().ok());
  int32_t shared = 0;
  for (int32_t b = 0; b < bm.num_blocks(); ++b) shared += bm.is_cached(b) && bm.ref_count(b) == 3 ? 1 : 0;
  EXPECT_EQ(shared, 4);
  EXPECT_EQ(on.engine->stats().prefix_cache_hits, 3 * 16);
  on.model->fail_next_forward();
  EXPECT_FALSE(on.engine->step(outs).ok());
  for (const RequestOutput& o : outs) EXPECT_TRUE(o.finished());
  EXPECT_FALSE(on.engine->has_unfinished());
  EXPECT_TRUE(on.engine->check_invariants().ok());
  EXPECT_EQ(bm.num_in_use_blocks(), 0);
  EXPECT_EQ(bm.num_cached_blocks(), cached) << "the failed step's tokens were never committed";
  EXPECT_EQ(bm.num_evictable_blocks(), cached);
}

}  // namespace
}  // namespace nanoserve
