// The engine's side of sampling on the device (ModelRunner::samples_on_device),
// against a fake runner that draws each sampled row with the CPU Sampler and
// the uniform the engine hands it (what the CUDA sampler must equal, see
// tests/ops/sample/sample_cuda_test.cc). The engine must give the same tokens
// and logprobs as with a runner that returns logits: one uniform a row from
// the request's own Rng, a handed-back row redrawn from the same state, and a
// row with a host-only feature (logit_bias, penalties, an active min_tokens
// mask, a constraint) sending its whole step down the logits path.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::FakeModel;

constexpr int32_t kVocab = 300;

struct Outcome {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  std::vector<std::vector<std::vector<TokenLogprob>>> top;
  int64_t device_steps = 0, host_steps = 0, handed_back = 0;
};

// Runs the requests together; hand_back_every < 0: a runner without device sampling.
Outcome run(const std::vector<SamplingParams>& params, int hand_back_every) {
  EngineConfig c;
  c.num_blocks = 256;
  c.block_size = 4;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  auto model = std::make_unique<FakeModel>(kVocab, c.max_num_batched_tokens, c.max_num_seqs);
  FakeModel* fake = model.get();
  if (hand_back_every >= 0) fake->emulate_device_sampling(hand_back_every);
  StatusOr<std::unique_ptr<Engine>> e = Engine::create(c, std::move(model), nullptr);
  NS_CHECK(e.ok()) << e.status().to_string();
  std::vector<RequestId> ids;
  Rng prompts(5);
  for (const SamplingParams& p : params) {
    std::vector<int32_t> prompt(1 + prompts.next_u64() % 9);
    for (int32_t& t : prompt) t = static_cast<int32_t>(prompts.next_u64() % kVocab);
    StatusOr<RequestId> id = (*e)->add_request(prompt, p);
    NS_CHECK(id.ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  Outcome r;
  r.tokens.resize(params.size());
  r.logprobs.resize(params.size());
  r.top.resize(params.size());
  std::vector<RequestOutput> outs;
  while ((*e)->has_unfinished()) {
    const Status st = (*e)->step(outs);
    NS_CHECK(st.ok()) << st.to_string();
    for (const RequestOutput& o : outs) {
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), o.id) - ids.begin());
      r.tokens[i].insert(r.tokens[i].end(), o.new_tokens.begin(), o.new_tokens.end());
      r.logprobs[i].insert(r.logprobs[i].end(), o.logprobs.begin(), o.logprobs.end());
      r.top[i].insert(r.top[i].end(), o.top_logprobs.begin(), o.top_logprobs.end());
    }
  }
  r.device_steps = fake->device_steps();
  r.host_steps = fake->host_steps();
  r.handed_back = fake->handed_back();
  return r;
}

SamplingParams sampled(int i) {
  SamplingParams p;
  p.max_tokens = 12;
  p.seed = 77 + static_cast<uint64_t>(i);
  p.temperature = 0.5f + 0.25f * static_cast<float>(i % 4);
  if (i % 3 == 1) p.top_k = 20;
  if (i % 3 == 2) p.top_p = 0.8f;
  if (i % 4 == 3) p.min_p = 0.1f;
  if (i % 5 == 4) p.temperature = 0.0f;
  if (i % 2 == 1) {
    p.logprobs = true;
    p.top_logprobs = i % 7;
  }
  return p;
}

void expect_same(const Outcome& a, const Outcome& b) {
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << "request " << i;
    EXPECT_EQ(a.logprobs[i], b.logprobs[i]) << "request " << i;
    ASSERT_EQ(a.top[i].size(), b.top[i].size()) << "request " << i;
    for (size_t t = 0; t < a.top[i].size(); ++t) {
      ASSERT_EQ(a.top[i][t].size(), b.top[i][t].size()) << "request " << i << " token " << t;
      for (size_t j = 0; j < a.top[i][t].size(); ++j) {
        EXPECT_EQ(a.top[i][t][j].token, b.top[i][t][j].token) << "request " << i << " token " << t;
        EXPECT_EQ(a.top[i][t][j].logprob, b.top[i][t][j].logprob) << "request " << i << " token " << t;
      }
    }
  }
}

TEST(EngineDeviceSample, SameTokensAndLogprobsAsTheLogitsPath) {
  std::vector<SamplingParams> params;
  for (int i = 0; i < 8; ++i) params.push_back(sampled(i));
  const Outcome host = run(params, -1);
  const Outcome dev = run(params, 0);
  EXPECT_EQ(dev.host_steps, 0);
  EXPECT_GT(dev.device_steps, 0);
  expect_same(dev, host);
}

// Every 3rd sampled row comes back: the engine redraws it from the Rng state
// before the device's uniform, so nothing changes (a second draw would).
TEST(EngineDeviceSample, HandedBackRowsDrawTheSameUniform) {
  std::vector<SamplingParams> params;
  for (int i = 0; i < 8; ++i) params.push_back(sampled(i));
  const Outcome host = run(params, -1);
  const Outcome dev = run(params, 3);
  EXPECT_GT(dev.handed_back, 10);
  expect_same(dev, host);
}

TEST(EngineDeviceSample, HostOnlyFeaturesKeepTheLogitsPath) {
  auto with = [](int what) {
    SamplingParams p = sampled(0);
    p.max_tokens = 6;
    switch (what) {
      case 0: p.logit_bias = {{3, 0.5f}}; break;
      case 1: p.repetition_penalty = 1.2f; break;
      case 2: p.presence_penalty = 0.5f; break;
      case 3: p.frequency_penalty = -0.5f; break;
    }
    return p;
  };
  for (int what = 0; what < 4; ++what) {
    // Alone, and beside a request the device could take: no step is device-sampled.
    const Outcome alone = run({with(what)}, 0);
    EXPECT_EQ(alone.device_steps, 0) << "feature " << what;
    EXPECT_EQ(alone.host_steps, 6) << "feature " << what;
    SamplingParams plain = sampled(1);
    plain.max_tokens = 6;
    const Outcome mixed = run({with(what), plain}, 0);
    EXPECT_EQ(mixed.device_steps, 0) << "feature " << what;
    expect_same(mixed, run({with(what), plain}, -1));
  }
  // min_tokens masks only until reached: the first 3 tokens on the host, the rest on the device.
  SamplingParams p = sampled(0);
  p.max_tokens = 6;
  p.min_tokens = 3;
  const Outcome masked = run({p}, 0);
  EXPECT_EQ(masked.host_steps, 3);
  EXPECT_EQ(masked.device_steps, 3);
  expect_same(masked, run({p}, -1));
}

// Plain greedy steps stay on the argmax path: no sample_rows, no logits.
TEST(EngineDeviceSample, PlainGreedyStepsAskForNeither) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 5;
  const Outcome r = run({p, p}, 0);
  EXPECT_EQ(r.device_steps, 0);
  EXPECT_EQ(r.host_steps, 0);
}

}  // namespace
}  // namespace nanoserve
