#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/fake_backend.h"

namespace nanoserve::server {
namespace {

using testing::FakeEngine;
using namespace std::chrono_literals;

EngineRequest make_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = max_tokens;
  return r;
}

// Takes events until every choice finished or `deadline` passes.
std::vector<TokenEvent> collect(RequestStream& s, std::chrono::milliseconds deadline = 5000ms) {
  std::vector<TokenEvent> out;
  auto end = std::chrono::steady_clock::now() + deadline;
  while (!s.all_finished() && std::chrono::steady_clock::now() < end) s.wait_take(&out, 10ms);
  s.wait_take(&out, 0ms);
  return out;
}

TEST(EngineLoop, DeliversTokensAndFinish) {
  FakeEngine engine;
  ServerMetrics metrics("m");
  EngineLoop loop(engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a', 'b', 'c'}, 4), make_request({'x'}, 2)});
  ASSERT_TRUE(h.ok());
  auto events = collect(*h->stream);
  std::string text[2];
  FinishReason finish[2] = {FinishReason::kNone, FinishReason::kNone};
  int tokens = 0;
  for (const TokenEvent& e : events) {
    text[e.choice] += e.text;
    tokens += e.token >= 0;
    if (e.finish != FinishReason::kNone) finish[e.choice] = e.finish;
  }
  EXPECT_EQ(text[0], "abca");
  EXPECT_EQ(text[1], "xx");
  EXPECT_EQ(tokens, 6);
  EXPECT_EQ(finish[0], FinishReason::kLength);
  EXPECT_EQ(finish[1], FinishReason::kLength);
  loop.stop();
  EXPECT_DOUBLE_EQ(metrics.generation_tokens_total.value(), 6.0);
  EXPECT_DOUBLE_EQ(metrics.prompt_tokens_total.value(), 4.0);
  EXPECT_NE(metrics.registry.render().find("finished_reason=\"length\"} 2"), std::string::npos);
  EXPECT_EQ(metrics.time_to_first_token_seconds.snapshot().cumulative.back(), 2u);
  EXPECT_EQ(metrics.inter_token_latency_seconds.snapshot().cumulative.back(), 4u);
}

TEST(EngineLoop, AbortFreesWithinAStep) {
  FakeEngine engine;
  engine.step_delay_ms = 2;
  ServerMetrics metrics("m");
  EngineLoop loop(engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a'}, 100000)});
  ASSERT_TRUE(h.ok());
  std::vector<TokenEvent> events;
  while (events.empty()) h->stream->wait_take(&events, 100ms);
  EXPECT_GT(metrics.kv_cache_usage_perc.value(), 0.0);
  loop.abort(*h);
  // Read after the request: a test thread descheduled before abort() must not
  // make the loop's ordinary steps look like a late abort.
  const uint64_t steps_before = loop.num_steps();
  auto rest = collect(*h->stream);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().finish, FinishReason::kAbort);
  EXPECT_LE(loop.num_steps(), steps_before + 2);  // the step in flight, at most one more
  EXPECT_EQ(engine.aborted(), h->ids);
  EXPECT_EQ(engine.num_unfinished(), 0u);
  // The gauges are refreshed after the abort is processed.
  for (int i = 0; i < 100 && metrics.kv_cache_usage_perc.value() > 0.0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(metrics.kv_cache_usage_perc.value(), 0.0);
  EXPECT_NE(metrics.registry.render().find("finished_reason=\"abort\"} 1"), std::string::npos);
  loop.stop();
}

TEST(EngineLoop, QueueFullIsResourceExhausted) {
  FakeEngine engine;
  engine.max_running = 1;
  engine.step_delay_ms = 5;
  ServerMetrics metrics("m");
  EngineLoop loop(engine, metrics, EngineLoop::Options{2});
  loop.start();
  auto a = loop.submit({make_request({'a'}, 100000)});
  auto b = loop.submit({make_request({'b'}, 100000)});
  auto c = loop.submit({make_request({'c'}, 100000)});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  // Two queued (inbox or engine-waiting) already: one more does not fit.
  auto d = loop.submit({make_request({'d'}, 1), make_request({'e'}, 1)});
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  loop.stop();
  EXPECT_EQ(collect(*a->stream).back().finish, FinishReason::kAbort);  // stop() finishes what is left
}

TEST(EngineLoop, EngineErrorFailsRequests) {
  FakeEngine engine;
  engine.step_delay_ms = 1;
  ServerMetrics metrics("m");
  EngineLoop loop(engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a'}, 100000)});
  ASSERT_TRUE(h.ok());
  std::vector<TokenEvent> events;
  while (events.empty()) h->stream->wait_take(&events, 100ms);
  engine.fail_next_step = true;
  auto rest = collect(*h->stream);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().finish, FinishReason::kError);
  EXPECT_NE(rest.back().error.find("injected device failure"), std::string::npos);
  EXPECT_EQ(engine.num_unfinished(), 0u);
  // The loop keeps serving after the failure.
  auto next = loop.submit({make_request({'z'}, 3)});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(collect(*next->stream).back().finish, FinishReason::kLength);
  loop.stop();
}

TEST(RequestStream, TokenCapacityIsBoundedButFinishAlwaysFits) {
  RequestStream s(1, 2);
  TokenEvent tok;
  tok.token = 1;
  EXPECT_TRUE(s.push(tok));
  EXPECT_TRUE(s.push(tok));
  EXPECT_FALSE(s.push(tok));
  TokenEvent fin;
  fin.finish = FinishReason::kLength;
  EXPECT_TRUE(s.push(fin));
  EXPECT_TRUE(s.all_finished());
  std::vector<TokenEvent> out;
  EXPECT_EQ(s.wait_take(&out, std::chrono::milliseconds(0)), 3u);
}

}  // namespace
}  // namespace nanoserve::server
