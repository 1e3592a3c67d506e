#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_greedy;
using testing::FakeModel;
using testing::FakeText;

constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 0;

struct EngineSetup {
  int32_t num_blocks = 256;
  int32_t block_size = 4;
  int32_t max_num_seqs = 8;
  int32_t max_num_batched_tokens = 32;
  int64_t max_model_len = 0;
  bool prefix_caching = true;
};

// async: asynchronous scheduling, over a fake whose steps overlap (FakeModel::emulate_overlap).
std::unique_ptr<Engine> make_engine_with(const EngineSetup& s, const TextStreamFactory* text, bool async) {
  EngineConfig c;
  c.async_scheduling = async;
  c.num_blocks = s.num_blocks;
  c.block_size = s.block_size;
  c.max_num_seqs = s.max_num_seqs;
  c.max_num_batched_tokens = s.max_num_batched_tokens;
  c.max_model_len = s.max_model_len;
  c.enable_prefix_caching = s.prefix_caching;
  auto model = std::make_unique<FakeModel>(kVocab, s.max_num_batched_tokens, s.max_num_seqs);
  if (async) model->emulate_overlap();
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), text);
  NS_CHECK(e.ok()) << e.status().to_string();
  NS_CHECK_EQ((*e)->async_scheduling(), async);
  return std::move(e).value();
}

// Each test runs one step at a time and with asynchronous scheduling: the same outputs, the same
// invariants after every step.
class EngineModes : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<Engine> make_engine(const EngineSetup& s, const TextStreamFactory* text) {
    return make_engine_with(s, text, GetParam());
  }
};

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

std::vector<int32_t> random_prompt(Rng& rng, int32_t len) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = 1 + static_cast<int32_t>(rng.next_u64() % (kVocab - 1));
  return p;
}

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::string stop_string;
};

// One step, the engine's invariants after it, and its outputs into `got`: nothing may come
// after a request's finish.
void step_and_collect(Engine& e, std::vector<RequestOutput>& outs, std::map<RequestId, Collected>& got) {
  const Status st = e.step(outs);
  NS_CHECK(st.ok()) << st.to_string();
  const Status inv = e.check_invariants();
  EXPECT_TRUE(inv.ok()) << inv.to_string();
  for (const RequestOutput& o : outs) {
    Collected& c = got[o.id];
    EXPECT_EQ(c.reason, FinishReason::kNone) << "request " << o.id << ": an output after its finish";
    c.tokens.insert(c.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    c.text += o.text;
    c.reason = o.finish_reason;
    c.stop_string = o.stop_string;
  }
}

// Steps until idle, checking the engine's invariants after every step.
std::map<RequestId, Collected> run_to_end(Engine& e, std::map<RequestId, Collected> got = {}) {
  std::vector<RequestOutput> outs;
  int guard = 0;
  while (e.has_unfinished()) {
    step_and_collect(e, outs, got);
    NS_CHECK(++guard < 100000) << "engine does not finish";
  }
  return got;
}

TEST_P(EngineModes, GreedyMatchesTheOracle) {
  auto e = make_engine({}, nullptr);
  Rng rng(1);
  std::vector<int32_t> prompt = random_prompt(rng, 45);  // longer than the 32-token budget: chunked
  RequestId id = e->add_request(prompt, greedy(20)).value();
  auto got = run_to_end(*e);
  EXPECT_EQ(got[id].tokens, fake_greedy(prompt, kVocab, 20, -1));
  EXPECT_EQ(got[id].reason, FinishReason::kLength);
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
}

TEST_P(EngineModes, StopsOnEosFromTheTokenizer) {
  FakeText text({kEos});
  auto e = make_engine({}, &text);
  // Find a prompt whose greedy continuation hits eos within 300 tokens.
  Rng rng(5);
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::vector<int32_t> prompt = random_prompt(rng, 3);
    std::vector<int32_t> want = fake_greedy(prompt, kVocab, 300, kEos);
    if (want.back() != kEos) continue;
    RequestId id = e->add_request(prompt, greedy(300)).value();
    auto got = run_to_end(*e);
    EXPECT_EQ(got[id].tokens, want);
    EXPECT_EQ(got[id].reason, FinishReason::kStop);
    want.pop_back();
    EXPECT_EQ(got[id].text, FakeText::text_of(want)) << "the eos token adds no text";
    return;
  }
  FAIL() << "no prompt reached eos";
}

TEST_P(EngineModes, MinTokensKeepsEosAwayUntilReached) {
  FakeText text({kEos});
  auto e = make_engine({}, &text);
  // A prompt whose greedy continuation hits eos early; with min_tokens past that point the
  // request must go on, and no token before min_tokens may be eos.
  Rng rng(5);
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::vector<int32_t> prompt = random_prompt(rng, 3);
    const std::vector<int32_t> free_run = fake_greedy(prompt, kVocab, 40, kEos);
    if (free_run.back() != kEos || free_run.size() > 20) continue;
    SamplingParams p = greedy(40);
    p.min_tokens = static_cast<int32_t>(free_run.size()) + 5;
    RequestId id = e->add_request(prompt, p).value();
    auto got = run_to_end(*e);
    const std::vector<int32_t>& out = got[id].tokens;
    ASSERT_GE(out.size(), static_cast<size_t>(p.min_tokens));
    for (int32_t i = 0; i < p.min_tokens; ++i) EXPECT_NE(out[i], kEos) << "token " << i;
    EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + free_run.size() - 1),
              std::vector<int32_t>(free_run.begin(), free_run.end() - 1))
        << "before the first eos the run is the free run";
    EXPECT_NE(out[free_run.size() - 1], kEos) << "where eos was, the next best token";
    return;
  }
  FAIL() << "no prompt reached eos";
}

TEST_P(EngineModes, StopStringEndsTheRequestAndIsNotEmitted) {
  FakeText text({});
  auto e = make_engine({}, &text);
  Rng rng(11);
  std::vector<int32_t> prompt = random_prompt(rng, 7);
  const std::vector<int32_t> free_run = fake_greedy(prompt, kVocab, 40, -1);
  const std::string full = FakeText::text_of(free_run);
  const std::string stop = full.substr(20, 3);  // spans three tokens
  const size_t at = full.find(stop);
  SamplingParams p = greedy(40);
  p.stop = {stop};
  RequestId id = e->add_request(prompt, p).value();
  auto got = run_to_end(*e);
  EXPECT_EQ(got[id].reason, FinishReason::kStop);
  EXPECT_EQ(got[id].text, full.substr(0, at));
  EXPECT_EQ(got[id].tokens.size(), at + 3) << "stops on the token that completes the stop string";
}

// What a request of the fake model gives with eos kEos and one stop string, worked out token by
// token from the oracle's free run and FakeText's one letter a token (not by the StopChecker).
Collected expected_with_stop(const std::vector<int32_t>& prompt, int32_t max_tokens, const std::string& stop) {
  const std::vector<int32_t> free_run = fake_greedy(prompt, kVocab, max_tokens, kEos);
  Collected want;
  std::string text;
  for (size_t i = 0; i < free_run.size(); ++i) {
    want.tokens.push_back(free_run[i]);
    if (free_run[i] == kEos) {
      want.text = text;
      want.reason = FinishReason::kStop;
      return want;
    }
    text += FakeText::text_of(std::span<const int32_t>(&free_run[i], 1));
    if (const size_t at = text.find(stop); !stop.empty() && at != std::string::npos) {
      want.text = text.substr(0, at);
      want.reason = FinishReason::kStop;
      return want;
    }
  }
  want.text = text;
  want.reason = FinishReason::kLength;
  return want;
}

// Many requests ending by eos, by a stop string (spanning one to three tokens, so found while the
// request is already in the next launched step) or by length, with aborts between steps: every
// request that was not aborted gives exactly the oracle's tokens, text and reason; nothing comes
// after a finish; the invariants hold after every step and every block comes back.
TEST_P(EngineModes, RandomizedStopsAndAbortsGiveTheOracle) {
  FakeText text({kEos});
  EngineSetup s;
  s.num_blocks = 48;
  s.max_num_seqs = 6;
  s.max_num_batched_tokens = 20;
  auto e = make_engine(s, &text);
  Rng rng(77);
  std::map<RequestId, Collected> want, got;
  std::vector<RequestId> ids;
  std::vector<RequestOutput> outs;
  int added = 0, stopped_by_string = 0;
  const int total = 50;
  while (added < total || e->has_unfinished()) {
    const int burst = added < total ? static_cast<int>(rng.next_u64() % 3) : 0;
    for (int i = 0; i < burst && added < total; ++i, ++added) {
      const std::vector<int32_t> prompt = random_prompt(rng, 1 + static_cast<int32_t>(rng.next_u64() % 30));
      const int32_t max_tokens = 1 + static_cast<int32_t>(rng.next_u64() % 40);
      const std::string run = FakeText::text_of(fake_greedy(prompt, kVocab, max_tokens, -1));
      SamplingParams p = greedy(max_tokens);
      // Two in three take a stop string from their own run (it may still end first by eos).
      if (rng.next_u64() % 3 != 0) {
        const size_t len = 1 + rng.next_u64() % 3, at = rng.next_u64() % run.size();
        p.stop = {run.substr(at, len)};
      }
      const RequestId id = e->add_request(prompt, p).value();
      want[id] = expected_with_stop(prompt, max_tokens, p.stop.empty() ? "" : p.stop[0]);
      ids.push_back(id);
    }
    if (!ids.empty() && rng.next_u64() % 12 == 0) e->abort(ids[rng.next_u64() % ids.size()]);
    step_and_collect(*e, outs, got);
  }
  int aborted = 0;
  for (const auto& [id, w] : want) {
    const Collected& c = got[id];
    stopped_by_string += c.stop_string.empty() ? 0 : 1;
    ASSERT_NE(c.reason, FinishReason::kNone) << "request " << id << " never finished";
    if (c.reason == FinishReason::kAbort) {
      ++aborted;
      EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), w.tokens.begin())) << "prefix before the abort";
      continue;
    }
    EXPECT_EQ(c.tokens, w.tokens) << "request " << id;
    EXPECT_EQ(c.text, w.text) << "request " << id;
    EXPECT_EQ(c.reason, w.reason) << "request " << id;
  }
  EXPECT_GT(stopped_by_string, 10);
  EXPECT_GT(aborted, 0);
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
  EXPECT_EQ(e->stats().num_finished + e->stats().num_aborted, total);
}

TEST_P(EngineModes, RejectsRequestsThatCanNeverFit) {
  FakeText text({kEos});
  EngineSetup s;
  s.num_blocks = 10;  // 40 tokens of KV
  s.max_model_len = 32;
  auto e = make_engine(s, &text);
  StatusOr<RequestId> r = e->add_request(std::vector<int32_t>(30, 1), greedy(3));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_model_len 32"), std::string::npos) << r.status().message();
  s.max_model_len = 100;
  e = make_engine(s, &text);
  r = e->add_request(std::vector<int32_t>(30, 1), greedy(11));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("KV cache capacity of 40"), std::string::npos) << r.status().message();
  EXPECT_TRUE(e->add_request(std::vector<int32_t>(30, 1), greedy(10)).ok()) << "exactly the pool fits";
  EXPECT_FALSE(e->add_request({}, greedy(1)).ok());
  r = e->add_request({1, kVocab}, greedy(1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("position 1"), std::string::npos) << r.status().message();
  SamplingParams bad = greedy(1);
  bad.top_p = 2.0f;
  EXPECT_FALSE(e->add_request({1}, bad).ok());
}

TEST_P(EngineModes, StopStringsNeedATokenizer) {
  auto e = make_engine({}, nullptr);
  SamplingParams p = greedy(4);
  p.stop = {"x"};
  StatusOr<RequestId> r = e->add_request({1, 2}, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST_P(EngineModes, AbortWaitingAndRunningFreesBlocksAndReportsAbort) {
  EngineSetup s;
  s.max_num_seqs = 1;
  s.max_num_batched_tokens = 8;
  auto e = make_engine(s, nullptr);
  RequestId a = e->add_request({1, 2, 3}, greedy(50)).value();
  RequestId b = e->add_request({4, 5, 6}, greedy(50)).value();
  std::vector<RequestOutput> outs;
  ASSERT_TRUE(e->step(outs).ok());
  ASSERT_TRUE(e->step(outs).ok());
  EXPECT_GT(e->block_manager().num_in_use_blocks(), 0);
  e->abort(a);      // running
  e->abort(b);      // waiting
  e->abort(12345);  // unknown: ignored
  ASSERT_TRUE(e->step(outs).ok());
  ASSERT_EQ(outs.size(), 2u);
  for (const RequestOutput& o : outs) EXPECT_EQ(o.finish_reason, FinishReason::kAbort);
  // Asynchronous, the call completes a's second step before it takes the abort in: that token
  // comes with the abort.
  EXPECT_EQ(outs[0].id, a);
  EXPECT_EQ(outs[0].new_tokens.size(), GetParam() ? 1u : 0u);
  EXPECT_TRUE(outs[1].new_tokens.empty());
  EXPECT_EQ(outs[0].num_output_tokens, 2);
  EXPECT_FALSE(e->has_unfinished());
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
  EXPECT_TRUE(e->check_invariants().ok());
  EXPECT_EQ(e->stats().num_aborted, 2);
}

// Many requests of random lengths, many sharing a prefix, random aborts, a
// pool small enough to force preemption and eviction: after every step the
// invariants hold (free + in use + cached evictable = total, and the
// recount), and every request that was not aborted produces exactly the
// oracle's tokens, with and without prefix caching.
TEST_P(EngineModes, RandomizedInvariantsUnderPreemptionAbortsAndCacheHits) {
  for (uint64_t seed : {1u, 2u, 3u})
    for (bool caching : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "seed " << seed << (caching ? ", prefix caching" : ", no caching"));
      EngineSetup s;
      s.num_blocks = 40;  // 160 tokens for up to 8 sequences of up to 100
      s.block_size = 4;
      s.max_num_seqs = 8;
      s.max_num_batched_tokens = 24;
      s.prefix_caching = caching;
      auto e = make_engine(s, nullptr);
      Rng rng(seed);
      const std::vector<int32_t> shared[2] = {random_prompt(rng, 23), random_prompt(rng, 9)};
      std::map<RequestId, std::vector<int32_t>> want;
      std::map<RequestId, Collected> got;
      std::vector<RequestId> ids;
      std::vector<RequestOutput> outs;
      int added = 0;
      const int total = 60;
      while (added < total || e->has_unfinished()) {
        // Arrivals in bursts, between steps.
        const int burst = added < total ? static_cast<int>(rng.next_u64() % 4) : 0;
        for (int i = 0; i < burst && added < total; ++i, ++added) {
          const int32_t len = 1 + static_cast<int32_t>(rng.next_u64() % 70);
          const int32_t max_tokens = 1 + static_cast<int32_t>(rng.next_u64() % 30);
          std::vector<int32_t> prompt = random_prompt(rng, len);
          if (rng.next_u64() % 3 != 0) {  // two in three start with a shared prefix
            const std::vector<int32_t>& pre = shared[rng.next_u64() % 2];
            prompt.insert(prompt.begin(), pre.begin(), pre.end());
            prompt.resize(std::min<size_t>(prompt.size(), 70));
          }
          RequestId id = e->add_request(prompt, greedy(max_tokens)).value();
          want[id] = fake_greedy(prompt, kVocab, max_tokens, -1);
          ids.push_back(id);
        }
        if (!ids.empty() && rng.next_u64() % 10 == 0) e->abort(ids[rng.next_u64() % ids.size()]);
        step_and_collect(*e, outs, got);
      }
      int aborted = 0;
      for (const auto& [id, tokens] : want) {
        const Collected& c = got[id];
        ASSERT_NE(c.reason, FinishReason::kNone) << "request " << id << " never finished";
        if (c.reason == FinishReason::kAbort) {
          ++aborted;
          EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), tokens.begin()))
              << "prefix before the abort";
          continue;
        }
        EXPECT_EQ(c.reason, FinishReason::kLength);
        EXPECT_EQ(c.tokens, tokens) << "request " << id;
      }
      EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
      EXPECT_GT(e->stats().num_preemptions, 0) << "the pool was meant to force preemption";
      if (caching) {
        EXPECT_GT(e->stats().prefix_cache_hits, 0);
        EXPECT_GT(e->block_manager().num_evictions(), 0) << "the pool was meant to force eviction";
      } else {
        EXPECT_EQ(e->stats().prefix_cache_hits, 0);
      }
      EXPECT_GT(aborted, 0);
      EXPECT_LT(aborted, total);
    }
}

TEST_P(EngineModes, OutputIndependentOfBudgetAndBatch) {
  Rng rng(21);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i)
    prompts.push_back(random_prompt(rng, 1 + static_cast<int32_t>(rng.next_u64() % 50)));
  std::vector<std::vector<int32_t>> reference;
  for (int32_t budget : {8, 13, 64}) {
    for (int32_t seqs : {1, 3, 8}) {
      EngineSetup s;
      s.max_num_batched_tokens = budget;
      s.max_num_seqs = seqs;
      auto e = make_engine(s, nullptr);
      std::vector<RequestId> ids;
      for (size_t i = 0; i < prompts.size(); ++i) {
        SamplingParams p;  // seeded sampling, not greedy
        p.temperature = 0.8f;
        p.top_p = 0.9f;
        p.seed = 100 + i;
        p.max_tokens = 12;
        ids.push_back(e->add_request(prompts[i], p).value());
      }
      auto got = run_to_end(*e);
      std::vector<std::vector<int32_t>> outputs;
      for (RequestId id : ids) outputs.push_back(got[id].tokens);
      if (reference.empty()) {
        reference = outputs;
      } else {
        EXPECT_EQ(outputs, reference) << "budget " << budget << " seqs " << seqs;
      }
    }
  }
}

TEST_P(EngineModes, UnseededRequestsGetDistinctStreams) {
  auto e = make_engine({}, nullptr);
  SamplingParams p;
  p.max_tokens = 16;
  RequestId a = e->add_request({1, 2, 3}, p).value();
  RequestId b = e->add_request({1, 2, 3}, p).value();
  auto got = run_to_end(*e);
  EXPECT_NE(got[a].tokens, got[b].tokens);
}

TEST_P(EngineModes, LogprobsComeWithEachToken) {
  auto e = make_engine({}, nullptr);
  SamplingParams p = greedy(5);
  p.logprobs = true;
  p.top_logprobs = 3;
  RequestId id = e->add_request({7, 8, 9}, p).value();
  std::vector<RequestOutput> outs;
  int n = 0;
  while (e->has_unfinished()) {
    ASSERT_TRUE(e->step(outs).ok());
    for (const RequestOutput& o : outs) {
      ASSERT_EQ(o.id, id);
      ASSERT_EQ(o.logprobs.size(), o.new_tokens.size());
      ASSERT_EQ(o.top_logprobs.size(), o.new_tokens.size());
      for (size_t i = 0; i < o.new_tokens.size(); ++i) {
        ASSERT_EQ(o.top_logprobs[i].size(), 3u);
        EXPECT_EQ(o.top_logprobs[i][0].token, o.new_tokens[i]) << "greedy picks the most likely token";
        EXPECT_FLOAT_EQ(o.top_logprobs[i][0].logprob, o.logprobs[i]);
        EXPECT_LT(o.logprobs[i], 0.0f);
        ++n;
      }
    }
  }
  EXPECT_EQ(n, 5);
}

TEST_P(EngineModes, StatsCountTokensAndTimesAreOrdered) {
  auto e = make_engine({}, nullptr);
  RequestId id = e->add_request({1, 2, 3, 4}, greedy(6)).value();
  EXPECT_EQ(e->stats().num_waiting, 1);
  std::vector<RequestOutput> outs;
  RequestOutput last;
  while (e->has_unfinished()) {
    ASSERT_TRUE(e->step(outs).ok());
    for (const RequestOutput& o : outs) last = o;
  }
  EXPECT_EQ(last.id, id);
  EXPECT_EQ(last.num_prompt_tokens, 4);
  EXPECT_EQ(last.num_output_tokens, 6);
  EXPECT_LE(last.arrival_time, last.first_token_time);
  EXPECT_LE(last.first_token_time, last.finish_time);
  EngineStats st = e->stats();
  EXPECT_EQ(st.prompt_tokens, 4);
  EXPECT_EQ(st.generation_tokens, 6);
  EXPECT_EQ(st.num_finished, 1);
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.kv_usage, 0.0);
  // One prefill step, then five steps of one decode each.
  EXPECT_EQ(st.num_steps, 6);
  EXPECT_EQ(st.decode_steps, 5);
  EXPECT_EQ(st.decode_step_rows, 5);
  EXPECT_GT(st.decode_step_seconds, 0.0);
}

TEST(Engine, StepsMixingPrefillAndDecodeAreNotDecodeSteps) {
  auto e = make_engine_with({}, nullptr, false);
  std::vector<RequestOutput> outs;
  ASSERT_TRUE(e->add_request({1, 2, 3, 4}, greedy(4)).ok());
  ASSERT_TRUE(e->step(outs).ok());  // prefill of the first
  ASSERT_TRUE(e->add_request({5, 6, 7}, greedy(4)).ok());
  ASSERT_TRUE(e->step(outs).ok());  // decode of the first + prefill of the second
  EXPECT_EQ(e->stats().decode_steps, 0);
  ASSERT_TRUE(e->step(outs).ok());  // two decodes
  EXPECT_EQ(e->stats().decode_steps, 1);
  EXPECT_EQ(e->stats().decode_step_rows, 2);
}

TEST_P(EngineModes, AddAndAbortFromOtherThreadsWhileStepping) {
  EngineSetup s;
  s.num_blocks = 64;
  auto e = make_engine(s, nullptr);
  std::atomic<bool> done{false};
  std::vector<std::thread> clients;
  std::mutex mu;
  std::map<RequestId, std::vector<int32_t>> want;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      Rng rng(1000 + t);
      for (int i = 0; i < 25; ++i) {
        std::vector<int32_t> prompt = random_prompt(rng, 1 + static_cast<int32_t>(rng.next_u64() % 20));
        RequestId id = e->add_request(prompt, greedy(8)).value();
        if (i % 7 == 3) {
          e->abort(id);
        } else {
          std::lock_guard<std::mutex> lock(mu);
          want[id] = fake_greedy(prompt, kVocab, 8, -1);
        }
      }
    });
  }
  std::map<RequestId, Collected> got;
  std::vector<RequestOutput> outs;
  std::thread joiner([&] {
    for (auto& c : clients) c.join();
    done = true;
  });
  while (!done || e->has_unfinished()) {
    e->wait_for_work(std::chrono::milliseconds(5));
    ASSERT_TRUE(e->step(outs).ok());
    ASSERT_TRUE(e->check_invariants().ok());
    for (const RequestOutput& o : outs) {
      got[o.id].tokens.insert(got[o.id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      got[o.id].reason = o.finish_reason;
    }
  }
  joiner.join();
  EXPECT_EQ(got.size(), 100u) << "every request reports a finish";
  for (const auto& [id, tokens] : want) EXPECT_EQ(got[id].tokens, tokens);
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);
}

INSTANTIATE_TEST_SUITE_P(Engine, EngineModes, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "async" : "sync"; });

}  // namespace
}  // namespace nanoserve
