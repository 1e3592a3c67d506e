// The server's engine thread over the real Engine (with the engine tests'
// fake model, whose greedy output is known without running any engine).

#include "server/engine_adapter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "engine/fake_model.h"
#include "server/engine_loop.h"

namespace nanoserve::server {
namespace {

using namespace std::chrono_literals;
constexpr int32_t kVocab = 64;
constexpr int32_t kEos = 63;

class EngineAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineConfig c;
    c.num_blocks = 256;
    c.block_size = 4;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 32;
    c.fused_read = false;  // the fake model reads history through the gather path
    auto model = std::make_unique<nanoserve::testing::FakeModel>(kVocab, 32, 8);
    auto e = Engine::create(c, std::move(model), &text_);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    adapter_ = std::make_unique<EngineAdapter>(*engine_);
    loop_ = std::make_unique<EngineLoop>(*adapter_, metrics_, EngineLoop::Options{});
    loop_->start();
  }
  void TearDown() override { loop_->stop(); }

  struct Result {
    std::vector<int32_t> tokens;
    std::string text;
    FinishReason finish = FinishReason::kNone;
    std::vector<TokenEvent> events;
  };
  std::vector<Result> run(std::vector<EngineRequest> choices) {
    auto h = loop_->submit(std::move(choices));
    EXPECT_TRUE(h.ok());
    std::vector<Result> results(h->ids.size());
    std::vector<TokenEvent> events;
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!h->stream->all_finished() && std::chrono::steady_clock::now() < deadline) {
      h->stream->wait_take(&events, 10ms);
    }
    h->stream->wait_take(&events, 0ms);
    for (TokenEvent& e : events) {
      Result& r = results[e.choice];
      if (e.token >= 0) r.tokens.push_back(e.token);
      r.text += e.text;
      if (e.finish != FinishReason::kNone) r.finish = e.finish;
      r.events.push_back(e);
    }
    return results;
  }

  nanoserve::testing::FakeText text_{{kEos}};
  ServerMetrics metrics_{"fake"};
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineAdapter> adapter_;
  std::unique_ptr<EngineLoop> loop_;
};

EngineRequest greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

TEST_F(EngineAdapterTest, GreedyMatchesTheOracle) {
  std::vector<EngineRequest> choices = {greedy({1, 2, 3}, 12), greedy({5}, 7), greedy({9, 9, 9, 9, 9}, 20)};
  std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {5}, {9, 9, 9, 9, 9}};
  std::vector<int32_t> lens = {12, 7, 20};
  auto results = run(std::move(choices));
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<int32_t> want = nanoserve::testing::fake_greedy(prompts[i], kVocab, lens[i], -1);
    EXPECT_EQ(results[i].tokens, want) << "choice " << i;
    EXPECT_EQ(results[i].text, nanoserve::testing::FakeText::text_of(want));
    EXPECT_EQ(results[i].finish, FinishReason::kLength);
  }
  EXPECT_DOUBLE_EQ(metrics_.generation_tokens_total.value(), 39.0);
}

TEST_F(EngineAdapterTest, LogprobsPerToken) {
  EngineRequest r = greedy({4, 2}, 5);
  r.params.top_logprobs = 3;
  auto results = run({r});
  int with_logprob = 0;
  for (const TokenEvent& e : results[0].events) {
    if (e.token < 0) continue;
    ++with_logprob;
    ASSERT_EQ(e.top_logprobs.size(), 3u);
    EXPECT_LE(e.logprob, 0.0f);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e.top_logprobs[0].token, e.token);
    EXPECT_FLOAT_EQ(e.top_logprobs[0].logprob, e.logprob);
  }
  EXPECT_EQ(with_logprob, 5);
}

TEST_F(EngineAdapterTest, StopStringCutsText) {
  std::vector<int32_t> want = nanoserve::testing::fake_greedy({7, 7}, kVocab, 16, -1);
  std::string full = nanoserve::testing::FakeText::text_of(want);
  std::string stop = full.substr(5, 2);
  EngineRequest r = greedy({7, 7}, 16);
  r.stop = {stop};
  auto results = run({r});
  EXPECT_EQ(results[0].finish, FinishReason::kStop);
  EXPECT_EQ(results[0].text, full.substr(0, full.find(stop)));
}

TEST_F(EngineAdapterTest, AbortFreesBlocks) {
  auto h = loop_->submit({greedy({1, 2, 3}, 100)});
  ASSERT_TRUE(h.ok());
  std::vector<TokenEvent> events;
  while (events.empty()) h->stream->wait_take(&events, 10ms);
  loop_->abort(*h);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!h->stream->all_finished() && std::chrono::steady_clock::now() < deadline) {
    h->stream->wait_take(&events, 10ms);
  }
  h->stream->wait_take(&events, 0ms);
  ASSERT_TRUE(h->stream->all_finished());
  FinishReason last = events.back().finish;
  // Either the abort won, or the request had already run to its end.
  EXPECT_TRUE(last == FinishReason::kAbort || last == FinishReason::kLength);
  for (int i = 0; i < 200 && engine_->stats().kv_usage > 0.0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(engine_->stats().kv_usage, 0.0);
  EXPECT_TRUE(engine_->check_invariants().ok());
}

TEST_F(EngineAdapterTest, RejectedRequestIsAnErrorNotAHang) {
  EngineRequest r = greedy({1}, 4);
  r.params.temperature = 1000.0f;  // the engine's own validation refuses it
  auto results = run({r});
  EXPECT_EQ(results[0].finish, FinishReason::kError);
  ASSERT_FALSE(results[0].events.empty());
  EXPECT_TRUE(results[0].events.back().rejected);
  EXPECT_NE(results[0].events.back().error.find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace nanoserve::server
