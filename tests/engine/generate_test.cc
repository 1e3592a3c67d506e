#include "engine/generate.h"

#include <gtest/gtest.h>

#include "engine/fake_model.h"

namespace nanoserve {
namespace {

using testing::fake_greedy;
using testing::FakeModel;
using testing::FakeText;

std::unique_ptr<Engine> make_engine(const TextStreamFactory* text) {
  EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  return std::move(Engine::create(c, std::make_unique<FakeModel>(32, 16, 4), text).value());
}

TEST(Generate, ReturnsCompletionsInPromptOrder) {
  FakeText text({});
  auto e = make_engine(&text);
  std::vector<std::vector<int32_t>> prompts{
      {1, 2, 3}, {4}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 7;
  auto r = generate(*e, prompts, std::span<const SamplingParams>(&p, 1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Completion& c = (*r)[i];
    EXPECT_EQ(c.tokens, fake_greedy(prompts[i], 32, 7, -1));
    EXPECT_EQ(c.text, FakeText::text_of(c.tokens));
    EXPECT_EQ(c.finish_reason, FinishReason::kLength);
    EXPECT_EQ(c.num_prompt_tokens, static_cast<int32_t>(prompts[i].size()));
    EXPECT_GE(c.latency_s, c.ttft_s);
    EXPECT_GE(c.tpot_s(), 0.0);
  }
}

TEST(Generate, PerPromptParamsAndRejection) {
  auto e = make_engine(nullptr);
  std::vector<std::vector<int32_t>> prompts{{1}, {2}};
  std::vector<SamplingParams> ps(2);
  ps[0].max_tokens = 3;
  ps[1].max_tokens = 5;
  auto r = generate(*e, prompts, ps);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].tokens.size(), 3u);
  EXPECT_EQ((*r)[1].tokens.size(), 5u);

  ps[1].max_tokens = 1000;  // over the 256-token pool
  auto bad = generate(*e, prompts, ps);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("prompt 1"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(e->has_unfinished()) << "the accepted prompt 0 was aborted";
  EXPECT_EQ(e->block_manager().num_in_use_blocks(), 0);

  std::vector<SamplingParams> three(3);
  EXPECT_FALSE(generate(*e, prompts, three).ok());
}

}  // namespace
}  // namespace nanoserve
