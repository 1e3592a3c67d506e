// Speculative decoding through the engine, with the fake model (an exact
// oracle: its logits are a hash of the history it reads back from its own
// paged storage, so a rejected token's K/V that stayed visible, a block that
// leaked or a wrong rollback changes the tokens). Proposals come from the
// n-gram proposer, from a draft that is the target itself (every proposal
// kept) and from a different model (most rejected).

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "engine/chi_square.h"
#include "engine/draft_proposer.h"
#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_greedy;
using testing::FakeModel;

enum class Proposals { kNone, kNgram, kDraftSelf, kDraftOther };

const char* name_of(Proposals p) {
  switch (p) {
    case Proposals::kNone: return "none";
    case Proposals::kNgram: return "ngram";
    case Proposals::kDraftSelf: return "draft = target";
    case Proposals::kDraftOther: return "draft = another model";
  }
  return "?";
}

struct SpecSetup {
  int32_t vocab = 64;
  int32_t num_blocks = 256;
  int32_t block_size = 4;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 48;
  bool prefix_caching = true;
  Proposals proposals = Proposals::kNgram;
  int32_t k = 4;
  bool adaptive = false;  // propose the most, so every path runs
  double overhead = 1.0;  // step_overhead_tokens: 1 CPU-like, 64 GPU-like
};

std::unique_ptr<Engine> make_engine(const SpecSetup& s) {
  EngineConfig c;
  c.num_blocks = s.num_blocks;
  c.block_size = s.block_size;
  c.max_num_seqs = s.max_num_seqs;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.enable_prefix_caching = s.prefix_caching;
  std::unique_ptr<Proposer> draft;
  if (s.proposals != Proposals::kNone) {
    SpeculativeConfig& sc = c.speculative;
    sc.num_speculative_tokens = s.k;
    sc.adaptive = s.adaptive;
    sc.step_overhead_tokens = s.overhead;
    sc.step_overhead_prior = 64.0;  // where a measured overhead (< 0) starts: proposing
    if (s.proposals == Proposals::kNgram) {
      sc.method = SpecMethod::kNgram;
      sc.prompt_lookup_max = 3;
      sc.prompt_lookup_min = 1;
    } else {
      sc.method = SpecMethod::kDraftModel;
      sc.model = "fake";
      const uint64_t salt = s.proposals == Proposals::kDraftSelf ? 0 : 7;
      auto runner =
          std::make_unique<FakeModel>(s.vocab, s.max_num_batched_tokens, s.max_num_seqs, 1 << 20, 0, salt);
      // A small draft pool: the draft runs out of blocks sometimes and proposes nothing then.
      StatusOr<std::unique_ptr<DraftProposer>> d = DraftProposer::create(
          std::move(runner), s.vocab, s.num_blocks / 2, s.block_size, s.max_num_seqs, 1 << 20);
      NS_CHECK(d.ok()) << d.status().to_string();
      draft = std::move(d).value();
    }
  }
  const int32_t rows = std::min(s.max_num_batched_tokens, s.max_num_seqs * (1 + s.k));
  auto model = std::make_unique<FakeModel>(s.vocab, s.max_num_batched_tokens, s.max_num_seqs, 1 << 20, rows);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr, std::move(draft));
  NS_CHECK(e.ok()) << e.status().to_string();
  return std::move(e).value();
}

// A prompt that repeats itself, so n-gram lookups find matches.
std::vector<int32_t> repetitive_prompt(Rng& rng, int32_t len, int32_t vocab) {
  std::vector<int32_t> motif(3 + rng.next_u64() % 6);
  for (int32_t& t : motif) t = 1 + static_cast<int32_t>(rng.next_u64() % (vocab - 1));
  std::vector<int32_t> p;
  while (static_cast<int32_t>(p.size()) < len) {
    p.push_back(motif[p.size() % motif.size()]);
    if (rng.next_u64() % 9 == 0) p.back() = 1 + static_cast<int32_t>(rng.next_u64() % (vocab - 1));
  }
  return p;
}

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// Steps until idle, checking the invariants (no block held past a
// sequence's length, free + in use + evictable = total) after every step.
std::map<RequestId, std::vector<int32_t>> run_to_end(Engine& e) {
  std::map<RequestId, std::vector<int32_t>> got;
  std::vector<RequestOutput> outs;
  int guard = 0;
  while (e.has_unfinished()) {
    const Status st = e.step(outs);
    NS_CHECK(st.ok()) << st.to_string();
    const Status inv = e.check_invariants();
    EXPECT_TRUE(inv.ok()) << inv.to_string();
    for (const RequestOutput& o : outs)
      got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    NS_CHECK(++guard < 100000) << "engine does not finish";
  }
  return got;
}

TEST(SpeculativeEngine, GreedyIdenticalForEveryProposerAndK) {
  Rng rng(5);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 10; ++i)
    prompts.push_back(repetitive_prompt(rng, 3 + static_cast<int32_t>(rng.next_u64() % 60), 64));
  for (Proposals proposals : {Proposals::kNgram, Proposals::kDraftSelf, Proposals::kDraftOther}) {
    for (int32_t k : {1, 2, 4, 7}) {
      for (int32_t seqs : {1, 8}) {
        SCOPED_TRACE(::testing::Message() << name_of(proposals) << " k " << k << " max_num_seqs " << seqs);
        SpecSetup s;
        s.proposals = proposals;
        s.k = k;
        s.max_num_seqs = seqs;
        auto e = make_engine(s);
        std::vector<RequestId> ids;
        for (const auto& p : prompts) ids.push_back(e->add_request(p, greedy(25)).value());
        auto got = run_to_end(*e);
        for (size_t i = 0; i < prompts.size(); ++i)
          EXPECT_EQ(got[ids[i]], fake_greedy(prompts[i], 64, 25, -1)) << "prompt " << i;
        const EngineStats st = e->stats();
        EXPECT_GT(st.spec_num_draft_tokens, 0);
        EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
        if (proposals == Proposals::kDraftSelf) {
          // The target's own greedy tokens: every proposal is kept.
          EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
          EXPECT_EQ(st.spec_accepted_per_pos[0], st.spec_num_drafts);
        }
        if (proposals == Proposals::kDraftOther) {
          EXPECT_LT(st.spec_num_accepted_tokens * 5, st.spec_num_draft_tokens) << "most should be rejected";
        }
        int64_t per_pos = 0;
        for (int64_t n : st.spec_accepted_per_pos) per_pos += n;
        EXPECT_EQ(per_pos, st.spec_num_accepted_tokens);
      }
    }
  }
}

TEST(SpeculativeEngine, AllAcceptedTakesFewerForwards) {
  SpecSetup s;
  s.proposals = Proposals::kDraftSelf;
  s.k = 4;
  s.max_num_seqs = 1;
  auto e = make_engine(s);
  auto* model = dynamic_cast<FakeModel*>(&e->runner());
  ASSERT_NE(model, nullptr);
  Rng rng(9);
  const std::vector<int32_t> prompt = repetitive_prompt(rng, 20, 64);
  RequestId id = e->add_request(prompt, greedy(40)).value();
  auto got = run_to_end(*e);
  EXPECT_EQ(got[id], fake_greedy(prompt, 64, 40, -1));
  // One prefill step, then 5 tokens per step (4 kept proposals + 1).
  EXPECT_LE(model->num_forwards(), 1 + 8);
}

TEST(SpeculativeEngine, RandomizedInvariantsUnderPreemptionAbortsAndCacheHits) {
  for (Proposals proposals : {Proposals::kNgram, Proposals::kDraftSelf, Proposals::kDraftOther}) {
    for (bool caching : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << name_of(proposals) << (caching ? ", prefix caching" : ", no caching"));
      SpecSetup s;
      s.num_blocks = 40;  // 160 tokens for up to 8 sequences of up to 100
      s.block_size = 4;
      s.max_num_seqs = 8;
      s.max_num_batched_tokens = 24;
      s.prefix_caching = caching;
      s.proposals = proposals;
      s.k = 3;
      s.adaptive = proposals == Proposals::kDraftOther;  // one run with sizing on
      auto e = make_engine(s);
      Rng rng(11);
      const std::vector<int32_t> shared[2] = {repetitive_prompt(rng, 23, 64), repetitive_prompt(rng, 9, 64)};
      std::map<RequestId, std::vector<int32_t>> want;
      std::map<RequestId, std::vector<int32_t>> got;
      std::map<RequestId, FinishReason> reason;
      std::vector<RequestId> ids;
      std::vector<RequestOutput> outs;
      int added = 0;
      const int total = 50;
      while (added < total || e->has_unfinished()) {
        const int burst = added < total ? static_cast<int>(rng.next_u64() % 4) : 0;
        for (int i = 0; i < burst && added < total; ++i, ++added) {
          const int32_t len = 1 + static_cast<int32_t>(rng.next_u64() % 60);
          const int32_t max_tokens = 1 + static_cast<int32_t>(rng.next_u64() % 30);
          std::vector<int32_t> prompt = repetitive_prompt(rng, len, 64);
          if (rng.next_u64() % 3 != 0) {
            const std::vector<int32_t>& pre = shared[rng.next_u64() % 2];
            prompt.insert(prompt.begin(), pre.begin(), pre.end());
            prompt.resize(std::min<size_t>(prompt.size(), 70));
          }
          RequestId id = e->add_request(prompt, greedy(max_tokens)).value();
          want[id] = fake_greedy(prompt, 64, max_tokens, -1);
          ids.push_back(id);
        }
        if (!ids.empty() && rng.next_u64() % 10 == 0) e->abort(ids[rng.next_u64() % ids.size()]);
        ASSERT_TRUE(e->step(outs).ok());
        const Status inv = e->check_invariants();
        ASSERT_TRUE(inv.ok()) << inv.to_string();
        for (const RequestOutput& o : outs) {
          EXPECT_EQ(reason[o.id], FinishReason::kNone) << "output after finish";
          got[o.id].insert(got[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
          reason[o.id] = o.finish_reason;
        }
      }
      int aborted = 0;
      for (const auto& [id, tokens] : want) {
        ASSERT_NE(reason[id], FinishReason::kNone) << "request " << id << " never finished";
        if (reason[id] == FinishReason::kAbort) {
          ++aborted;
          EXPECT_TRUE(std::equal(got[id].begin(), got[id].end(), tokens.begin()))
              << "prefix before the abort";
          continue;
        }
        EXPECT_EQ(got[id], tokens) << "request " << id;
      }
      EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
      const EngineStats st = e->stats();
      EXPECT_GT(st.num_preemptions, 0) << "the pool was meant to force preemption";
      EXPECT_GT(st.spec_num_draft_tokens, 0);
      if (proposals == Proposals::kDraftSelf) {
        // Preempted, re-admitted from the cache, rolled back: the draft still proposes the target's tokens.
        EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
      } else {
        EXPECT_GT(st.spec_num_draft_tokens, st.spec_num_accepted_tokens)
            << "some proposals were meant to fail";
      }
      if (proposals == Proposals::kNgram) {
        EXPECT_GT(st.spec_num_accepted_tokens, 0);
      }
      if (caching) {
        EXPECT_GT(st.prefix_cache_hits, 0);
      }
      EXPECT_GT(aborted, 0);
      if (auto* d = dynamic_cast<DraftProposer*>(e->proposer()); d != nullptr) {
        ASSERT_TRUE(d->block_manager().check_invariants().ok());
        EXPECT_EQ(d->block_manager().num_live_seqs(), 0) << "the draft kept state of finished requests";
      }
    }
  }
}

SamplingParams seeded(uint64_t seed, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.repetition_penalty = 1.1f;  // the history of each row includes the kept proposals before it
  return p;
}

TEST(SpeculativeEngine, SampledOutputIdenticalWithAndWithoutProposals) {
  Rng rng(3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i)
    prompts.push_back(repetitive_prompt(rng, 5 + static_cast<int32_t>(rng.next_u64() % 40), 64));
  std::vector<std::vector<int32_t>> reference;
  for (Proposals proposals :
       {Proposals::kNone, Proposals::kNgram, Proposals::kDraftSelf, Proposals::kDraftOther}) {
    for (int32_t seqs : {1, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << name_of(proposals) << " max_num_seqs " << seqs);
      SpecSetup s;
      s.proposals = proposals;
      s.max_num_seqs = seqs;
      s.adaptive = seqs > 1;
      // Sized, and still proposing at batch 8; at batch 4 sized by the engine's own measurement of its steps.
      s.overhead = seqs == 4 ? -1.0 : 64.0;
      auto e = make_engine(s);
      std::vector<RequestId> ids;
      for (size_t i = 0; i < prompts.size(); ++i)
        ids.push_back(e->add_request(prompts[i], seeded(100 + i, 20)).value());
      auto got = run_to_end(*e);
      std::vector<std::vector<int32_t>> outputs;
      for (RequestId id : ids) outputs.push_back(got[id]);
      if (reference.empty()) {
        reference = outputs;
      } else {
        EXPECT_EQ(outputs, reference);
      }
      if (proposals != Proposals::kNone) {
        EXPECT_GT(e->stats().spec_num_draft_tokens, 0);
      }
      if (proposals == Proposals::kDraftSelf && !s.adaptive) {
        EXPECT_GT(e->stats().spec_num_accepted_tokens, 0);
      }
    }
  }
}

// Token frequencies at fixed positions over many seeds: with proposals
// (n-gram, and a draft that proposes the target's greedy token) against plain
// sampling with other seeds: a chi-square bound per position.
TEST(SpeculativeEngine, SampledTokenFrequenciesMatchPlainSampling) {
  constexpr int32_t kVocab = 8, kLen = 4, kRuns = 3000;
  const std::vector<int32_t> prompt = {1, 2, 3, 1, 2, 3, 1, 2};
  auto frequencies = [&](Proposals proposals, uint64_t first_seed) {
    SpecSetup s;
    s.vocab = kVocab;
    s.proposals = proposals;
    s.k = 3;
    s.max_num_seqs = 64;
    s.max_num_batched_tokens = 256;
    s.num_blocks = 1024;
    auto e = make_engine(s);
    std::vector<RequestId> ids;
    for (int i = 0; i < kRuns; ++i) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.seed = first_seed + i;
      p.max_tokens = kLen;
      ids.push_back(e->add_request(prompt, p).value());
    }
    auto got = run_to_end(*e);
    std::vector<std::vector<int64_t>> freq(kLen, std::vector<int64_t>(kVocab, 0));
    for (RequestId id : ids) {
      EXPECT_EQ(static_cast<int32_t>(got[id].size()), kLen);
      for (int32_t j = 0; j < kLen && j < static_cast<int32_t>(got[id].size()); ++j) ++freq[j][got[id][j]];
    }
    if (proposals != Proposals::kNone) {
      EXPECT_GT(e->stats().spec_num_accepted_tokens, 0);
      EXPECT_LT(e->stats().spec_num_accepted_tokens, e->stats().spec_num_draft_tokens);
    }
    return freq;
  };
  const auto plain = frequencies(Proposals::kNone, 1'000'000);
  for (Proposals proposals : {Proposals::kNgram, Proposals::kDraftSelf}) {
    const auto spec = frequencies(proposals, 1);
    for (int32_t j = 0; j < kLen; ++j) {
      const testing::ChiSquare c = testing::chi_square_same_distribution(plain[j], spec[j]);
      EXPECT_TRUE(c.consistent) << name_of(proposals) << " position " << j << ": chi-square " << c.statistic
                                << " > " << c.critical;
    }
  }
}

TEST(SpeculativeEngine, DeviceSamplingWithProposalsDrawsOneUniformPerToken) {
  // A runner that samples on the device draws a uniform for every row; the
  // engine must rewind each request's Rng past the rows it did not keep.
  Rng rng(8);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i)
    prompts.push_back(repetitive_prompt(rng, 6 + static_cast<int32_t>(rng.next_u64() % 30), 64));
  std::vector<std::vector<int32_t>> reference;
  for (bool spec : {false, true}) {
    EngineConfig c;
    c.num_blocks = 256;
    c.block_size = 4;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 48;
    if (spec) {
      c.speculative.method = SpecMethod::kNgram;
      c.speculative.num_speculative_tokens = 4;
      c.speculative.prompt_lookup_max = 3;
      c.speculative.prompt_lookup_min = 1;
      c.speculative.adaptive = false;
    }
    auto model = std::make_unique<FakeModel>(64, 48, 8, 1 << 20, 40);
    model->emulate_device_sampling(5);
    FakeModel* m = model.get();
    auto e = Engine::create(c, std::move(model), nullptr).value();
    std::vector<RequestId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.seed = 7 + i;
      p.max_tokens = 16;
      ids.push_back(e->add_request(prompts[i], p).value());
    }
    auto got = run_to_end(*e);
    std::vector<std::vector<int32_t>> outputs;
    for (RequestId id : ids) outputs.push_back(got[id]);
    EXPECT_GT(m->device_steps(), 0);
    if (reference.empty()) {
      reference = outputs;
    } else {
      EXPECT_EQ(outputs, reference);
      EXPECT_GT(e->stats().spec_num_draft_tokens, 0);
    }
  }
}

TEST(SpeculativeEngine, CreateRefusesADraftWithAnotherVocabulary) {
  auto runner = std::make_unique<FakeModel>(32, 16, 4);
  StatusOr<std::unique_ptr<DraftProposer>> d = DraftProposer::create(std::move(runner), 64, 16, 4, 4, 64);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("vocabulary"), std::string::npos);
  EngineConfig c;
  c.num_blocks = 16;
  c.speculative.method = SpecMethod::kDraftModel;
  c.speculative.model = "x";
  c.speculative.num_speculative_tokens = 2;
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::make_unique<FakeModel>(64, 512, 64), nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("speculative_config.model"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve
