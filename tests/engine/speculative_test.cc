// Speculative decoding's model-free parts: --speculative-config, the n-gram
// proposer, the sizing of proposals, and the rejection sampling that keeps a
// sampled request's distribution exact, tested by chi-square against plain
// sampling, with planted biases that must fail.

#include "engine/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "engine/chi_square.h"
#include "engine/rng.h"
#include "engine/sampler.h"

namespace nanoserve {
namespace {

TEST(SpeculativeConfig, ParsesVllmSpellings) {
  StatusOr<SpeculativeConfig> c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 2})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->method, SpecMethod::kNgram);
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_max, 5);
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_TRUE(c->adaptive);

  // vLLM's defaults: one bound gives the other; neither gives 5 and 5.
  c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_lookup_min, 3);
  c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_lookup_max, 5);
  EXPECT_EQ(c->prompt_lookup_min, 5);
  c = parse_speculative_config(
      R"({"model": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_max": 4})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->method, SpecMethod::kNgram);

  c = parse_speculative_config(R"({"model": "models/draft.gguf", "num_speculative_tokens": 5})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->method, SpecMethod::kDraftModel);
  EXPECT_EQ(c->model, "models/draft.gguf");
  c = parse_speculative_config(
      R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 1, "adaptive": false,
          "step_overhead_tokens": 0.5, "disable_by_batch_size": 8})");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->adaptive);
  EXPECT_DOUBLE_EQ(c->step_overhead_tokens, 0.5);
  EXPECT_EQ(c->disable_by_batch_size, 8);

  EXPECT_FALSE(parse_speculative_config("").value().enabled());
  EXPECT_FALSE(parse_speculative_config("null").value().enabled());
}

TEST(SpeculativeConfig, BadInputNamesTheField) {
  auto error = [](const std::string& json) {
    StatusOr<SpeculativeConfig> c = parse_speculative_config(json);
    EXPECT_FALSE(c.ok()) << json;
    return c.ok() ? std::string() : c.status().message();
  };
  EXPECT_NE(error("{not json").find("not JSON"), std::string::npos);
  EXPECT_NE(error("[1]").find("JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram"})").find("num_speculative_tokens"), std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 0})").find("num_speculative_tokens"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 99})").find("num_speculative_tokens"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": "4"})").find("num_speculative_tokens"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 1,
                      "prompt_lookup_min": 3})")
                .find("prompt_lookup_max"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "eagle", "model": "x", "num_speculative_tokens": 2})").find("eagle"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "ngram", "num_speculative_tokens": 2, "tree": 1})").find("tree"),
            std::string::npos);
  EXPECT_NE(error(R"({"method": "draft_model", "num_speculative_tokens": 2})").find("model"),
            std::string::npos);
  EXPECT_NE(error(R"({"num_speculative_tokens": 2})").find("method"), std::string::npos);
}

TEST(NgramPropose, FollowsTheMostRecentLongestMatch) {
  std::vector<int32_t> out;
  // ... 1 2 3 [7 8 9] ... 1 2 3 [4 5] ... 2 3 -> the latest "2 3" is followed by 4 5.
  const std::vector<int32_t> prompt = {1, 2, 3, 7, 8, 9, 1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> output = {2, 3};
  ngram_propose(prompt, output, 3, 1, 4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 6, 2}));
  // A longer match wins over a more recent shorter one: "9 2 3" once, then "2 3" later.
  ngram_propose(std::vector<int32_t>{9, 2, 3, 40, 41, 2, 3, 50, 9}, std::vector<int32_t>{2, 3}, 3, 2, 2, out);
  EXPECT_EQ(out, (std::vector<int32_t>{40, 41}));
  // k caps it; the sequence's end caps it.
  ngram_propose(prompt, output, 3, 1, 1, out);
  EXPECT_EQ(out, (std::vector<int32_t>{4}));
  ngram_propose(std::vector<int32_t>{5, 6, 5}, {}, 2, 1, 4, out);
  EXPECT_EQ(out, (std::vector<int32_t>{6, 5}));
  // No recurrence of at least n_min tokens: nothing.
  ngram_propose(std::vector<int32_t>{1, 2, 3, 4}, std::vector<int32_t>{2, 9}, 3, 2, 4, out);
  EXPECT_TRUE(out.empty());
  ngram_propose(std::vector<int32_t>{7}, {}, 3, 1, 4, out);
  EXPECT_TRUE(out.empty());
}

TEST(SizeProposals, GrowsWithAcceptanceAndShrinksToNothing) {
  std::vector<int32_t> k(1);
  auto one = [&](double alpha, double overhead) {
    size_proposals(std::vector<double>{alpha}, std::vector<int32_t>{8}, overhead, 1, k);
    return k[0];
  };
  // A GPU-like step (extra rows nearly free): propose everything that might be kept.
  EXPECT_EQ(one(0.9, 1000.0), 8);
  // A CPU-like step (a row costs as much as the rest): more tokens only while likely kept.
  EXPECT_GT(one(0.95, 1.0), one(0.7, 1.0));
  EXPECT_GE(one(0.7, 1.0), 1);
  EXPECT_EQ(one(0.3, 1.0), 0);
  EXPECT_EQ(one(0.0, 1000.0), 0);
  // Capped per request; the likelier request gets the slots first.
  std::vector<int32_t> k2(2);
  size_proposals(std::vector<double>{0.95, 0.5}, std::vector<int32_t>{2, 8}, 1.0, 2, k2);
  EXPECT_EQ(k2[0], 2);
  EXPECT_LE(k2[1], 1);
}

TEST(StepCostModel, FitsTheFixedPartOfAStepInRows) {
  // Steps of 1..5 rows at 12 ms + 3.5 ms a row: the fixed part is 12 / 3.5 rows.
  StepCostModel m(2.0);
  for (int i = 0; i < 100; ++i) {
    const int64_t rows = 1 + i % 5;
    m.observe(rows, 0.012 + 0.0035 * static_cast<double>(rows));
  }
  EXPECT_NEAR(m.overhead(), 12.0 / 3.5, 1e-6);
  // It follows a change (another load, another thread count) within ~50 steps.
  for (int i = 0; i < 300; ++i) {
    const int64_t rows = 1 + i % 5;
    m.observe(rows, 0.006 + 0.01 * static_cast<double>(rows));
  }
  EXPECT_NEAR(m.overhead(), 0.6, 0.01);
}

TEST(StepCostModel, KeepsThePriorUntilTheRowsVary) {
  StepCostModel m(3.0);
  for (int i = 0; i < 200; ++i) m.observe(1, 0.010 + 0.001 * (i % 3));  // batch 1, never a proposal
  EXPECT_DOUBLE_EQ(m.overhead(), 3.0);
  EXPECT_GT(m.weight(), 8.0);
  // 64 +- 1 rows: too little spread at that size to say what a row costs.
  StepCostModel big(3.0);
  for (int i = 0; i < 200; ++i) big.observe(64 + i % 2, 0.4 + 0.004 * (i % 2));
  EXPECT_DOUBLE_EQ(big.overhead(), 3.0);
  // Bad observations are ignored, a step that cannot cost less than its rows keeps the last value.
  m.observe(0, 0.01);
  m.observe(2, -1.0);
  m.observe(2, std::numeric_limits<double>::quiet_NaN());
  for (int i = 0; i < 100; ++i) m.observe(1 + i % 2, i % 2 ? 0.030 : 0.010);  // 20 ms a row, -10 ms fixed
  EXPECT_DOUBLE_EQ(m.overhead(), 3.0);
  // Rows that come for free (a GPU's small steps): as large as it goes, so every likely slot is proposed.
  for (int i = 0; i < 300; ++i) m.observe(1 + i % 5, 0.010);
  EXPECT_DOUBLE_EQ(m.overhead(), 12.0);
  // A fit far below the prior (a noisy window) is held at a quarter of it, so proposals never stop for good.
  for (int i = 0; i < 300; ++i) m.observe(1 + i % 5, 0.0001 + 0.01 * static_cast<double>(1 + i % 5));
  EXPECT_DOUBLE_EQ(m.overhead(), 0.75);
}

TEST(SpecAcceptance, RejectionsLowerAlphaAndFadingRestoresIt) {
  Request r(1, {1}, SamplingParams{}, 0, {}, nullptr);
  const double prior = spec_alpha(r);
  for (int i = 0; i < 20; ++i) spec_observe(r, 4, 0);
  EXPECT_LT(spec_alpha(r), 0.3);
  int probes = 0;
  for (int i = 0; i < 200; ++i) probes += spec_fade(r) ? 1 : 0;
  EXPECT_EQ(probes, 200 / kSpecProbeEvery);
  EXPECT_NEAR(spec_alpha(r), prior, 0.05);
  for (int i = 0; i < 20; ++i) spec_observe(r, 4, 4);
  EXPECT_GT(spec_alpha(r), 0.9);
}

TEST(SpecAcceptance, UnsentProposalsAreScoredOnceTheirPositionIsSampled) {
  Request r(1, {5, 6, 7}, SamplingParams{}, 0, {}, nullptr);
  const double prior = spec_alpha(r);
  for (int i = 0; i < 40; ++i) {
    spec_note_unsent(r, 9);
    spec_observe_unsent(r);  // nothing sampled at its position yet: no verdict
    EXPECT_EQ(r.spec_unsent, 9);
    r.output.push_back(9);  // the token there is the proposal: it would have been kept
    spec_observe_unsent(r);
    EXPECT_EQ(r.spec_unsent, -1);
  }
  EXPECT_GT(spec_alpha(r), 0.95);
  EXPECT_GT(spec_alpha(r), prior);
  for (int i = 0; i < 40; ++i) {
    spec_note_unsent(r, 9);
    r.output.push_back(4);
    spec_observe_unsent(r);
  }
  EXPECT_LT(spec_alpha(r), 0.35);
}

// ---- Rejection sampling against a point-mass proposal, by statistics ----
//
// The engine checks a proposed token d by sampling the row exactly as
// without proposals and keeping d when the draw is d: d is kept with
// probability p(d), and a rejected draw is distributed as p without d,
// renormalised: the residual max(p - q, 0) of a point mass q at d. So the
// textbook rule (keep d when u < p(d), else draw from the residual) and the
// engine's are the same distribution; the engine's also uses the same
// uniform as plain sampling, so its tokens are identical to decoding
// without proposals (SpeculativeEngine.SampledOutputIdenticalWithAndWithoutProposals).

constexpr int32_t kV = 8;

std::vector<float> test_logits() {
  return {1.2f, 0.3f, -0.5f, 2.0f, 0.9f, -3.0f, 0.0f, 1.6f};
}

SamplingParams sampled(float temperature, float top_p, int32_t top_k) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  return p;
}

// The target's probability of each token after the filters, from the sampler.
std::vector<double> target_probs(Sampler& s, const std::vector<float>& l, const SamplingParams& p) {
  Rng probe(0);
  (void)s.sample(l, p, {}, {}, probe);
  std::vector<double> probs(kV, 0.0);
  for (size_t j = 0; j < s.candidates().size(); ++j) probs[s.candidates()[j]] = s.candidate_probs()[j];
  return probs;
}

// A check of proposal d against row l: the token it emits.
using Verify =
    std::function<int32_t(Sampler&, const std::vector<float>&, const SamplingParams&, Rng&, int32_t)>;

// What the engine does.
int32_t engine_verify(Sampler& s, const std::vector<float>& l, const SamplingParams& p, Rng& rng, int32_t) {
  return s.sample(l, p, {}, {}, rng);
}

// The textbook rule for a point mass: keep d with probability p(d), else
// draw from p with d removed.
int32_t textbook_verify(Sampler& s, const std::vector<float>& l, const SamplingParams& p, Rng& rng,
                        int32_t d) {
  const std::vector<double> probs = target_probs(s, l, p);
  if (rng.next_double() < probs[d]) return d;
  double u = rng.next_double() * (1.0 - probs[d]);
  for (int32_t t = 0; t < kV; ++t) {
    if (t == d) continue;
    if (u < probs[t]) return t;
    u -= probs[t];
  }
  return d == kV - 1 ? kV - 2 : kV - 1;
}

// Whether checking proposals with `verify` emits tokens distributed as plain
// sampling, over many seeds (independent seeds on the two sides).
testing::ChiSquare against_plain_sampling(const Verify& verify, const SamplingParams& p, int32_t proposed,
                                          int n) {
  Sampler s(kV);
  const std::vector<float> l = test_logits();
  std::vector<int64_t> plain(kV, 0), checked(kV, 0);
  for (int i = 0; i < n; ++i) {
    Rng a(1000 + i), b(5000000 + i);
    ++plain[s.sample(l, p, {}, {}, a)];
    ++checked[verify(s, l, p, b, proposed)];
  }
  return testing::chi_square_same_distribution(plain, checked);
}

TEST(PointMassRejection, BothRulesKeepTheTargetDistribution) {
  for (const SamplingParams& p : {sampled(1.0f, 1.0f, -1), sampled(0.7f, 0.9f, -1), sampled(1.3f, 1.0f, 4)}) {
    for (int32_t proposed : {3, 0, 5, 6}) {  // likely, middling, unlikely, and (top-k 4) filtered out
      SCOPED_TRACE(::testing::Message() << "T " << p.temperature << " top_p " << p.top_p << " top_k "
                                        << p.top_k << " proposed " << proposed);
      for (const Verify& v : {Verify(engine_verify), Verify(textbook_verify)}) {
        const testing::ChiSquare c = against_plain_sampling(v, p, proposed, 20000);
        EXPECT_TRUE(c.consistent) << "chi-square " << c.statistic << " > " << c.critical << " (" << c.dof
                                  << " dof)";
      }
    }
  }
}

TEST(PointMassRejection, AcceptsWithTheTargetProbabilityOfTheProposal) {
  Sampler s(kV);
  const std::vector<float> l = test_logits();
  for (const SamplingParams& p : {sampled(1.0f, 1.0f, -1), sampled(0.7f, 0.9f, 3)}) {
    const std::vector<double> probs = target_probs(s, l, p);
    for (int32_t d : {3, 0, 5}) {
      for (const Verify& v : {Verify(engine_verify), Verify(textbook_verify)}) {
        int kept = 0;
        const int n = 20000;
        for (int i = 0; i < n; ++i) {
          Rng rng(i);
          kept += v(s, l, p, rng, d) == d ? 1 : 0;
        }
        const double sd = std::sqrt(probs[d] * (1 - probs[d]) / n);
        EXPECT_NEAR(static_cast<double>(kept) / n, probs[d], 4.5 * sd + 1e-12) << "proposal " << d;
      }
    }
  }
}

TEST(PointMassRejection, PlantedBiasesFailTheTest) {
  const SamplingParams p = sampled(1.0f, 1.0f, -1);
  // The general rule misapplied: accept when p_draft(d) > p_target(d); for a
  // point mass p_draft(d) = 1, so always.
  const Verify always = [](Sampler&, const std::vector<float>&, const SamplingParams&, Rng&, int32_t d) {
    return d;
  };
  EXPECT_FALSE(against_plain_sampling(always, p, 0, 20000).consistent);
  // Subtler: accept with probability min(1, 1.3 p(d)), then the right residual.
  const Verify over = [](Sampler& s, const std::vector<float>& l, const SamplingParams& q, Rng& rng,
                         int32_t d) {
    const std::vector<double> probs = target_probs(s, l, q);
    if (rng.next_double() < std::min(1.0, 1.3 * probs[d])) return d;
    for (;;) {
      const int32_t t = s.sample(l, q, {}, {}, rng);
      if (t != d) return t;
    }
  };
  EXPECT_FALSE(against_plain_sampling(over, p, 0, 20000).consistent);
  // The residual drawn from the whole target (d may come back): too much d.
  const Verify no_residual = [](Sampler& s, const std::vector<float>& l, const SamplingParams& q, Rng& rng,
                                int32_t d) {
    const std::vector<double> probs = target_probs(s, l, q);
    if (rng.next_double() < probs[d]) return d;
    return s.sample(l, q, {}, {}, rng);
  };
  EXPECT_FALSE(against_plain_sampling(no_residual, p, 3, 20000).consistent);
}

}  // namespace
}  // namespace nanoserve
