#include "server/engine_loop.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/engine_rig.h"

namespace nanoserve::server {
namespace {

using testing::EngineRig;
using testing::EngineRigOptions;
using namespace std::chrono_literals;

EngineRequest make_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.params.max_tokens = static_cast<int32_t>(max_tokens);
  r.params.temperature = 0.0f;
  r.params.ignore_eos = true;
  return r;
}

std::string oracle(const std::vector<int32_t>& prompt, int32_t n) {
  std::string s;
  for (int32_t t : nanoserve::testing::fake_greedy(prompt, static_cast<int32_t>(testing::kFakeVocab), n, -1))
    s += testing::fake_token_text(t);
  return s;
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
  EngineRig rig;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
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
  EXPECT_EQ(text[0], oracle({'a', 'b', 'c'}, 4));
  EXPECT_EQ(text[1], oracle({'x'}, 2));
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
  EngineRig rig;
  rig.model->step_delay_ms = 2;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a'}, 3000)});
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
  EXPECT_EQ(rig.engine->stats().num_aborted, 1);
  EXPECT_FALSE(rig.engine->has_unfinished());
  EXPECT_EQ(rig.engine->block_manager().num_in_use_blocks(), 0);
  // The gauges are refreshed after the abort is processed.
  for (int i = 0; i < 100 && metrics.kv_cache_usage_perc.value() > 0.0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(metrics.kv_cache_usage_perc.value(), 0.0);
  EXPECT_NE(metrics.registry.render().find("finished_reason=\"abort\"} 1"), std::string::npos);
  loop.stop();
}

// Preemption by swap shows in /metrics: preemptions of each kind, blocks each way, and the gauges of
// swapped requests and swap slots back at 0 once everything finished.
TEST(EngineLoop, SwapMetricsFollowTheEngine) {
  EngineRigOptions o;
  o.num_blocks = 8;  // 32 tokens: two requests of 10 + 12 cannot both finish
  o.max_num_batched_tokens = 32;
  o.swap_space_bytes = 64 * 64;  // 64 of the fake's blocks
  EngineRig rig(o);
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'}, 12),
                        make_request({'k', 'l', 'm', 'n', 'o', 'p', 'q', 'r', 's', 't'}, 12)});
  ASSERT_TRUE(h.ok());
  collect(*h->stream);
  loop.stop();
  const EngineStats st = rig.engine->stats();
  ASSERT_GT(st.num_swap_preemptions, 0);
  EXPECT_DOUBLE_EQ(metrics.num_preemptions_total.value(), static_cast<double>(st.num_preemptions));
  EXPECT_DOUBLE_EQ(metrics.num_preemptions_swapped_total.value(),
                   static_cast<double>(st.num_swap_preemptions));
  EXPECT_GT(metrics.swapped_out_blocks_total.value(), 0.0);
  EXPECT_DOUBLE_EQ(metrics.swapped_in_blocks_total.value(), metrics.swapped_out_blocks_total.value());
  EXPECT_DOUBLE_EQ(metrics.recomputed_tokens_total.value(), 0.0);
  EXPECT_EQ(metrics.num_requests_swapped.value(), 0.0);
  EXPECT_EQ(metrics.cpu_cache_usage_perc.value(), 0.0);
  const std::string text = metrics.registry.render();
  for (const char* name : {"nanoserve:num_requests_swapped", "nanoserve:cpu_cache_usage_perc",
                           "nanoserve:swapped_out_blocks_total"})
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
}

TEST(EngineLoop, QueueFullIsResourceExhausted) {
  EngineRigOptions o;
  o.max_num_seqs = 1;
  EngineRig rig(o);
  rig.model->step_delay_ms = 5;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, EngineLoop::Options{2});
  loop.start();
  auto a = loop.submit({make_request({'a'}, 3000)});
  auto b = loop.submit({make_request({'b'}, 3000)});
  auto c = loop.submit({make_request({'c'}, 3000)});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  // Two waiting in the Engine already (one runs at a time): one more does not fit.
  auto d = loop.submit({make_request({'d'}, 1), make_request({'e'}, 1)});
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kResourceExhausted);
  loop.stop();
  EXPECT_EQ(collect(*a->stream).back().finish, FinishReason::kAbort);  // stop() finishes what is left
}

TEST(EngineLoop, MoreChoicesThanTheWaitingCapIsInvalidNotExhausted) {
  // Issue 17 item 6: three choices never fit a queue of two, however empty it is; a retry cannot help.
  EngineRig rig;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, EngineLoop::Options{2});
  loop.start();
  auto r = loop.submit({make_request({'a'}, 1), make_request({'b'}, 1), make_request({'c'}, 1)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("waiting queue"), std::string::npos) << r.status().message();
  EXPECT_TRUE(loop.submit({make_request({'a'}, 1), make_request({'b'}, 1)}).ok()) << "two fit";
  loop.stop();
}

TEST(EngineLoop, EngineErrorFailsRequests) {
  EngineRig rig;
  rig.model->step_delay_ms = 1;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a'}, 3000)});
  ASSERT_TRUE(h.ok());
  std::vector<TokenEvent> events;
  while (events.empty()) h->stream->wait_take(&events, 100ms);
  rig.model->fail_next_forward();
  auto rest = collect(*h->stream);
  ASSERT_FALSE(rest.empty());
  EXPECT_EQ(rest.back().finish, FinishReason::kError);
  EXPECT_NE(rest.back().error.find("failing this forward"), std::string::npos) << rest.back().error;
  EXPECT_FALSE(rig.engine->has_unfinished());
  // The loop keeps serving after the failure.
  auto next = loop.submit({make_request({'z'}, 3)});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(collect(*next->stream).back().finish, FinishReason::kLength);
  loop.stop();
}

TEST(EngineLoop, RejectedChoiceIsFinishedAsRejected) {
  EngineRig rig;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
  loop.start();
  auto h = loop.submit({make_request({'a'}, 2), make_request({'a', 999}, 2)});  // 999: outside the vocabulary
  ASSERT_TRUE(h.ok());
  auto events = collect(*h->stream);
  bool rejected = false;
  for (const TokenEvent& e : events) {
    if (e.choice == 1 && e.finish == FinishReason::kError) {
      rejected = e.rejected;
      EXPECT_NE(e.error.find("vocabulary"), std::string::npos) << e.error;
    }
  }
  EXPECT_TRUE(rejected);
  EXPECT_EQ(h->ids[1], 0u);
  loop.stop();
}

TEST(EngineLoop, PrefixCacheMetricsFollowTheEngine) {
  EngineRig rig;
  ServerMetrics metrics("m");
  EngineLoop loop(*rig.engine, metrics, {});
  loop.start();
  const std::vector<int32_t> prompt = EngineRig::bytes("a shared system prompt, then a question");
  for (int i = 0; i < 2; ++i) {
    auto h = loop.submit({make_request(prompt, 2)});
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(collect(*h->stream).back().finish, FinishReason::kLength);
  }
  loop.stop();
  const double queries = metrics.prefix_cache_queries_total.value(),
               hits = metrics.prefix_cache_hits_total.value();
  EXPECT_EQ(queries, 2.0 * static_cast<double>(prompt.size()));
  EXPECT_EQ(hits, static_cast<double>((prompt.size() - 1) / 4 * 4))
      << "the second request hits every full block";
  EXPECT_DOUBLE_EQ(metrics.prefix_cache_hit_rate.value(), hits / queries);
  EXPECT_NE(metrics.registry.render().find("nanoserve:prefix_cache_hits_total"), std::string::npos);
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
