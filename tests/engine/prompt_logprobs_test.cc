// Prompt logprobs (SamplingParams::prompt_logprobs) over the fake model,
// whose logits at any position are a function of exactly the history the
// cache gives back: every prompt token's logprob must equal the oracle's
// (log-softmax of fake_logits(prompt[0..p]) at prompt[p + 1]) bit for bit,
// whatever the chunking, the batch, the logits-row bound, a warm prefix cache
// or a preemption; and max_tokens 0 scores the prompt and generates nothing.

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_logits;
using testing::FakeModel;

constexpr int32_t kVocab = 64;

struct ScoreSetup {
  int32_t num_blocks = 256;
  int32_t block_size = 4;
  int32_t max_num_seqs = 4;
  int32_t max_num_batched_tokens = 32;
  int32_t max_logits_rows = 0;  // 0: max_num_seqs
  bool prefix_caching = true;
};

std::unique_ptr<Engine> make_engine(const ScoreSetup& s) {
  EngineConfig c;
  c.num_blocks = s.num_blocks;
  c.block_size = s.block_size;
  c.max_num_seqs = s.max_num_seqs;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.enable_prefix_caching = s.prefix_caching;
  auto model = std::make_unique<FakeModel>(kVocab, s.max_num_batched_tokens, s.max_num_seqs, 1 << 20,
                                           s.max_logits_rows);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr);
  NS_CHECK(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

struct Scored {
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<TokenLogprob>> prompt_top;
  int deliveries = 0;  // outputs that carried prompt logprobs
  FinishReason reason = FinishReason::kNone;
};

std::map<RequestId, Scored> run(Engine& e) {
  std::map<RequestId, Scored> got;
  std::vector<RequestOutput> outs;
  for (int guard = 0; e.has_unfinished(); ++guard) {
    NS_CHECK(guard < 100000) << "the engine does not finish";
    const Status st = e.step(outs);
    NS_CHECK(st.ok()) << st.to_string();
    const Status inv = e.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
    for (RequestOutput& o : outs) {
      Scored& s = got[o.id];
      s.tokens.insert(s.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      if (!o.prompt_logprobs.empty()) {
        ++s.deliveries;
        s.prompt_logprobs = o.prompt_logprobs;
        s.prompt_top = o.prompt_top_logprobs;
      }
      if (o.finished()) s.reason = o.finish_reason;
    }
  }
  return got;
}

std::vector<int32_t> prompt_of(uint64_t seed, int32_t len) {
  Rng rng(seed);
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = 1 + static_cast<int32_t>(rng.next_u64() % (kVocab - 1));
  return p;
}

// The oracle: the logprob of prompt[p + 1] after prompt[0..p], and the k most likely, by the sampler's rule
// over the fake model's logits, computed without any engine.
void expect_oracle(const std::vector<int32_t>& prompt, int32_t k, const Scored& s) {
  ASSERT_EQ(s.prompt_logprobs.size(), prompt.size() - 1);
  ASSERT_EQ(s.prompt_top.size(), prompt.size() - 1);
  Sampler sampler(kVocab);
  std::vector<float> l(kVocab);
  std::vector<TokenLogprob> top;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    fake_logits(std::span<const int32_t>(prompt.data(), p + 1), kVocab, l.data());
    const float want = sampler.logprobs(l, prompt[p + 1], k, top);
    EXPECT_EQ(s.prompt_logprobs[p], want) << "position " << p;
    ASSERT_EQ(s.prompt_top[p].size(), static_cast<size_t>(k)) << "position " << p;
    for (int32_t j = 0; j < k; ++j) {
      EXPECT_EQ(s.prompt_top[p][j].token, top[j].token) << "position " << p << " rank " << j;
      EXPECT_EQ(s.prompt_top[p][j].logprob, top[j].logprob) << "position " << p << " rank " << j;
    }
  }
}

SamplingParams scoring(int32_t k, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.prompt_logprobs = k;
  return p;
}

TEST(PromptLogprobs, EqualTheOracleAtEveryChunkSizeAndRowBound) {
  const std::vector<int32_t> prompt = prompt_of(7, 45);
  for (int32_t budget : {4, 7, 16, 64}) {
    for (int32_t rows : {0, 9}) {
      ScoreSetup s;
      s.max_num_batched_tokens = budget;
      s.max_logits_rows = rows;
      auto e = make_engine(s);
      StatusOr<RequestId> id = e->add_request(prompt, scoring(3, 2));
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      auto got = run(*e);
      SCOPED_TRACE("budget " + std::to_string(budget) + " rows " + std::to_string(rows));
      EXPECT_EQ(got[*id].deliveries, 1);
      EXPECT_EQ(got[*id].tokens.size(), 2u);
      expect_oracle(prompt, 3, got[*id]);
    }
  }
}

// The same prompt scored in a batch of other requests (decoding, prefilling,
// scoring) equals it scored alone; its generated tokens are unchanged too.
TEST(PromptLogprobs, IdenticalAloneAndInABatch) {
  const std::vector<int32_t> prompt = prompt_of(11, 30);
  auto alone_engine = make_engine({});
  const RequestId alone_id = *alone_engine->add_request(prompt, scoring(2, 4));
  Scored alone = run(*alone_engine)[alone_id];
  expect_oracle(prompt, 2, alone);

  ScoreSetup s;
  s.max_num_seqs = 6;
  s.max_num_batched_tokens = 12;
  auto e = make_engine(s);
  std::vector<RequestId> others;
  for (int i = 0; i < 3; ++i)
    others.push_back(*e->add_request(prompt_of(100 + i, 5 + 9 * i), scoring(-1, 6)));
  const RequestId other_scored = *e->add_request(prompt_of(200, 21), scoring(1, 1));
  const RequestId id = *e->add_request(prompt, scoring(2, 4));
  auto got = run(*e);
  EXPECT_EQ(got[id].prompt_logprobs, alone.prompt_logprobs);
  EXPECT_EQ(got[id].tokens, alone.tokens);
  expect_oracle(prompt_of(200, 21), 1, got[other_scored]);
  for (RequestId o : others) EXPECT_EQ(got[o].deliveries, 0);
}

// A prompt whose blocks are all in the prefix cache is still scored from
// position 0 (a cached block has no logits), and the request that follows a
// scored one still hits the cache.
TEST(PromptLogprobs, WarmPrefixCacheIsSkippedForScoring) {
  const std::vector<int32_t> prompt = prompt_of(13, 40);
  auto e = make_engine({});
  const RequestId first = *e->add_request(prompt, scoring(-1, 1));
  run(*e);
  (void)first;
  const int64_t hits_before = e->stats().prefix_cache_hits;
  const RequestId id = *e->add_request(prompt, scoring(4, 1));
  auto got = run(*e);
  expect_oracle(prompt, 4, got[id]);
  EXPECT_EQ(e->stats().prefix_cache_hits, hits_before);  // no lookup for the scored request
  const RequestId plain = *e->add_request(prompt, scoring(-1, 1));
  run(*e);
  (void)plain;
  EXPECT_GT(e->stats().prefix_cache_hits, hits_before);
}

// max_tokens 0: the request ends (length) once its prompt is computed, with
// its prompt's logprobs and no token.
TEST(PromptLogprobs, MaxTokensZeroScoresThePromptAndGeneratesNothing) {
  ScoreSetup s;
  s.max_num_batched_tokens = 8;
  auto e = make_engine(s);
  const std::vector<int32_t> prompt = prompt_of(17, 26);
  const RequestId id = *e->add_request(prompt, scoring(0, 0));
  const RequestId one = *e->add_request({5}, scoring(0, 0));  // one token: nothing to score
  auto got = run(*e);
  EXPECT_TRUE(got[id].tokens.empty());
  EXPECT_EQ(got[id].reason, FinishReason::kLength);
  expect_oracle(prompt, 0, got[id]);
  EXPECT_TRUE(got[one].tokens.empty());
  EXPECT_EQ(got[one].reason, FinishReason::kLength);
  EXPECT_TRUE(got[one].prompt_logprobs.empty());
  EXPECT_EQ(e->stats().generation_tokens, 0);
  EXPECT_TRUE(e->check_invariants().ok());
  EXPECT_EQ(e->block_manager().num_live_seqs(), 0);
}

// A pool so small that scoring requests preempt each other mid-prefill: the
// recompute records only the positions still missing, and every result still
// equals the oracle.
TEST(PromptLogprobs, PreemptionMidPrefillKeepsTheRecordedRows) {
  ScoreSetup s;
  s.num_blocks = 12;  // 48 tokens for three prompts of 30 (+ 3 generated each)
  s.block_size = 4;
  s.max_num_seqs = 3;
  s.max_num_batched_tokens = 12;
  s.max_logits_rows = 24;
  auto e = make_engine(s);
  std::vector<std::pair<RequestId, std::vector<int32_t>>> reqs;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p = prompt_of(300 + i, 30);
    reqs.emplace_back(*e->add_request(p, scoring(2, 3)), p);
  }
  auto got = run(*e);
  EXPECT_GT(e->stats().num_preemptions, 0);
  for (const auto& [id, p] : reqs) {
    EXPECT_EQ(got[id].deliveries, 1);
    expect_oracle(p, 2, got[id]);
  }
}

TEST(PromptLogprobs, RowBoundBelowMaxNumSeqsIsRefused) {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  // A runner with fewer logits rows than sequences could not sample them all in one step.
  auto model = std::make_unique<FakeModel>(kVocab, 16, 2);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("max_logits_rows"), std::string::npos) << e.status().to_string();
}

}  // namespace
}  // namespace nanoserve
