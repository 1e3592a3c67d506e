#include "server/stats_log.h"

#include "core/logging.h"

namespace nanoserve::server {

std::optional<StatsLog::Line> StatsLog::due(Clock::time_point now, const EngineStats& s) {
  if (interval_s_ <= 0.0) return std::nullopt;
  if (!started_) {
    started_ = true;
    last_ = now;
    at_last_ = s;
    return std::nullopt;
  }
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  if (elapsed < interval_s_) return std::nullopt;
  const int64_t prompt = s.prompt_tokens - at_last_.prompt_tokens;
  const int64_t generated = s.generation_tokens - at_last_.generation_tokens;
  const int64_t queries = s.prefix_cache_queries - at_last_.prefix_cache_queries;
  const int64_t hits = s.prefix_cache_hits - at_last_.prefix_cache_hits;
  const bool busy = prompt > 0 || generated > 0 || s.num_running > 0 || s.num_waiting > 0;
  last_ = now;
  at_last_ = s;
  if (!busy) return std::nullopt;
  Line line;
  line.interval_s = elapsed;
  line.prompt_throughput = static_cast<double>(prompt) / elapsed;
  line.generation_throughput = static_cast<double>(generated) / elapsed;
  line.running = s.num_running;
  line.waiting = s.num_waiting;
  line.kv_cache_usage = s.kv_usage;
  if (queries > 0) {
    line.prefix_cache_hit_rate = static_cast<double>(hits) / static_cast<double>(queries);
  } else if (s.prefix_cache_queries > 0) {
    line.prefix_cache_hit_rate =
        static_cast<double>(s.prefix_cache_hits) / static_cast<double>(s.prefix_cache_queries);
  }
  return line;
}

void StatsLog::tick(Clock::time_point now, const EngineStats& stats) {
  const std::optional<Line> l = due(now, stats);
  if (!l) return;
  NS_LOG(INFO)
          .field("interval_s", l->interval_s, 3)
          .field("prompt_throughput", l->prompt_throughput, 1)
          .field("generation_throughput", l->generation_throughput, 1)
          .field("running", l->running)
          .field("waiting", l->waiting)
          .field("kv_cache_usage_pct", 100.0 * l->kv_cache_usage, 1)
          .field("prefix_cache_hit_rate_pct", 100.0 * l->prefix_cache_hit_rate, 1)
      << "stats";
}

}  // namespace nanoserve::server
