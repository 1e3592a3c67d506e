#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

namespace nanoserve {
namespace {

struct NoConstraint final : TokenConstraintFactory {
  std::unique_ptr<TokenConstraint> start() const override { return nullptr; }
};

TEST(SamplingParams, DefaultsAreValid) {
  EXPECT_TRUE(SamplingParams{}.validate(100).ok());
}

TEST(SamplingParams, EachBadFieldIsNamed) {
  struct Case {
    void (*mutate)(SamplingParams&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -1.0f; }, "min_p"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 3.0f; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = -2.5f; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.max_tokens = -1; }, "max_tokens"},
      {[](SamplingParams& p) { p.prompt_logprobs = 21; }, "prompt_logprobs"},
      {[](SamplingParams& p) { p.prompt_logprobs = -2; }, "prompt_logprobs"},
      {[](SamplingParams& p) { p.stop = {""}; }, "stop"},
      {[](SamplingParams& p) { p.stop = std::vector<std::string>(17, "x"); }, "stop"},
      {[](SamplingParams& p) { p.stop = {std::string(300, 'x')}; }, "stop"},
      {[](SamplingParams& p) { p.stop_token_ids = {100}; }, "stop_token_ids"},
      {[](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids"},
      {[](SamplingParams& p) {
         p.logprobs = true;
         p.top_logprobs = 21;
       },
       "top_logprobs"},
      {[](SamplingParams& p) { p.top_logprobs = 2; }, "top_logprobs"},
      {[](SamplingParams& p) { p.n = 0; }, "n must"},
      {[](SamplingParams& p) { p.min_tokens = -1; }, "min_tokens"},
      {[](SamplingParams& p) { p.min_tokens = p.max_tokens + 1; }, "min_tokens"},
      {[](SamplingParams& p) {
         p.logit_bias = {{100, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 100.5f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, NAN}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         p.logit_bias = {{3, 1.0f}, {4, 1.0f}, {3, 2.0f}};
       },
       "logit_bias"},
      {[](SamplingParams& p) {
         for (int32_t i = 0; i < 301; ++i) p.logit_bias.emplace_back(i % 100, 0.0f);
       },
       "logit_bias"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    Status s = p.validate(100);
    EXPECT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(s.message().find(c.field), std::string::npos) << s.message();
  }
}

TEST(SamplingParams, BiasAndMinTokensNeedTheLogits) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_TRUE(p.plain_greedy());
  p.logit_bias = {{1, -100.0f}};
  EXPECT_FALSE(p.plain_greedy()) << "logit_bias changes the argmax";
  p.logit_bias.clear();
  p.min_tokens = 2;
  EXPECT_FALSE(p.plain_greedy()) << "min_tokens masks the end tokens";
  p.max_tokens = 2;
  EXPECT_TRUE(p.validate(100).ok()) << "min_tokens == max_tokens is allowed";
}

// The device sampler takes temperature, top-k, top-p, min-p and logprobs;
// each host-only feature alone sends the row to the CPU Sampler.
TEST(SamplingParams, DeviceSampleableOnlyWithoutHostFeatures) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.logprobs = true;
  p.top_logprobs = 20;
  EXPECT_TRUE(p.device_sampleable(0));
  struct Case {
    const char* what;
    void (*mutate)(SamplingParams&);
  };
  const Case cases[] = {
      {"logit_bias",
       [](SamplingParams& q) {
         q.logit_bias = {{1, 0.0f}};
       }},
      {"repetition_penalty", [](SamplingParams& q) { q.repetition_penalty = 1.1f; }},
      {"presence_penalty", [](SamplingParams& q) { q.presence_penalty = 0.1f; }},
      {"frequency_penalty", [](SamplingParams& q) { q.frequency_penalty = -0.1f; }},
      {"constraint", [](SamplingParams& q) { q.constraint = std::make_shared<NoConstraint>(); }},
  };
  for (const Case& c : cases) {
    SamplingParams q = p;
    c.mutate(q);
    EXPECT_FALSE(q.device_sampleable(0)) << c.what;
    EXPECT_FALSE(q.device_sampleable(100)) << c.what;
  }
  // min_tokens masks only while fewer are generated.
  p.max_tokens = 8;
  p.min_tokens = 3;
  EXPECT_FALSE(p.device_sampleable(0));
  EXPECT_FALSE(p.device_sampleable(2));
  EXPECT_TRUE(p.device_sampleable(3));
}

TEST(SamplingParams, GreedyMeansTemperatureZero) {
  SamplingParams p;
  EXPECT_FALSE(p.greedy());
  p.temperature = 0.0f;
  EXPECT_TRUE(p.greedy());
}

}  // namespace
}  // namespace nanoserve
