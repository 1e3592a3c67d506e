// The engine on a windowed model (the fake with set_window): each sequence's
// blocks behind its window go back as it grows, through chunked prefill,
// decode, preemption, aborts, prefix-cache hits and speculative rollback;
// check_invariants (every running request holds exactly its window's blocks)
// after every step, and every output equals the windowed oracle.

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

struct WindowSetup {
  int32_t num_blocks = 256;
  int32_t block_size = 4;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 32;
  int64_t window = 7;
  int64_t margin = 0;
  bool release = true;
  bool prefix_caching = true;
  int32_t speculative_tokens = 0;  // > 0: n-gram proposals of that many tokens
};

std::unique_ptr<Engine> make_engine(const WindowSetup& s) {
  EngineConfig c;
  c.num_blocks = s.num_blocks;
  c.block_size = s.block_size;
  c.max_num_seqs = s.max_num_seqs;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.enable_prefix_caching = s.prefix_caching;
  c.release_window_blocks = s.release;
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
  model->set_window(s.window, s.margin);
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

// Tokens drawn from a few values, so n-gram proposals find matches.
std::vector<int32_t> random_prompt(Rng& rng, int32_t len, int32_t values = kVocab - 1) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = 1 + static_cast<int32_t>(rng.next_u64() % values);
  return p;
}

int64_t held_blocks(int64_t len, int64_t bs, int64_t window, int64_t margin) {
  const int64_t first = std::max<int64_t>(0, len + 1 - window - margin);
  return (len + bs - 1) / bs - first / bs;
}

TEST(WindowRelease, OnlyModelsWhoseEveryLayerSlidesRelease) {
  ModelConfig c;
  c.n_layers = 4;
  EXPECT_EQ(kv_window_to_release(c), 0);
  c.sliding_window = 4096;  // Mistral 7B v0.1: every layer
  EXPECT_EQ(kv_window_to_release(c), 4096);
  c.sliding_layers = {1, 1, 1, 1};
  EXPECT_EQ(kv_window_to_release(c), 4096);
  c.sliding_layers = {1, 1, 1, 0};  // Gemma: a global layer reads everything
  EXPECT_EQ(kv_window_to_release(c), 0);
}

TEST(WindowRelease, RandomizedRunsHoldOnlyTheirWindows) {
  struct Case {
    int64_t margin;
    bool caching;
    int32_t speculative_tokens;
  };
  for (const Case cs : {Case{0, true, 0}, Case{5, true, 0}, Case{0, false, 0}, Case{3, true, 3}}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE(::testing::Message() << "seed " << seed << ", margin " << cs.margin << ", caching "
                                        << cs.caching << ", proposals " << cs.speculative_tokens);
      WindowSetup s;
      s.num_blocks = 16;  // 64 tokens for up to 8 sequences of up to 64: preemption, even with windows
      s.max_num_batched_tokens = 24;
      s.margin = cs.margin;
      s.prefix_caching = cs.caching;
      s.speculative_tokens = cs.speculative_tokens;
      auto e = make_engine(s);
      Rng rng(seed);
      const int32_t values = cs.speculative_tokens > 0 ? 3 : kVocab - 1;
      const std::vector<int32_t> shared = random_prompt(rng, 30, values);
      std::map<RequestId, std::vector<int32_t>> want, got;
      std::map<RequestId, FinishReason> reason;
      std::vector<RequestId> ids;
      std::vector<RequestOutput> outs;
      int added = 0;
      const int total = 80;
      while (added < total || e->has_unfinished()) {
        const int burst = added < total ? static_cast<int>(rng.next_u64() % 3) : 0;
        for (int i = 0; i < burst && added < total; ++i, ++added) {
          std::vector<int32_t> prompt =
              random_prompt(rng, 1 + static_cast<int32_t>(rng.next_u64() % 40), values);
          if (rng.next_u64() % 2 == 0) {
            prompt.insert(prompt.begin(), shared.begin(), shared.end());
            prompt.resize(std::min<size_t>(prompt.size(), 40));
          }
          const int32_t max_tokens = 1 + static_cast<int32_t>(rng.next_u64() % 24);
          const RequestId id = e->add_request(prompt, greedy(max_tokens)).value();
          want[id] = fake_greedy(prompt, kVocab, max_tokens, -1, s.window);
          ids.push_back(id);
        }
        if (!ids.empty() && rng.next_u64() % 12 == 0) e->abort(ids[rng.next_u64() % ids.size()]);
        ASSERT_TRUE(e->step(outs).ok());
        const Status inv = e->check_invariants();
        ASSERT_TRUE(inv.ok()) << inv.to_string();
        const BlockManager& bm = e->block_manager();
        int64_t held = 0;
        for (const Request* r : e->scheduler().running()) {
          const int64_t len = bm.seq_len(r->seq);
          ASSERT_EQ(bm.num_held_blocks(r->seq), held_blocks(len, s.block_size, s.window, s.margin));
          held += bm.num_held_blocks(r->seq);
        }
        if (!cs.caching) {
          ASSERT_EQ(bm.num_in_use_blocks(), held);  // no sharing: in use is what is held
        }
        for (const RequestOutput& o : outs) {
          got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
          reason[o.id] = o.finish_reason;
        }
      }
      int aborted = 0;
      for (const auto& [id, tokens] : want) {
        ASSERT_NE(reason[id], FinishReason::kNone) << "request " << id << " never finished";
        if (reason[id] == FinishReason::kAbort) {
          ++aborted;
          EXPECT_TRUE(std::equal(got[id].begin(), got[id].end(), tokens.begin())) << "request " << id;
          continue;
        }
        EXPECT_EQ(got[id], tokens) << "request " << id;
      }
      const BlockManager& bm = e->block_manager();
      EXPECT_EQ(bm.num_in_use_blocks(), 0);
      EXPECT_GT(bm.num_window_releases(), 0);
      EXPECT_GT(e->stats().num_preemptions, 0) << "the pool was meant to force preemption";
      if (cs.caching) {
        EXPECT_GT(e->stats().prefix_cache_hits, 0);
      }
      if (cs.speculative_tokens > 0) {
        EXPECT_GT(e->stats().spec_num_draft_tokens, e->stats().spec_num_accepted_tokens) << "no rollback ran";
      }
      EXPECT_GT(aborted, 0);
    }
  }
}

// One long request: with release its blocks in use stay at the window's
// (and so does the KV usage metric), without they grow with its length; the
// tokens are the same either way.
TEST(WindowRelease, ALongSequenceHoldsItsWindowAndKvUsageShowsIt) {
  Rng rng(7);
  const std::vector<int32_t> prompt = random_prompt(rng, 50);
  const int32_t n = 150;
  const std::vector<int32_t> want = fake_greedy(prompt, kVocab, n, -1, 16);
  std::map<bool, int32_t> most_in_use;
  std::map<bool, double> last_usage;
  for (const bool release : {true, false}) {
    SCOPED_TRACE(release ? "release" : "keep");
    WindowSetup s;
    s.num_blocks = 64;  // 256 tokens
    s.window = 16;
    s.max_num_batched_tokens = 16;  // the prompt in four chunks
    s.release = release;
    auto e = make_engine(s);
    EXPECT_EQ(e->capacity_line().find("16-token window released") != std::string::npos, release)
        << e->capacity_line();
    const RequestId id = e->add_request(prompt, greedy(n)).value();
    std::vector<int32_t> got;
    std::vector<RequestOutput> outs;
    while (e->has_unfinished()) {
      ASSERT_TRUE(e->step(outs).ok());
      const Status inv = e->check_invariants();
      ASSERT_TRUE(inv.ok()) << inv.to_string();
      const BlockManager& bm = e->block_manager();
      const EngineStats st = e->stats();
      EXPECT_EQ(st.kv_usage, static_cast<double>(bm.num_in_use_blocks()) / bm.num_blocks());
      EXPECT_EQ(st.num_free_blocks, bm.num_available_blocks());
      most_in_use[release] = std::max(most_in_use[release], bm.num_in_use_blocks());
      if (e->has_unfinished()) last_usage[release] = st.kv_usage;
      for (const RequestOutput& o : outs) {
        ASSERT_EQ(o.id, id);
        got.insert(got.end(), o.new_tokens.begin(), o.new_tokens.end());
      }
    }
    EXPECT_EQ(got, want);
  }
  // 198 tokens in blocks of 4: 50 blocks kept. A sequence of L tokens reads
  // from L - 15 on: at most 5 blocks (L = 4m + 1: m + 1 blocks, m - 4 released).
  EXPECT_EQ(most_in_use[false], 50);
  EXPECT_EQ(most_in_use[true], 5);
  EXPECT_LE(last_usage[true], 5.0 / 64);
  EXPECT_GE(last_usage[false], 49.0 / 64);
}

// A request whose prompt repeats a finished one's hits the cache, the
// released blocks included (they stayed cached), and computes the same tokens;
// one admitted while the first still runs hits its released blocks too.
TEST(WindowRelease, PrefixCacheHitsAreCorrectWithWindows) {
  WindowSetup s;
  s.window = 6;
  auto e = make_engine(s);
  Rng rng(11);
  const std::vector<int32_t> prompt = random_prompt(rng, 41);
  const RequestId a = e->add_request(prompt, greedy(30)).value();
  std::vector<RequestOutput> outs;
  std::map<RequestId, std::vector<int32_t>> got;
  auto step = [&] {
    ASSERT_TRUE(e->step(outs).ok());
    const Status inv = e->check_invariants();
    ASSERT_TRUE(inv.ok()) << inv.to_string();
    for (const RequestOutput& o : outs)
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
  };
  for (int i = 0; i < 5; ++i) step();  // a's prompt (two chunks) and a few tokens
  ASSERT_GT(e->block_manager().num_window_releases(), 0);
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {5, 6, 7});
  const RequestId b = e->add_request(longer, greedy(10)).value();
  while (e->has_unfinished()) step();
  EXPECT_EQ(e->stats().prefix_cache_hits, 40) << "b hit a's 10 full prompt blocks";
  const RequestId c = e->add_request(prompt, greedy(30)).value();
  while (e->has_unfinished()) step();
  EXPECT_EQ(e->stats().prefix_cache_hits, 80);
  EXPECT_EQ(got[a], fake_greedy(prompt, kVocab, 30, -1, s.window));
  EXPECT_EQ(got[b], fake_greedy(longer, kVocab, 10, -1, s.window));
  EXPECT_EQ(got[c], got[a]);
}

}  // namespace
}  // namespace nanoserve
