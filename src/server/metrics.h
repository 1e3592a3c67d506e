#pragma once
// A small metrics registry rendered in the Prometheus text format (0.0.4),
// and the server's metrics under vLLM's names, with the `nanoserve:` prefix
// or (--metrics-prefix vllm) vLLM's own.
//
// Counters and gauges are lock-free; a histogram takes its own mutex. The
// engine thread updates, an HTTP thread renders.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/request_stream.h"

namespace nanoserve::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void inc(double by = 1.0) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative;  // [upper_bounds.size() + 1], the last is +Inf (== count)
    double sum = 0.0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
};

class MetricsRegistry {
 public:
  // The same name with other labels adds a series to the family; help and type come from the first.
  Counter& counter(const std::string& name, const std::string& help, Labels labels = {});
  Gauge& gauge(const std::string& name, const std::string& help, Labels labels = {});
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> upper_bounds,
                       Labels labels = {});

  std::string render() const;  // Prometheus text format

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    std::string name, help;
    Type type;
    std::deque<Series> series;
  };
  Family& family(const std::string& name, const std::string& help, Type type);

  mutable std::mutex mu_;  // guards the family list, not the values
  std::deque<Family> families_;
};

// The server's metrics, named as vLLM names them, under `prefix` (nanoserve:x by default;
// --metrics-prefix vllm gives vllm:x, so vLLM's dashboards read them unchanged). Every series
// carries model_name, the first served model name, as vLLM labels it.
struct ServerMetrics {
  explicit ServerMetrics(const std::string& model_name, const std::string& prefix = "nanoserve");

  // prefix:name, e.g. "nanoserve:prompt_tokens_total".
  std::string name(const std::string& short_name) const { return prefix_ + ":" + short_name; }

  MetricsRegistry registry;
  Gauge& num_requests_running;
  Gauge& num_requests_waiting;
  Gauge& kv_cache_usage_perc;   // fraction in [0, 1], as vLLM reports it
  Gauge& gpu_cache_usage_perc;  // the same value under vLLM's older name, which its dashboard reads
  Counter& prompt_tokens_total;
  Counter& generation_tokens_total;
  Counter& num_preemptions_total;
  // Preemption by swap (docs/engine.md): vLLM v0's swapped-request and swap-area gauges, and ours.
  Gauge& num_requests_swapped;
  Gauge& cpu_cache_usage_perc;             // swap area slots in use, [0, 1] (vLLM v0's name for it)
  Counter& num_preemptions_swapped_total;  // of num_preemptions_total, those swapped out
  Counter& swapped_out_blocks_total;
  Counter& swapped_in_blocks_total;
  Counter& recomputed_tokens_total;     // computed tokens that preemption by recompute dropped
  Counter& prefix_cache_queries_total;  // tokens looked up in the prefix cache at admission
  Counter& prefix_cache_hits_total;     // of those, tokens found cached
  Gauge& prefix_cache_hit_rate;         // hits / queries so far, [0, 1]
  Counter& parse_budget_refused_total;  // requests answered 503 because the parse budget stayed full
  Histogram& time_to_first_token_seconds;
  Histogram& inter_token_latency_seconds;
  Histogram& time_per_output_token_seconds;  // the same observations, under vLLM's older name
  Histogram& e2e_request_latency_seconds;
  Histogram& request_queue_time_seconds;      // arrival -> first scheduled
  Histogram& request_prefill_time_seconds;    // first scheduled -> first token
  Histogram& request_decode_time_seconds;     // first token -> last token
  Histogram& request_inference_time_seconds;  // first scheduled -> last token

  // The token-count histograms' buckets are 1, 2, 5, 10, ... up to max_model_len, as vLLM's;
  // they exist once this is called (the engine loop does, when the model is known).
  void set_max_model_len(int64_t max_model_len);
  // One finished sequence (a choice): its token counts. No-op before set_max_model_len.
  void observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens);
  // One finished request: the most tokens any of its choices generated.
  void observe_max_generation_tokens(int64_t tokens);

  void request_finished(FinishReason reason);  // request_success_total{finished_reason=...}

  // Speculative decoding's counters, vLLM's spec_decode_* (registered only
  // when the engine proposes, as vLLM does): decodes that carried proposals,
  // proposed tokens, accepted tokens, and accepted tokens per position
  // (position="0".."k-1"). Null until enabled.
  void enable_spec_decode(int32_t num_speculative_tokens);
  Counter* spec_decode_num_drafts = nullptr;
  Counter* spec_decode_num_draft_tokens = nullptr;
  Counter* spec_decode_num_accepted_tokens = nullptr;
  std::vector<Counter*> spec_decode_num_accepted_tokens_per_pos;  // [k]

  // A top-level request field that no endpoint knows (it is ignored): counts it in
  // request_unknown_fields_total{field=NAME}. The first kMaxUnknownFieldNames names get a series
  // each, later ones share field="(other)", so a client cannot grow /metrics without bound.
  // Returns true the first time a series is counted (the caller logs it once).
  bool unknown_field(const std::string& name);
  static constexpr size_t kMaxUnknownFieldNames = 32;
  static constexpr const char* kOtherField = "(other)";

 private:
  std::string model_name_;
  std::string prefix_;
  std::mutex unknown_mu_;
  std::vector<std::pair<std::string, Counter*>> unknown_fields_;  // names with their own series
  Counter* unknown_other_ = nullptr;
  Counter* success_stop_;
  Counter* success_length_;
  Counter* success_abort_;
  Counter* success_error_;
  std::atomic<Histogram*> request_prompt_tokens_{nullptr};
  std::atomic<Histogram*> request_generation_tokens_{nullptr};
  std::atomic<Histogram*> request_max_num_generation_tokens_{nullptr};
};

// 1, 2, 5, 10, 20, 50, ... while <= max (at least {1}): vLLM's bounds for token counts.
std::vector<double> one_two_five_buckets(int64_t max);

}  // namespace nanoserve::server
