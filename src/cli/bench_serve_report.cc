// bench serve's figures, with vLLM's definitions (vllm bench serve):
//   input tokens of a request   the prompt as built (the server's usage.prompt_tokens, which
//                               counts a chat template's tokens too, goes in the JSON beside it)
//   output tokens of a request  usage.completion_tokens; without usage, its chunks with text
//   TTFT      send -> first chunk with text
//   TPOT      (E2E - TTFT) / (output tokens - 1), per request with more than one token
//   ITL       every gap between successive chunks with text, over all requests
//   E2E       send -> end of the stream (data: [DONE])
//   throughput  successful requests, output tokens, input + output tokens, each / duration
// Percentiles interpolate linearly between ranks (numpy's default); std is the
// population's. Only successful requests count in tokens and latencies.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <string>

#include "cli/bench_serve.h"

namespace nanoserve::cli {

namespace {

using json = nlohmann::json;

struct MetricInfo {
  const char* key;
  const char* title;
  const char* label;
};

constexpr MetricInfo kMetrics[] = {
    {"ttft", "Time to First Token", "TTFT"},
    {"tpot", "Time per Output Token (excl. 1st token)", "TPOT"},
    {"itl", "Inter-token Latency", "ITL"},
    {"e2el", "End-to-end Latency", "E2EL"},
};

std::string percentile_word(double p) {
  char buf[32];
  if (p == std::floor(p)) {
    std::snprintf(buf, sizeof buf, "%d", static_cast<int>(p));
  } else {
    std::snprintf(buf, sizeof buf, "%g", p);
  }
  return buf;
}

void line(const char* name, const std::string& value) {
  std::printf("%-40s %-10s\n", name, value.c_str());
}

// A printf-built string (GCC 12 warns falsely, -Wrestrict, on chains of std::string +).
template <typename... Args>
std::string format(const char* fmt, Args... args) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

void section(const char* title) {
  const int n = 50, len = static_cast<int>(std::strlen(title));
  const int left = std::max(0, (n - len) / 2), right = std::max(0, n - len - left);
  std::printf("%s%s%s\n", std::string(static_cast<size_t>(left), '-').c_str(), title,
              std::string(static_cast<size_t>(right), '-').c_str());
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

// The most output tokens (chunks with text) that arrived within one 1-second
// bin, the bins counted from the first send.
double peak_output_tps(const LoadResult& r) {
  std::map<int64_t, int64_t> per_second;
  for (const RequestOutcome& o : r.outcomes) {
    if (!o.ok || !o.ttft_s) continue;
    double t = o.start_s + *o.ttft_s;
    ++per_second[static_cast<int64_t>(std::floor(t))];
    for (double gap : o.itl_s) {
      t += gap;
      ++per_second[static_cast<int64_t>(std::floor(t))];
    }
  }
  int64_t peak = 0;
  for (const auto& [second, count] : per_second) peak = std::max(peak, count);
  return static_cast<double>(peak);
}

}  // namespace

double percentile_of(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(pos);
  const double frac = pos - static_cast<double>(i);
  return i + 1 < v.size() ? v[i] * (1 - frac) + v[i + 1] * frac : v[i];
}

json report_load(const LoadResult& r, const std::vector<BenchRequest>& requests, const ReportOptions& o,
                 const json& run_info, bool detailed) {
  int64_t completed = 0, failed = 0, untimed = 0, input_tokens = 0, output_tokens = 0;
  bool usage_missing = false;
  std::string first_error;
  std::map<std::string, std::vector<double>> ms;  // metric -> samples in ms
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(), itls = json::array(),
       errors = json::array(), texts = json::array(), starts = json::array(), usage_prompt = json::array();
  for (size_t i = 0; i < r.outcomes.size(); ++i) {
    const RequestOutcome& out = r.outcomes[i];
    errors.push_back(out.ok ? "" : out.error);
    if (!out.ok) {
      ++failed;
      if (first_error.empty()) first_error = out.error;
      input_lens.push_back(requests[i].input_len);
      usage_prompt.push_back(nullptr);
      output_lens.push_back(0);
      ttfts.push_back(0.0);
      itls.push_back(json::array());
      starts.push_back(out.start_s);
      if (detailed) texts.push_back("");
      continue;
    }
    ++completed;
    const int64_t in = requests[i].input_len;
    int64_t gen = out.completion_tokens.value_or(out.content_chunks);
    if (!out.completion_tokens) usage_missing = true;
    input_tokens += in;
    output_tokens += gen;
    ms["e2el"].push_back(out.latency_s * 1e3);
    untimed += !out.ttft_s;
    if (out.ttft_s) ms["ttft"].push_back(*out.ttft_s * 1e3);
    if (out.ttft_s && gen > 1)
      ms["tpot"].push_back((out.latency_s - *out.ttft_s) / static_cast<double>(gen - 1) * 1e3);
    json itl = json::array();
    for (double gap : out.itl_s) {
      ms["itl"].push_back(gap * 1e3);
      itl.push_back(gap);
    }
    input_lens.push_back(in);
    usage_prompt.push_back(out.prompt_tokens ? json(*out.prompt_tokens) : json(nullptr));
    output_lens.push_back(gen);
    ttfts.push_back(out.ttft_s ? json(*out.ttft_s) : json(nullptr));
    itls.push_back(std::move(itl));
    starts.push_back(out.start_s);
    if (detailed) texts.push_back(out.text);
  }
  const double duration = r.duration_s > 0 ? r.duration_s : 1e-9;

  json result = run_info;
  result["duration"] = r.duration_s;
  result["completed"] = completed;
  result["failed"] = failed;
  result["untimed"] = untimed;
  result["total_input_tokens"] = input_tokens;
  result["total_output_tokens"] = output_tokens;
  result["request_throughput"] = static_cast<double>(completed) / duration;
  result["output_throughput"] = static_cast<double>(output_tokens) / duration;
  result["total_token_throughput"] = static_cast<double>(input_tokens + output_tokens) / duration;
  result["max_output_tokens_per_s"] = peak_output_tps(r);
  result["max_concurrent_requests"] = r.peak_concurrency;
  result["usage_reported"] = !usage_missing;

  std::printf("%s\n", "============ Serving Benchmark Result ============");
  line("Successful requests:", std::to_string(completed));
  line("Failed requests:", std::to_string(failed));
  if (untimed > 0) line("Requests with no text (untimed):", std::to_string(untimed));
  if (r.max_concurrency > 0) line("Maximum request concurrency:", std::to_string(r.max_concurrency));
  const json& rate_j = run_info.contains("request_rate") ? run_info["request_rate"] : json();
  const double rate = rate_j.is_number() ? rate_j.get<double>() : 0.0;  // "inf" is a string
  line("Request rate configured (RPS):", rate > 0 && std::isfinite(rate) ? fixed2(rate) : "inf");
  line("Benchmark duration (s):", fixed2(r.duration_s));
  line("Total input tokens:", std::to_string(input_tokens));
  line("Total generated tokens:",
       format(usage_missing ? "%lld (chunks: no usage)" : "%lld", static_cast<long long>(output_tokens)));
  line("Request throughput (req/s):", fixed2(static_cast<double>(completed) / duration));
  line("Output token throughput (tok/s):", fixed2(static_cast<double>(output_tokens) / duration));
  line("Peak output token throughput (tok/s):", fixed2(result["max_output_tokens_per_s"].get<double>()));
  line("Peak concurrent requests:", std::to_string(r.peak_concurrency));
  line("Total Token throughput (tok/s):",
       fixed2(static_cast<double>(input_tokens + output_tokens) / duration));

  for (const MetricInfo& m : kMetrics) {
    const std::vector<double>& v = ms[m.key];
    const std::string key = m.key;
    result[format("mean_%s_ms", m.key)] = mean_of(v);
    result[format("median_%s_ms", m.key)] = percentile_of(v, 50);
    result[format("std_%s_ms", m.key)] = std_of(v);
    for (double p : o.percentiles) {
      result[format("p%s_%s_ms", percentile_word(p).c_str(), m.key)] = percentile_of(v, p);
    }
    if (std::find(o.percentile_metrics.begin(), o.percentile_metrics.end(), key) ==
        o.percentile_metrics.end()) {
      continue;
    }
    section(m.title);
    line(format("Mean %s (ms):", m.label).c_str(), fixed2(mean_of(v)));
    line(format("Median %s (ms):", m.label).c_str(), fixed2(percentile_of(v, 50)));
    for (double p : o.percentiles) {
      line(format("P%s %s (ms):", percentile_word(p).c_str(), m.label).c_str(), fixed2(percentile_of(v, p)));
    }
  }
  if (run_info.contains("spec_decode")) {
    // As vLLM's bench serve reports it, from the server's counters over the run.
    const json& sd = run_info["spec_decode"];
    const double drafts = sd["drafts"].get<double>(), proposed = sd["draft_tokens"].get<double>();
    const double accepted = sd["accepted_tokens"].get<double>();
    const double rate = proposed > 0 ? 100.0 * accepted / proposed : 0.0;
    const double length = drafts > 0 ? 1.0 + accepted / drafts : 0.0;
    result["spec_decode_acceptance_rate"] = rate;
    result["spec_decode_acceptance_length"] = length;
    result["spec_decode_num_drafts"] = drafts;
    result["spec_decode_draft_tokens"] = proposed;
    result["spec_decode_accepted_tokens"] = accepted;
    section("Speculative Decoding");
    line("Acceptance rate (%):", fixed2(rate));
    line("Acceptance length:", fixed2(length));
    line("Drafts:", format("%.0f", drafts));
    line("Draft tokens:", format("%.0f", proposed));
    line("Accepted tokens:", format("%.0f", accepted));
    std::string per_pos;
    for (const json& v : sd["accepted_per_pos"]) {
      if (!per_pos.empty()) per_pos += ' ';
      per_pos += fixed2(drafts > 0 ? 100.0 * v.get<double>() / drafts : 0.0);
    }
    if (!per_pos.empty()) line("Per-position acceptance (%):", per_pos);
  }
  std::printf("%s\n", "==================================================");
  if (!first_error.empty()) std::printf("First error: %s\n", first_error.c_str());
  std::fflush(stdout);

  result["input_lens"] = std::move(input_lens);
  result["usage_prompt_tokens"] = std::move(usage_prompt);
  result["output_lens"] = std::move(output_lens);
  result["ttfts"] = std::move(ttfts);
  result["itls"] = std::move(itls);
  result["start_times"] = std::move(starts);
  result["errors"] = std::move(errors);
  if (detailed) result["generated_texts"] = std::move(texts);
  return result;
}

}  // namespace nanoserve::cli
