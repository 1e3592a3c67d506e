#pragma once
// The periodic statistics line of a busy server (vLLM's "Avg prompt
// throughput ..." line), one every interval while there is work:
//
//   stats interval_s=10.012 prompt_throughput=152.3 generation_throughput=41.0 running=3
//         waiting=0 kv_cache_usage_pct=1.2 prefix_cache_hit_rate_pct=37.5
//
// Throughputs are tokens per second over the interval. The hit rate is that
// of the interval's prompt-token lookups (the whole run's when the interval
// had none). An interval in which nothing ran, nothing waits and no token was
// made gets no line, so an idle server is quiet; the interval that ends a
// busy stretch still gets its (zero-throughput) line.

#include <chrono>
#include <cstdint>
#include <optional>

#include "engine/engine.h"

namespace nanoserve::server {

class StatsLog {
 public:
  using Clock = std::chrono::steady_clock;

  struct Line {
    double interval_s = 0.0;             // the seconds this line covers, since the last
    double prompt_throughput = 0.0;      // tokens/s
    double generation_throughput = 0.0;  // tokens/s
    int32_t running = 0;
    int32_t waiting = 0;
    double kv_cache_usage = 0.0;         // [0, 1]
    double prefix_cache_hit_rate = 0.0;  // [0, 1]
  };

  // interval_s <= 0: never logs.
  explicit StatsLog(double interval_s) : interval_s_(interval_s) {}

  // The engine thread, after each step and on idle wake-ups: logs the line when one is due.
  void tick(Clock::time_point now, const EngineStats& stats);
  // The line due at `now`, if any (and starts the next interval); what tick logs.
  std::optional<Line> due(Clock::time_point now, const EngineStats& stats);

 private:
  double interval_s_;
  bool started_ = false;
  Clock::time_point last_;
  EngineStats at_last_;
};

}  // namespace nanoserve::server
