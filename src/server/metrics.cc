#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/check.h"

namespace nanoserve::server {

namespace {

std::string format_value(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  // The shortest form that reads back as the same double: le="0.005", not "0.0050000000000000001".
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string escape_label_value(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

// {a="x",b="y"}, with `extra` appended (the histogram's le); empty when there are no labels.
std::string label_text(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && extra == nullptr) return "";
  std::string out = "{";
  bool first = true;
  auto add = [&](const std::pair<std::string, std::string>& kv) {
    if (!first) out += ",";
    first = false;
    out += kv.first + "=\"" + escape_label_value(kv.second) + "\"";
  };
  for (const auto& kv : labels) add(kv);
  if (extra != nullptr) add(*extra);
  return out + "}";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  NS_CHECK(std::is_sorted(upper_bounds_.begin(), upper_bounds_.end())) << "histogram bounds must ascend";
}

void Histogram::observe(double v) {
  size_t bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.upper_bounds = upper_bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.sum = sum_;
  return s;
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help,
                                                 Type type) {
  for (Family& f : families_) {
    if (f.name == name) {
      NS_CHECK(f.type == type) << "metric " << name << " registered with two types";
      return f;
    }
  }
  families_.push_back(Family{name, help, type, {}});
  return families_.back();
}

Counter& MetricsRegistry::counter(const std::string& name, const std::string& help, Labels labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, Type::kCounter);
  f.series.push_back(Series{std::move(labels), std::make_unique<Counter>(), nullptr, nullptr});
  return *f.series.back().counter;
}

Gauge& MetricsRegistry::gauge(const std::string& name, const std::string& help, Labels labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, Type::kGauge);
  f.series.push_back(Series{std::move(labels), nullptr, std::make_unique<Gauge>(), nullptr});
  return *f.series.back().gauge;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                      std::vector<double> upper_bounds, Labels labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, Type::kHistogram);
  f.series.push_back(
      Series{std::move(labels), nullptr, nullptr, std::make_unique<Histogram>(std::move(upper_bounds))});
  return *f.series.back().histogram;
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const Family& f : families_) {
    const char* type = f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    out += "# HELP " + f.name + " " + f.help + "\n";
    out += "# TYPE " + f.name + " " + type + "\n";
    for (const Series& s : f.series) {
      if (s.counter) out += f.name + label_text(s.labels) + " " + format_value(s.counter->value()) + "\n";
      if (s.gauge) out += f.name + label_text(s.labels) + " " + format_value(s.gauge->value()) + "\n";
      if (s.histogram) {
        Histogram::Snapshot snap = s.histogram->snapshot();
        for (size_t i = 0; i <= snap.upper_bounds.size(); ++i) {
          std::pair<std::string, std::string> le{
              "le", i < snap.upper_bounds.size() ? format_value(snap.upper_bounds[i]) : "+Inf"};
          out +=
              f.name + "_bucket" + label_text(s.labels, &le) + " " + format_value(snap.cumulative[i]) + "\n";
        }
        out += f.name + "_sum" + label_text(s.labels) + " " + format_value(snap.sum) + "\n";
        out += f.name + "_count" + label_text(s.labels) + " " + format_value(snap.cumulative.back()) + "\n";
      }
    }
  }
  return out;
}

namespace {
// Bucket bounds as vLLM chose them for the same histograms.
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
}  // namespace

std::vector<double> one_two_five_buckets(int64_t max) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max) return out.empty() ? std::vector<double>{1.0} : out;
      out.push_back(static_cast<double>(m * scale));
    }
    if (scale > (int64_t{1} << 58)) return out;
  }
}

ServerMetrics::ServerMetrics(const std::string& model_name, const std::string& prefix)
    : num_requests_running(registry.gauge(prefix + ":num_requests_running",
                                          "Number of requests in the running batch.",
                                          {{"model_name", model_name}})),
      num_requests_waiting(registry.gauge(prefix + ":num_requests_waiting",
                                          "Number of requests waiting to run.",
                                          {{"model_name", model_name}})),
      kv_cache_usage_perc(
          registry.gauge(prefix + ":kv_cache_usage_perc",
                         "KV-cache usage: the fraction of blocks in use, 1 means 100 percent.",
                         {{"model_name", model_name}})),
      gpu_cache_usage_perc(
          registry.gauge(prefix + ":gpu_cache_usage_perc",
                         "KV-cache usage, as kv_cache_usage_perc (vLLM's older name; also on a CPU run).",
                         {{"model_name", model_name}})),
      prompt_tokens_total(registry.counter(prefix + ":prompt_tokens_total",
                                           "Number of prompt tokens admitted.",
                                           {{"model_name", model_name}})),
      generation_tokens_total(registry.counter(prefix + ":generation_tokens_total",
                                               "Number of generated tokens.", {{"model_name", model_name}})),
      num_preemptions_total(registry.counter(prefix + ":num_preemptions_total",
                                             "Cumulative number of preemptions by the scheduler.",
                                             {{"model_name", model_name}})),
      num_requests_swapped(registry.gauge(prefix + ":num_requests_swapped",
                                          "Number of requests swapped out to the host swap area.",
                                          {{"model_name", model_name}})),
      cpu_cache_usage_perc(
          registry.gauge(prefix + ":cpu_cache_usage_perc",
                         "Swap area usage: the fraction of its slots in use, 1 means 100 percent.",
                         {{"model_name", model_name}})),
      num_preemptions_swapped_total(registry.counter(
          prefix + ":num_preemptions_swapped_total",
          "Preemptions that swapped the request's KV blocks out instead of recomputing them.",
          {{"model_name", model_name}})),
      swapped_out_blocks_total(registry.counter(prefix + ":swapped_out_blocks_total",
                                                "KV blocks copied out to the swap area.",
                                                {{"model_name", model_name}})),
      swapped_in_blocks_total(registry.counter(prefix + ":swapped_in_blocks_total",
                                               "KV blocks copied back in from the swap area.",
                                               {{"model_name", model_name}})),
      recomputed_tokens_total(registry.counter(prefix + ":recomputed_tokens_total",
                                               "Computed tokens dropped by preemption by recompute.",
                                               {{"model_name", model_name}})),
      prefix_cache_queries_total(registry.counter(prefix + ":prefix_cache_queries_total",
                                                  "Prompt tokens looked up in the prefix cache.",
                                                  {{"model_name", model_name}})),
      prefix_cache_hits_total(registry.counter(prefix + ":prefix_cache_hits_total",
                                               "Prompt tokens found in the prefix cache.",
                                               {{"model_name", model_name}})),
      prefix_cache_hit_rate(registry.gauge(prefix + ":prefix_cache_hit_rate",
                                           "Prefix cache hits over queries, in tokens, since start.",
                                           {{"model_name", model_name}})),
      parse_budget_refused_total(registry.counter(
          prefix + ":parse_budget_refused_total",
          "Requests refused with 503 because their body did not fit the parse budget in time.",
          {{"model_name", model_name}})),
      time_to_first_token_seconds(registry.histogram(prefix + ":time_to_first_token_seconds",
                                                     "Time from arrival to the first generated token.",
                                                     ttft_buckets(), {{"model_name", model_name}})),
      inter_token_latency_seconds(registry.histogram(prefix + ":inter_token_latency_seconds",
                                                     "Time between consecutive tokens of a sequence.",
                                                     itl_buckets(), {{"model_name", model_name}})),
      time_per_output_token_seconds(registry.histogram(
          prefix + ":time_per_output_token_seconds",
          "Time between consecutive tokens, as inter_token_latency_seconds (vLLM's older name).",
          itl_buckets(), {{"model_name", model_name}})),
      e2e_request_latency_seconds(registry.histogram(prefix + ":e2e_request_latency_seconds",
                                                     "Time from arrival to the last token.", e2e_buckets(),
                                                     {{"model_name", model_name}})),
      request_queue_time_seconds(
          registry.histogram(prefix + ":request_queue_time_seconds",
                             "Time from arrival to the first step that runs the request.", e2e_buckets(),
                             {{"model_name", model_name}})),
      request_prefill_time_seconds(
          registry.histogram(prefix + ":request_prefill_time_seconds",
                             "Time from the first step that runs the request to its first token.",
                             e2e_buckets(), {{"model_name", model_name}})),
      request_decode_time_seconds(registry.histogram(prefix + ":request_decode_time_seconds",
                                                     "Time from the first token to the last.", e2e_buckets(),
                                                     {{"model_name", model_name}})),
      request_inference_time_seconds(
          registry.histogram(prefix + ":request_inference_time_seconds",
                             "Time from the first step that runs the request to its last token.",
                             e2e_buckets(), {{"model_name", model_name}})) {
  model_name_ = model_name;
  prefix_ = prefix;
  const char* help = "Count of finished requests by finish reason.";
  auto success = [&](const char* reason) {
    return &registry.counter(prefix + ":request_success_total", help,
                             {{"model_name", model_name}, {"finished_reason", reason}});
  };
  success_stop_ = success("stop");
  success_length_ = success("length");
  success_abort_ = success("abort");
  success_error_ = success("error");
}

void ServerMetrics::set_max_model_len(int64_t max_model_len) {
  if (request_prompt_tokens_.load() != nullptr) return;
  const std::vector<double> buckets = one_two_five_buckets(max_model_len);
  const Labels labels{{"model_name", model_name_}};
  request_max_num_generation_tokens_.store(
      &registry.histogram(name("request_max_num_generation_tokens"),
                          "The most tokens generated by one choice of a request.", buckets, labels));
  request_generation_tokens_.store(&registry.histogram(
      name("request_generation_tokens"), "Tokens generated by a finished sequence.", buckets, labels));
  request_prompt_tokens_.store(&registry.histogram(name("request_prompt_tokens"),
                                                   "Prompt tokens of a finished sequence.", buckets, labels));
}

void ServerMetrics::observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
  Histogram* prompt = request_prompt_tokens_.load();
  if (prompt == nullptr) return;
  prompt->observe(static_cast<double>(prompt_tokens));
  request_generation_tokens_.load()->observe(static_cast<double>(generation_tokens));
}

void ServerMetrics::observe_max_generation_tokens(int64_t tokens) {
  if (Histogram* h = request_max_num_generation_tokens_.load()) h->observe(static_cast<double>(tokens));
}

void ServerMetrics::request_finished(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: success_stop_->inc(); break;
    case FinishReason::kLength: success_length_->inc(); break;
    case FinishReason::kAbort: success_abort_->inc(); break;
    case FinishReason::kError: success_error_->inc(); break;
    case FinishReason::kNone: break;
  }
}

bool ServerMetrics::unknown_field(const std::string& name) {
  const std::string metric = prefix_ + ":request_unknown_fields_total";
  constexpr const char* kHelp = "Top-level request fields that were not known and were ignored, by name.";
  std::lock_guard<std::mutex> lock(unknown_mu_);
  for (auto& [seen, counter] : unknown_fields_) {
    if (seen == name) {
      counter->inc();
      return false;
    }
  }
  if (unknown_fields_.size() < kMaxUnknownFieldNames) {
    Counter& c = registry.counter(metric, kHelp, {{"model_name", model_name_}, {"field", name}});
    unknown_fields_.emplace_back(name, &c);
    c.inc();
    return true;
  }
  const bool first = unknown_other_ == nullptr;
  if (first)
    unknown_other_ = &registry.counter(metric, kHelp, {{"model_name", model_name_}, {"field", kOtherField}});
  unknown_other_->inc();
  return first;
}

void ServerMetrics::enable_spec_decode(int32_t num_speculative_tokens) {
  if (spec_decode_num_drafts != nullptr) return;
  const Labels model = {{"model_name", model_name_}};
  spec_decode_num_drafts =
      &registry.counter(name("spec_decode_num_drafts_total"),
                        "Number of spec decoding drafts (decodes that carried proposals).", model);
  spec_decode_num_draft_tokens = &registry.counter(name("spec_decode_num_draft_tokens_total"),
                                                   "Number of draft tokens (proposed tokens).", model);
  spec_decode_num_accepted_tokens = &registry.counter(name("spec_decode_num_accepted_tokens_total"),
                                                      "Number of accepted tokens.", model);
  for (int32_t j = 0; j < num_speculative_tokens; ++j) {
    spec_decode_num_accepted_tokens_per_pos.push_back(&registry.counter(
        name("spec_decode_num_accepted_tokens_per_pos_total"), "Accepted tokens per draft position.",
        {{"model_name", model_name_}, {"position", std::to_string(j)}}));
  }
}

}  // namespace nanoserve::server
