#include "engine/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nanoserve {
namespace {

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
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens"},
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

TEST(SamplingParams, GreedyMeansTemperatureZero) {
  SamplingParams p;
  EXPECT_FALSE(p.greedy());
  p.temperature = 0.0f;
  EXPECT_TRUE(p.greedy());
}

}  // namespace
}  // namespace nanoserve
