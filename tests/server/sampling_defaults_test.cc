#include "server/sampling_defaults.h"

#include <gtest/gtest.h>

#include "server/request_body.h"

namespace nanoserve::server {
namespace {

using nlohmann::json;

TEST(SamplingDefaults, ReadAsVllmReadsGenerationConfig) {
  auto d = sampling_defaults_from_generation_config(json::parse(
      R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1,
          "max_new_tokens": 128, "eos_token_id": [1, 2], "do_sample": true})"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FLOAT_EQ(*d->temperature, 0.6f);
  EXPECT_FLOAT_EQ(*d->top_p, 0.9f);
  EXPECT_EQ(*d->top_k, 20);
  EXPECT_FLOAT_EQ(*d->min_p, 0.05f);
  EXPECT_FLOAT_EQ(*d->repetition_penalty, 1.1f);
  EXPECT_EQ(*d->max_tokens, 128);
  EXPECT_EQ(d->describe(),
            "temperature=0.6 top_p=0.9 top_k=20 min_p=0.05 repetition_penalty=1.1 max_tokens=128");
}

TEST(SamplingDefaults, HuggingFaceDefaultsAndNullsAreNoDefaults) {
  auto d = sampling_defaults_from_generation_config(json::parse(
      R"({"temperature": 1.0, "top_p": 1, "top_k": 50, "repetition_penalty": 1.0, "min_p": null})"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty()) << d->describe();
  auto zero = sampling_defaults_from_generation_config(json::parse(R"({"top_k": 0, "temperature": 0})"));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero->top_k, -1);  // 0 means off, as in a request
  EXPECT_FLOAT_EQ(*zero->temperature, 0.0f);
}

TEST(SamplingDefaults, BadValuesAreRefusedNamingTheKey) {
  for (const char* bad : {R"({"temperature": -0.5})", R"({"top_p": 0})", R"({"top_k": 2.5})",
                          R"({"min_p": 2})", R"({"repetition_penalty": 0})", R"({"max_new_tokens": 0})",
                          R"({"temperature": "hot"})", R"({"top_k": true})", R"([1])"}) {
    auto d = sampling_defaults_from_generation_config(json::parse(bad));
    EXPECT_FALSE(d.ok()) << bad;
  }
  EXPECT_NE(sampling_defaults_from_generation_config(json::parse(R"({"top_p": 1.5})"))
                .status()
                .message()
                .find("'top_p'"),
            std::string::npos);
}

TEST(SamplingDefaults, ApplyOnlyToTheFieldsARequestOmits) {
  SamplingDefaults d;
  d.temperature = 0.3f;
  d.top_p = 0.8f;
  d.top_k = 5;
  d.min_p = 0.1f;
  d.repetition_penalty = 1.2f;
  const json body = json::parse(R"({"temperature": 0.9, "top_k": null, "min_p": 0.0})");
  Fields f(body);
  SamplingParams p;
  apply_sampling_defaults(d, f, &p);
  EXPECT_FLOAT_EQ(p.temperature, SamplingParams{}.temperature);  // the request's own is read after
  EXPECT_FLOAT_EQ(p.top_p, 0.8f);
  EXPECT_EQ(p.top_k, 5);  // null is "not given"
  EXPECT_FLOAT_EQ(p.min_p, SamplingParams{}.min_p);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);
}

}  // namespace
}  // namespace nanoserve::server
