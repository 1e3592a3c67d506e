#include "server/stats_log.h"

#include <gtest/gtest.h>

namespace nanoserve::server {
namespace {

using std::chrono::milliseconds;

EngineStats stats(int64_t prompt, int64_t generated, int32_t running, int32_t waiting, int64_t queries = 0,
                  int64_t hits = 0) {
  EngineStats s;
  s.prompt_tokens = prompt;
  s.generation_tokens = generated;
  s.num_running = running;
  s.num_waiting = waiting;
  s.prefix_cache_queries = queries;
  s.prefix_cache_hits = hits;
  s.kv_usage = 0.25;
  return s;
}

TEST(StatsLog, OneLinePerIntervalWhileBusyWithThatIntervalsThroughput) {
  StatsLog log(10.0);
  const auto t0 = StatsLog::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_FALSE(log.due(t0, stats(0, 0, 0, 0)));  // starts the first interval
  EXPECT_FALSE(log.due(t0 + milliseconds(9999), stats(100, 50, 2, 1)));
  const auto l = log.due(t0 + milliseconds(10000), stats(100, 50, 2, 1, 80, 20));
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->interval_s, 10.0);
  EXPECT_DOUBLE_EQ(l->prompt_throughput, 10.0);
  EXPECT_DOUBLE_EQ(l->generation_throughput, 5.0);
  EXPECT_EQ(l->running, 2);
  EXPECT_EQ(l->waiting, 1);
  EXPECT_DOUBLE_EQ(l->kv_cache_usage, 0.25);
  EXPECT_DOUBLE_EQ(l->prefix_cache_hit_rate, 0.25);
  // The next interval counts from this line: 20 s later, 100 more generated tokens.
  const auto l2 = log.due(t0 + milliseconds(30000), stats(100, 150, 1, 0, 100, 30));
  ASSERT_TRUE(l2);
  EXPECT_DOUBLE_EQ(l2->prompt_throughput, 0.0);
  EXPECT_DOUBLE_EQ(l2->generation_throughput, 5.0);
  EXPECT_DOUBLE_EQ(l2->prefix_cache_hit_rate, 0.5);  // this interval's 10 of 20
}

TEST(StatsLog, TheIntervalThatGoesIdleHasItsLineThenQuiet) {
  StatsLog log(1.0);
  const auto t0 = StatsLog::Clock::time_point{} + std::chrono::hours(1);
  log.due(t0, stats(0, 0, 0, 0));
  // Work finished within the interval: nothing runs at its end, but tokens were made.
  const auto l = log.due(t0 + milliseconds(1000), stats(10, 4, 0, 0, 10, 5));
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->generation_throughput, 4.0);
  EXPECT_FALSE(log.due(t0 + milliseconds(2000), stats(10, 4, 0, 0, 10, 5)));
  EXPECT_FALSE(log.due(t0 + milliseconds(9000), stats(10, 4, 0, 0, 10, 5)));
  // A request waiting (no token yet) is work: the line comes.
  const auto w = log.due(t0 + milliseconds(10000), stats(10, 4, 0, 1, 10, 5));
  ASSERT_TRUE(w);
  EXPECT_EQ(w->waiting, 1);
  EXPECT_DOUBLE_EQ(w->prefix_cache_hit_rate, 0.5);  // no lookups this interval: the run's rate
}

TEST(StatsLog, OffWhenTheIntervalIsZero) {
  StatsLog log(0.0);
  const auto t0 = StatsLog::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_FALSE(log.due(t0, stats(0, 0, 1, 0)));
  EXPECT_FALSE(log.due(t0 + std::chrono::hours(1), stats(100, 100, 1, 0)));
}

}  // namespace
}  // namespace nanoserve::server
