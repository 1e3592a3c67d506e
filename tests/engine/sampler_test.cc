#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace nanoserve {
namespace {

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Candidate ids of the last sample() as a sorted set.
std::vector<int32_t> candidate_set(const Sampler& s) {
  std::vector<int32_t> c(s.candidates().begin(), s.candidates().end());
  std::sort(c.begin(), c.end());
  return c;
}

std::vector<int32_t> candidates_after(Sampler& s, const std::vector<float>& logits, const SamplingParams& p) {
  Rng rng(1);
  s.sample(logits, p, {}, {}, rng);
  return candidate_set(s);
}

TEST(Sampler, GreedyIsArgmax) {
  Sampler s(5);
  Rng rng(0);
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 2.0f, -1.0f, 1.9f, 0.0f}, greedy(), {}, {}, rng), 1);
  EXPECT_EQ(s.sample(std::vector<float>{-5.0f, -4.0f, -3.0f, -2.0f, -1.0f}, greedy(), {}, {}, rng), 4);
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  Sampler s(6);
  Rng rng(0);
  EXPECT_EQ(s.sample(std::vector<float>{0.0f, 3.0f, 1.0f, 3.0f, 3.0f, 2.0f}, greedy(), {}, {}, rng), 1);
  EXPECT_EQ(s.sample(std::vector<float>{7.0f, 3.0f, 1.0f, 7.0f, 3.0f, 7.0f}, greedy(), {}, {}, rng), 0);
}

// A tiny temperature is greedy: 1e-38 would turn the logits into +inf.
TEST(Sampler, TinyTemperaturesAreGreedy) {
  Sampler s(5);
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  for (float t : {1e-38f, 1e-20f, 9.9e-6f}) {
    SamplingParams p;
    p.temperature = t;
    EXPECT_TRUE(p.greedy()) << t;
    Rng rng(0), fresh(0);
    EXPECT_EQ(s.sample(logits, p, {}, {}, rng), 1) << t;
    EXPECT_EQ(rng.next_u64(), fresh.next_u64()) << t << ": drew from the Rng";
  }
  SamplingParams warm;
  warm.temperature = 1e-5f;
  EXPECT_FALSE(warm.greedy());
}

TEST(Sampler, GreedyDrawsNothingFromTheRng) {
  Sampler s(4);
  Rng rng(42), fresh(42);
  for (int i = 0; i < 5; ++i) s.sample(std::vector<float>{0.0f, 1.0f, 2.0f, 3.0f}, greedy(), {}, {}, rng);
  EXPECT_EQ(rng.next_u64(), fresh.next_u64());
}

TEST(Sampler, RepetitionPenaltyOverPromptAndOutputOncePerToken) {
  Sampler s(6);
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> in{4.0f, -4.0f, 4.0f, -4.0f, 4.0f, 1.0f};
  std::vector<float> out(6);
  std::vector<int32_t> prompt{0, 1, 0, 0};  // 0 three times: still divided once
  std::vector<int32_t> output{3, 3};
  s.process_logits(in, p, prompt, output, out);
  EXPECT_FLOAT_EQ(out[0], 2.0f);   // positive: divided
  EXPECT_FLOAT_EQ(out[1], -8.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(out[2], 4.0f);   // not seen
  EXPECT_FLOAT_EQ(out[3], -8.0f);  // from the output
  EXPECT_FLOAT_EQ(out[4], 4.0f);
  EXPECT_FLOAT_EQ(out[5], 1.0f);
  EXPECT_FLOAT_EQ(in[0], 4.0f) << "the raw logits must not change";
}

TEST(Sampler, FrequencyAndPresencePenaliseGeneratedTokensOnly) {
  Sampler s(5);
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 1.0f;
  std::vector<float> in(5, 10.0f), out(5);
  std::vector<int32_t> prompt{0, 0, 0, 4};
  std::vector<int32_t> output{1, 2, 2, 2, 4};
  s.process_logits(in, p, prompt, output, out);
  EXPECT_FLOAT_EQ(out[0], 10.0f) << "prompt tokens carry no presence/frequency penalty";
  EXPECT_FLOAT_EQ(out[1], 10.0f - 0.5f - 1.0f);
  EXPECT_FLOAT_EQ(out[2], 10.0f - 1.5f - 1.0f);
  EXPECT_FLOAT_EQ(out[3], 10.0f);
  EXPECT_FLOAT_EQ(out[4], 10.0f - 0.5f - 1.0f);
  // Scratch state must be clean for the next call: same input, same result.
  std::vector<float> again(5);
  s.process_logits(in, p, prompt, output, again);
  EXPECT_EQ(out, again);
}

TEST(Sampler, PenaltiesComeBeforeTemperature) {
  Sampler s(2);
  SamplingParams p;
  p.presence_penalty = 1.0f;
  p.temperature = 2.0f;
  std::vector<float> out(2);
  std::vector<int32_t> output{0};
  s.process_logits(std::vector<float>{3.0f, 3.0f}, p, {}, output, out);
  EXPECT_FLOAT_EQ(out[0], (3.0f - 1.0f) / 2.0f);  // not 3/2 - 1
  EXPECT_FLOAT_EQ(out[1], 1.5f);
}

TEST(Sampler, GreedyAppliesPenalties) {
  Sampler s(3);
  SamplingParams p = greedy();
  p.repetition_penalty = 4.0f;
  Rng rng(0);
  std::vector<int32_t> output{0};
  EXPECT_EQ(s.sample(std::vector<float>{4.0f, 2.0f, 0.0f}, p, {}, output, rng), 1);
}

TEST(Sampler, TopKKeepsKHighestTiesToLowestId) {
  Sampler s(6);
  SamplingParams p;
  p.top_k = 3;
  EXPECT_EQ(candidates_after(s, {0.0f, 5.0f, 1.0f, 4.0f, 1.0f, 1.0f}, p), (std::vector<int32_t>{1, 2, 3}));
  p.top_k = 1;
  EXPECT_EQ(candidates_after(s, {2.0f, 1.0f, 2.0f, 0.0f, 2.0f, 0.0f}, p), (std::vector<int32_t>{0}));
  p.top_k = 2;
  EXPECT_EQ(candidates_after(s, {2.0f, 1.0f, 2.0f, 0.0f, 2.0f, 0.0f}, p), (std::vector<int32_t>{0, 2}));
  p.top_k = 100;  // more than the vocabulary: no filter
  EXPECT_EQ(candidates_after(s, {2.0f, 1.0f, 2.0f, 0.0f, 0.0f, 0.0f}, p).size(), 6u);
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  Sampler s(3);
  SamplingParams p;
  const std::vector<float> l = log_of({0.5, 0.3, 0.2});
  p.top_p = 0.5f;
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0}));
  p.top_p = 0.6f;
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1}));
  p.top_p = 0.79f;
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1}));
  p.top_p = 0.85f;
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1, 2}));
  p.top_p = 0.01f;  // always at least the top token
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0}));
}

TEST(Sampler, TopPIsRelativeToTheTopKSet) {
  Sampler s(4);
  SamplingParams p;
  const std::vector<float> l = log_of({0.4, 0.3, 0.2, 0.1});
  p.top_p = 0.5f;
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1}));  // 0.4 < 0.5
  p.top_k = 2;                                                         // renormalised: 4/7 >= 0.5
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0}));
}

TEST(Sampler, TopPComesAfterTemperature) {
  Sampler s(3);
  SamplingParams p;
  p.top_p = 0.7f;
  const std::vector<float> l = log_of({0.72, 0.18, 0.10});
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0}));
  p.temperature = 4.0f;  // flatter: the top token alone no longer reaches 0.7
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1}));
}

TEST(Sampler, MinPRelativeToMaxAfterTemperature) {
  Sampler s(3);
  SamplingParams p;
  p.min_p = 0.5f;
  const std::vector<float> l{0.0f, -1.0f, -0.5f};  // ratios 1, 0.37, 0.61
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 2}));
  p.temperature = 2.0f;  // ratios 1, 0.61, 0.78
  EXPECT_EQ(candidates_after(s, l, p), (std::vector<int32_t>{0, 1, 2}));
}

TEST(Sampler, CandidateProbabilitiesAreRenormalised) {
  Sampler s(4);
  SamplingParams p;
  p.top_k = 2;
  Rng rng(3);
  s.sample(log_of({0.4, 0.3, 0.2, 0.1}), p, {}, {}, rng);
  ASSERT_EQ(s.candidate_probs().size(), 2u);
  EXPECT_NEAR(s.candidate_probs()[0], 4.0 / 7.0, 1e-6);
  EXPECT_NEAR(s.candidate_probs()[1], 3.0 / 7.0, 1e-6);
}

// A plain full-sort reference of the filter chain, for random cross-checks.
std::vector<int32_t> reference_candidates(const std::vector<float>& l, const SamplingParams& p) {
  const int32_t V = static_cast<int32_t>(l.size());
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  const float m = l[ids[0]];
  int32_t k = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  ids.resize(k);
  std::vector<double> w;
  double z = 0.0;
  for (int32_t t : ids) {
    w.push_back(std::exp(l[t] - m));
    z += w.back();
  }
  std::vector<int32_t> kept;
  double cum = 0.0;
  for (int32_t j = 0; j < k; ++j) {
    if (j > 0 && p.top_p < 1.0f && cum >= double(p.top_p) * z) break;
    if (j > 0 && w[j] < p.min_p) break;
    kept.push_back(ids[j]);
    cum += w[j];
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

TEST(Sampler, FiltersMatchFullSortReferenceForRandomLogits) {
  Rng gen(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int32_t V = 1 + static_cast<int32_t>(gen.next_u64() % 3000);
    std::vector<float> l(V);
    const double spread = 0.1 + 6.0 * gen.next_double();
    for (float& x : l) x = static_cast<float>(spread * (gen.next_double() - 0.5));
    // A few exact ties, so tie-breaking is exercised.
    for (int i = 0; i < V / 10; ++i) l[gen.next_u64() % V] = l[gen.next_u64() % V];
    SamplingParams p;
    p.top_k = (trial % 3 == 0) ? -1 : 1 + static_cast<int32_t>(gen.next_u64() % (V + 5));
    p.top_p = (trial % 2 == 0) ? 1.0f : static_cast<float>(0.05 + 0.949 * gen.next_double());
    p.min_p = (trial % 5 < 2) ? 0.0f : static_cast<float>(0.3 * gen.next_double());
    Sampler s(V);
    EXPECT_EQ(candidates_after(s, l, p), reference_candidates(l, p))
        << "trial " << trial << " V=" << V << " top_k=" << p.top_k << " top_p=" << p.top_p
        << " min_p=" << p.min_p;
  }
}

TEST(Sampler, DrawsFollowTheDistribution) {
  Sampler s(4);
  SamplingParams p;
  const std::vector<double> probs{0.5, 0.25, 0.15, 0.10};
  for (bool filtered : {false, true}) {
    p.top_k = filtered ? 4 : -1;  // both the plain and the ranked walk
    Rng rng(123);
    std::vector<int> hits(4, 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) ++hits[s.sample(log_of(probs), p, {}, {}, rng)];
    for (int t = 0; t < 4; ++t) {
      const double sd = std::sqrt(probs[t] * (1 - probs[t]) / n);
      EXPECT_NEAR(hits[t] / double(n), probs[t], 5 * sd) << "token " << t << " filtered " << filtered;
    }
  }
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  Sampler s(50);
  std::vector<float> l(50, 0.0f);  // uniform
  SamplingParams p;
  p.top_p = 0.9f;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 32; ++i) out.push_back(s.sample(l, p, {}, out, rng));
    return out;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(Sampler, LogitBiasIsAddedBeforeTheArgmax) {
  Sampler s(5);
  Rng rng(0);
  const std::vector<float> l{0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  SamplingParams p = greedy();
  p.logit_bias = {{3, 0.2f}};
  EXPECT_EQ(s.sample(l, p, {}, {}, rng), 3);
  p.logit_bias = {{1, -100.0f}, {3, -100.0f}};
  EXPECT_EQ(s.sample(l, p, {}, {}, rng), 0);
  std::vector<float> out(5);
  p.logit_bias = {{2, 3.0f}};
  s.process_logits(l, p, {}, {}, out);
  EXPECT_FLOAT_EQ(out[2], 2.0f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  EXPECT_EQ(l[2], -1.0f) << "the raw row is left unchanged";
}

TEST(Sampler, LogitBiasComesBeforeTheRepetitionPenalty) {
  // vLLM's order: the bias turns logit 1 into -1, which the penalty then multiplies (not divides).
  Sampler s(3);
  SamplingParams p = greedy();
  p.logit_bias = {{0, -2.0f}};
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt{0};
  std::vector<float> out(3);
  s.process_logits(std::vector<float>{1.0f, 0.0f, 0.0f}, p, prompt, {}, out);
  EXPECT_FLOAT_EQ(out[0], -2.0f);
}

TEST(Sampler, MinTokensMasksEosAndStopTokenIdsUntilReached) {
  const std::vector<int32_t> eos{2};
  Sampler s(6, eos);
  const std::vector<float> l{0.0f, 1.0f, 9.0f, 2.0f, 8.0f, 0.5f};  // eos (2) is the argmax, then 4
  SamplingParams p = greedy();
  p.min_tokens = 2;
  p.stop_token_ids = {4};
  Rng rng(0);
  std::vector<int32_t> out;
  EXPECT_EQ(s.sample(l, p, {}, out, rng), 3) << "eos and the stop token id are masked";
  out.push_back(3);
  EXPECT_EQ(s.sample(l, p, {}, out, rng), 3);
  out.push_back(3);
  EXPECT_EQ(s.sample(l, p, {}, out, rng), 2) << "two generated: the mask is off";
  out = {};
  p.ignore_eos = true;
  EXPECT_EQ(s.sample(l, p, {}, out, rng), 2) << "ignore_eos: eos is an ordinary token, not masked";
}

TEST(Sampler, MaskedTokensAreNeverDrawn) {
  // Eos holds almost all the mass; under min_tokens it has weight exactly 0, so no draw picks it,
  // whichever walk the filters choose.
  const std::vector<int32_t> eos{0, 5};
  Sampler s(8, eos);
  const std::vector<float> l{30.0f, -60.0f, -60.0f, -60.0f, -60.0f, 30.0f, -60.0f, -60.0f};
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.min_tokens = 1;
    if (variant == 1) p.top_k = 7;  // the heap walk keeps one masked token
    if (variant == 2) p.top_p = 0.999999f;
    Rng rng(7);
    std::vector<int> hits(8, 0);
    for (int i = 0; i < 4000; ++i) ++hits[s.sample(l, p, {}, {}, rng)];
    EXPECT_EQ(hits[0] + hits[5], 0) << "variant " << variant;
    for (int32_t c : s.candidates()) {
      if (c == 0 || c == 5) {
        const auto probs = s.candidate_probs();
        const size_t j = std::find(s.candidates().begin(), s.candidates().end(), c) - s.candidates().begin();
        EXPECT_EQ(probs[j], 0.0f) << "variant " << variant;
      }
    }
  }
}

TEST(Sampler, LogprobsAreLogSoftmaxOfRawLogits) {
  Sampler s(5);
  const std::vector<float> l{1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  double z = 0.0;
  for (float x : l) z += std::exp(double(x));
  std::vector<TokenLogprob> top;
  const float lp = s.logprobs(l, 4, 3, top);
  EXPECT_NEAR(lp, 0.5 - std::log(z), 1e-5);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // tie 1 vs 2: lowest id first
  EXPECT_EQ(top[1].token, 2);
  EXPECT_EQ(top[2].token, 0);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(z), 1e-5);
  s.logprobs(l, 0, 0, top);
  EXPECT_TRUE(top.empty());
  s.logprobs(l, 0, 9, top);
  EXPECT_EQ(top.size(), 5u) << "n is capped at the vocabulary";
  EXPECT_EQ(top[4].token, 3);
}

}  // namespace
}  // namespace nanoserve
