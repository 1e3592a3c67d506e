// Preemption by swap through the engine, on the fake model (an exact oracle
// whose K/V is (token, position): a block swapped back wrong changes its
// tokens or fails its position check). Pools small enough to force
// preemption; after every step Engine::check_invariants (blocks, swap slots,
// queues); outputs equal to the oracle, and a request's greedy tokens and
// seeded samples identical with swapping, with recompute and with neither.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_greedy;
using testing::FakeModel;

constexpr int32_t kVocab = 64;

struct SwapSetup {
  int32_t num_blocks = 40;
  int32_t block_size = 4;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 24;
  bool prefix_caching = true;
  PreemptionMode mode = PreemptionMode::kSwap;
  int32_t swap_blocks = 64;  // the area, in blocks (0: none)
  int64_t window = 0;        // > 0: the fake slides over it, and the engine releases behind it
  int32_t speculative_tokens = 0;
  SwapCostRates rates{1e9, 1e3};  // the fake's default: swapping is cheaper
};

// Also hands back the fake model, which the engine owns.
std::unique_ptr<Engine> make_engine(const SwapSetup& s, FakeModel** fake = nullptr) {
  EngineConfig c;
  c.num_blocks = s.num_blocks;
  c.block_size = s.block_size;
  c.max_num_seqs = s.max_num_seqs;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.enable_prefix_caching = s.prefix_caching;
  c.preemption_mode = s.mode;
  // The fake's block: K and V of 2 floats per token, one layer.
  c.swap_space_bytes = int64_t{s.swap_blocks} * 2 * s.block_size * 2 * 4;
  int32_t rows = 0;
  if (s.speculative_tokens > 0) {
    c.speculative.method = SpecMethod::kNgram;
    c.speculative.num_speculative_tokens = s.speculative_tokens;
    c.speculative.adaptive = false;
    c.speculative.prompt_lookup_max = 3;
    c.speculative.prompt_lookup_min = 1;
    rows = std::min(s.max_num_batched_tokens, s.max_num_seqs * (1 + s.speculative_tokens));
  }
  auto model = std::make_unique<FakeModel>(kVocab, s.max_num_batched_tokens, s.max_num_seqs, 1 << 20, rows);
  if (s.window > 0) model->set_window(s.window);
  model->set_swap_cost_rates(s.rates);
  if (fake != nullptr) *fake = model.get();
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr);
  NS_CHECK(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

SamplingParams seeded(int32_t max_tokens, uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = seed;
  p.max_tokens = max_tokens;
  return p;
}

// Tokens of a few values when `values` is small, so n-gram proposals find matches.
std::vector<int32_t> random_prompt(Rng& rng, int32_t len, int32_t values = kVocab - 1) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = 1 + static_cast<int32_t>(rng.next_u64() % values);
  return p;
}

struct Got {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  int32_t preemptions = 0;
};

// One step, its invariants, and its outputs into `got`.
void step_checked(Engine& e, std::map<RequestId, Got>& got) {
  std::vector<RequestOutput> outs;
  const Status st = e.step(outs);
  ASSERT_TRUE(st.ok()) << st.to_string();
  const Status inv = e.check_invariants();
  ASSERT_TRUE(inv.ok()) << inv.to_string();
  for (const RequestOutput& o : outs) {
    Got& g = got[o.id];
    EXPECT_EQ(g.reason, FinishReason::kNone) << "output after finish";
    g.tokens.insert(g.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    g.reason = o.finish_reason;
    g.preemptions = std::max(g.preemptions, o.num_preemptions);
  }
}

std::map<RequestId, Got> run_to_end(Engine& e, std::map<RequestId, Got> got = {}) {
  int guard = 0;
  while (e.has_unfinished()) {
    step_checked(e, got);
    if (::testing::Test::HasFatalFailure()) break;
    NS_CHECK(++guard < 100000) << "engine does not finish";
  }
  return got;
}

// Random arrivals, shared prefixes and aborts over a pool that forces
// preemption: every request that was not aborted gives the oracle's tokens,
// nothing leaks, and preemption swapped (and, with a small area, also recomputed).
TEST(Swap, RandomizedInvariantsAndOracleUnderPressure) {
  struct Case {
    PreemptionMode mode;
    int32_t swap_blocks;
    bool caching;
    int64_t window;
    int32_t spec;
  };
  const Case cases[] = {
      {PreemptionMode::kSwap, 64, true, 0, 0}, {PreemptionMode::kSwap, 64, false, 0, 0},
      {PreemptionMode::kSwap, 6, true, 0, 0},  // area often full: recompute then
      {PreemptionMode::kAuto, 64, true, 0, 0}, {PreemptionMode::kSwap, 64, true, 9, 0},  // sliding window
      {PreemptionMode::kSwap, 64, true, 0, 3},  // n-gram proposals in flight
  };
  for (const Case& k : cases)
    for (uint64_t seed : {1u, 2u}) {
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(k.mode) << ", area " << k.swap_blocks
                                        << (k.caching ? ", caching" : "") << ", window " << k.window
                                        << ", spec " << k.spec << ", seed " << seed);
      SwapSetup s;
      s.mode = k.mode;
      s.swap_blocks = k.swap_blocks;
      s.prefix_caching = k.caching;
      s.window = k.window;
      s.speculative_tokens = k.spec;
      // A windowed sequence holds only its window's blocks: a smaller pool (and shorter requests,
      // which must each fit the whole pool) keeps the pressure on.
      if (k.window > 0) s.num_blocks = 8;
      const uint64_t max_prompt = k.window > 0 ? 10 : 50, max_new = k.window > 0 ? 8 : 40;
      FakeModel* fake = nullptr;
      auto e = make_engine(s, &fake);
      Rng rng(seed);
      const int32_t values = k.spec > 0 ? 4 : kVocab - 1;
      const std::vector<int32_t> shared = random_prompt(rng, 13, values);
      std::map<RequestId, std::vector<int32_t>> want;
      std::map<RequestId, Got> got;
      std::vector<RequestId> ids;
      int added = 0;
      const int total = 40;
      while (added < total || e->has_unfinished()) {
        const int burst = added < total ? static_cast<int>(rng.next_u64() % 4) : 0;
        for (int i = 0; i < burst && added < total; ++i, ++added) {
          std::vector<int32_t> prompt =
              random_prompt(rng, 1 + static_cast<int32_t>(rng.next_u64() % max_prompt), values);
          if (rng.next_u64() % 2 == 0) prompt.insert(prompt.begin(), shared.begin(), shared.end());
          const int32_t max_tokens = 1 + static_cast<int32_t>(rng.next_u64() % max_new);
          RequestId id = e->add_request(prompt, greedy(max_tokens)).value();
          want[id] = fake_greedy(prompt, kVocab, max_tokens, -1, k.window);
          ids.push_back(id);
        }
        if (!ids.empty() && rng.next_u64() % 12 == 0) e->abort(ids[rng.next_u64() % ids.size()]);
        step_checked(*e, got);
        if (HasFatalFailure()) return;
      }
      for (const auto& [id, tokens] : want) {
        const Got& g = got[id];
        ASSERT_NE(g.reason, FinishReason::kNone) << "request " << id << " never finished";
        if (g.reason == FinishReason::kAbort) {
          EXPECT_TRUE(std::equal(g.tokens.begin(), g.tokens.end(), tokens.begin()))
              << "prefix before the abort";
          continue;
        }
        EXPECT_EQ(g.tokens, tokens) << "request " << id;
      }
      const EngineStats st = e->stats();
      EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
      EXPECT_EQ(st.num_used_swap_slots, 0);
      EXPECT_EQ(st.num_swapped, 0);
      EXPECT_GT(st.num_swap_preemptions, 0)
          << "the pool was meant to force swapping (" << st.num_preemptions << " preemptions)";
      EXPECT_EQ(fake->blocks_swapped_out(), st.swapped_out_blocks);
      EXPECT_EQ(fake->blocks_swapped_in(), st.swapped_in_blocks);
      if (k.swap_blocks < 10) {
        EXPECT_GT(st.num_preemptions, st.num_swap_preemptions) << "a full area recomputes";
      }
      if (k.spec > 0) {
        EXPECT_GT(st.spec_num_draft_tokens, 0);
      }
    }
}

// The same requests, greedy and seeded, on a pool that never preempts, one
// that preempts by recompute and one that preempts by swap: identical tokens.
TEST(Swap, OutputIdenticalWithSwapRecomputeAndNeither) {
  Rng rng(7);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(random_prompt(rng, 5 + static_cast<int32_t>(rng.next_u64() % 30)));
    params.push_back(i % 2 == 0 ? greedy(30) : seeded(30, 100 + i));
  }
  auto run = [&](const SwapSetup& s, EngineStats* stats) {
    auto e = make_engine(s);
    std::vector<RequestId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(e->add_request(prompts[i], params[i]).value());
    std::map<RequestId, Got> got = run_to_end(*e);
    *stats = e->stats();
    std::vector<std::vector<int32_t>> out;
    for (RequestId id : ids) out.push_back(got[id].tokens);
    return out;
  };
  SwapSetup roomy;
  roomy.num_blocks = 512;
  SwapSetup recompute;
  recompute.num_blocks = 24;
  recompute.mode = PreemptionMode::kRecompute;
  SwapSetup swap = recompute;
  swap.mode = PreemptionMode::kSwap;
  EngineStats a, b, c;
  const auto ref = run(roomy, &a);
  EXPECT_EQ(a.num_preemptions, 0);
  EXPECT_EQ(run(recompute, &b), ref);
  EXPECT_GT(b.num_preemptions, 0);
  EXPECT_EQ(b.num_swap_preemptions, 0);
  EXPECT_GT(b.recomputed_tokens, 0);
  EXPECT_EQ(run(swap, &c), ref);
  EXPECT_GT(c.num_swap_preemptions, 0);
  EXPECT_EQ(c.num_swap_ins, c.num_swap_preemptions);
  EXPECT_EQ(c.swapped_in_blocks, c.swapped_out_blocks);
  // Swapping recomputes nothing: every token ran through the model once (plus recomputes, if any fell back).
  EXPECT_EQ(c.recomputed_tokens, 0);
  EXPECT_LT(c.num_computed_tokens, b.num_computed_tokens);
  EXPECT_EQ(c.num_computed_tokens, a.num_computed_tokens);
}

// Two requests that cannot both grow: the newer is swapped out, keeps its
// slots while the older runs, and comes back without recomputing.
TEST(Swap, SwappedRequestResumesWithoutRecompute) {
  SwapSetup s;
  s.num_blocks = 8;  // 32 tokens: two requests of 10 + 12 cannot both finish
  s.max_num_batched_tokens = 32;
  FakeModel* fake = nullptr;
  auto e = make_engine(s, &fake);
  Rng rng(3);
  const std::vector<int32_t> p1 = random_prompt(rng, 10), p2 = random_prompt(rng, 10);
  const RequestId a = e->add_request(p1, greedy(12)).value();
  const RequestId b = e->add_request(p2, greedy(12)).value();
  std::map<RequestId, Got> got;
  bool seen_swapped = false;
  while (e->has_unfinished()) {
    step_checked(*e, got);
    if (HasFatalFailure()) return;
    if (e->scheduler().swapped().empty()) continue;
    seen_swapped = true;
    EXPECT_EQ(e->scheduler().swapped().front()->id, b) << "the newer request is the one swapped out";
    EXPECT_GT(e->scheduler().swap_space().num_used_slots(), 0);
  }
  EXPECT_TRUE(seen_swapped);
  EXPECT_EQ(got[a].tokens, fake_greedy(p1, kVocab, 12, -1));
  EXPECT_EQ(got[b].tokens, fake_greedy(p2, kVocab, 12, -1));
  EXPECT_GE(got[b].preemptions, 1);
  // Each prompt once and each output token but the last once: nothing recomputed.
  EXPECT_EQ(fake->tokens_computed(), 2 * (10 + 11));
  EXPECT_EQ(e->stats().recomputed_tokens, 0);
}

// Aborting a swapped-out request frees its slots at the next step.
TEST(Swap, AbortWhileSwappedFreesItsSlots) {
  SwapSetup s;
  s.num_blocks = 8;
  s.max_num_batched_tokens = 32;
  auto e = make_engine(s);
  Rng rng(4);
  e->add_request(random_prompt(rng, 10), greedy(12)).value();
  const RequestId b = e->add_request(random_prompt(rng, 10), greedy(12)).value();
  std::map<RequestId, Got> got;
  int guard = 0;
  while (e->scheduler().swapped().empty()) {
    step_checked(*e, got);
    if (HasFatalFailure()) return;
    ASSERT_LT(++guard, 100) << "never swapped";
  }
  ASSERT_EQ(e->scheduler().swapped().front()->id, b);
  const int32_t used = e->scheduler().swap_space().num_used_slots();
  EXPECT_GT(used, 0);
  e->abort(b);
  step_checked(*e, got);
  EXPECT_EQ(got[b].reason, FinishReason::kAbort);
  EXPECT_TRUE(e->scheduler().swapped().empty());
  EXPECT_EQ(e->scheduler().swap_space().num_used_slots(), 0);
  run_to_end(*e, got);
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
}

// kAuto follows the cost model: with the prefill far faster than the copy,
// preemption recomputes although the area has room; reversed, it swaps.
TEST(Swap, AutoModeFollowsTheCostModel) {
  for (bool copy_cheap : {true, false}) {
    SwapSetup s;
    s.num_blocks = 24;
    s.mode = PreemptionMode::kAuto;
    s.rates = copy_cheap ? SwapCostRates{1e9, 1e3} : SwapCostRates{1e3, 1e9};
    auto e = make_engine(s);
    Rng rng(9);
    for (int i = 0; i < 8; ++i) e->add_request(random_prompt(rng, 20), greedy(20)).value();
    run_to_end(*e);
    const EngineStats st = e->stats();
    ASSERT_GT(st.num_preemptions, 0);
    if (copy_cheap) {
      EXPECT_EQ(st.num_swap_preemptions, st.num_preemptions);
    } else {
      EXPECT_EQ(st.num_swap_preemptions, 0);
    }
  }
}

// A failed swap copy ends the requests whose K/V it moved (and its step's), with the error; nothing leaks.
TEST(Swap, FailedCopyEndsItsRequestsAndLeaksNothing) {
  SwapSetup s;
  s.num_blocks = 8;
  s.max_num_batched_tokens = 32;
  FakeModel* fake = nullptr;
  auto e = make_engine(s, &fake);
  Rng rng(5);
  e->add_request(random_prompt(rng, 10), greedy(12)).value();
  e->add_request(random_prompt(rng, 10), greedy(12)).value();
  fake->fail_next_swap();
  std::vector<RequestOutput> outs;
  int errors = 0, guard = 0;
  while (e->has_unfinished()) {
    const Status st = e->step(outs);
    for (const RequestOutput& o : outs) {
      if (o.finish_reason == FinishReason::kError) {
        ++errors;
        EXPECT_NE(o.error.find("swap"), std::string::npos) << o.error;
      }
    }
    EXPECT_TRUE(e->check_invariants().ok()) << e->check_invariants().to_string();
    if (!st.ok()) {
      EXPECT_NE(st.to_string().find("failing this swap copy"), std::string::npos);
    }
    ASSERT_LT(++guard, 200);
  }
  EXPECT_GT(errors, 0);
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
  EXPECT_EQ(e->scheduler().swap_space().num_used_slots(), 0);
}

TEST(Swap, SwapModeWithoutAnAreaIsRefused) {
  EngineConfig c;
  c.num_blocks = 16;
  c.block_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.preemption_mode = PreemptionMode::kSwap;
  c.swap_space_bytes = 0;
  StatusOr<std::unique_ptr<Engine>> e =
      Engine::create(c, std::make_unique<FakeModel>(kVocab, 16, 4), nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("preemption mode swap"), std::string::npos) << e.status().to_string();
  // Recompute (or auto) without an area is fine, and says so at start-up.
  c.preemption_mode = PreemptionMode::kAuto;
  e = Engine::create(c, std::make_unique<FakeModel>(kVocab, 16, 4), nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_NE((*e)->capacity_line().find("preemption recomputes (no swap space)"), std::string::npos);
  EXPECT_EQ((*e)->stats().num_swap_slots, 0);
  c.swap_space_bytes = 10 * 2 * 4 * 2 * 4;  // ten of the fake's blocks
  e = Engine::create(c, std::make_unique<FakeModel>(kVocab, 16, 4), nullptr);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ((*e)->stats().num_swap_slots, 10);
  EXPECT_NE((*e)->capacity_line().find("swap space 10 blocks"), std::string::npos) << (*e)->capacity_line();
}

}  // namespace
}  // namespace nanoserve
