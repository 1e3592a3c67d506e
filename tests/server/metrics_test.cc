#include "server/metrics.h"

#include <gtest/gtest.h>

#include <string>

// GCC 12 reports a false -Wrestrict inside std::string operator+ (GCC bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace nanoserve::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Metrics, PrometheusTextFormat) {
  MetricsRegistry reg;
  Counter& c = reg.counter("ns:tokens_total", "Tokens.", {{"model_name", "m"}});
  Gauge& g = reg.gauge("ns:usage", "Usage.");
  Histogram& h = reg.histogram("ns:lat_seconds", "Latency.", {0.1, 1.0});
  c.inc(3);
  g.set(0.25);
  h.observe(0.05);
  h.observe(0.5);
  h.observe(7.0);
  std::string text = reg.render();
  EXPECT_TRUE(has_line(text, "# HELP ns:tokens_total Tokens.")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE ns:tokens_total counter")) << text;
  EXPECT_TRUE(has_line(text, "ns:tokens_total{model_name=\"m\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE ns:usage gauge")) << text;
  EXPECT_TRUE(has_line(text, "ns:usage 0.25")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE ns:lat_seconds histogram")) << text;
  EXPECT_TRUE(has_line(text, "ns:lat_seconds_bucket{le=\"0.1\"} 1")) << text;  // shortest round trip
  EXPECT_TRUE(has_line(text, "ns:lat_seconds_bucket{le=\"1\"} 2")) << text;    // cumulative
  EXPECT_TRUE(has_line(text, "ns:lat_seconds_bucket{le=\"+Inf\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "ns:lat_seconds_count 3")) << text;
  EXPECT_TRUE(has_line(text, "ns:lat_seconds_sum 7.55")) << text;
}

TEST(Metrics, HistogramBoundsPrintTheirShortestForm) {
  // Issue 17 item 6: vLLM's 0.005 bucket printed as le="0.0050000000000000001".
  ServerMetrics m("smol");
  const std::string text = m.registry.render();
  EXPECT_NE(text.find("le=\"0.005\""), std::string::npos) << text;
  EXPECT_NE(text.find("le=\"0.075\""), std::string::npos) << text;
  EXPECT_EQ(text.find("00000000"), std::string::npos) << text;
  MetricsRegistry reg;
  reg.gauge("g", "G.").set(0.1 + 0.2);  // 0.30000000000000004: 17 digits are needed, and kept
  EXPECT_NE(reg.render().find("g 0.30000000000000004\n"), std::string::npos) << reg.render();
}

TEST(Metrics, UnknownFieldsAreCountedWithBoundedCardinality) {
  ServerMetrics m("smol");
  EXPECT_TRUE(m.unknown_field("foo"));
  EXPECT_FALSE(m.unknown_field("foo")) << "logged once";
  for (size_t i = 1; i < ServerMetrics::kMaxUnknownFieldNames; ++i)
    EXPECT_TRUE(m.unknown_field("f" + std::to_string(i)));
  EXPECT_TRUE(m.unknown_field("one_too_many")) << "the first overflow is logged";
  EXPECT_FALSE(m.unknown_field("two_too_many"));
  const std::string text = m.registry.render();
  EXPECT_TRUE(has_line(text, "nanoserve:request_unknown_fields_total{model_name=\"smol\",field=\"foo\"} 2"))
      << text;
  EXPECT_TRUE(
      has_line(text, "nanoserve:request_unknown_fields_total{model_name=\"smol\",field=\"(other)\"} 2"))
      << text;
  EXPECT_EQ(text.find("one_too_many"), std::string::npos);
  size_t series = 0;
  for (size_t at = text.find("\nnanoserve:request_unknown_fields_total{"); at != std::string::npos;
       at = text.find("\nnanoserve:request_unknown_fields_total{", at + 1))
    ++series;
  EXPECT_EQ(series, ServerMetrics::kMaxUnknownFieldNames + 1);
}

TEST(Metrics, PrefixNamesEveryFamily) {
  ServerMetrics m("smol", "vllm");
  m.set_max_model_len(300);
  m.observe_request_tokens(7, 3);
  const std::string text = m.registry.render();
  for (size_t at = text.find("\n# TYPE "); at != std::string::npos; at = text.find("\n# TYPE ", at + 1))
    EXPECT_EQ(text.compare(at + 8, 5, "vllm:"), 0) << text.substr(at, 80);
  EXPECT_EQ(text.find("nanoserve:"), std::string::npos);
  EXPECT_TRUE(has_line(text, "vllm:request_prompt_tokens_bucket{model_name=\"smol\",le=\"5\"} 0")) << text;
  EXPECT_TRUE(has_line(text, "vllm:request_prompt_tokens_bucket{model_name=\"smol\",le=\"10\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "vllm:request_generation_tokens_sum{model_name=\"smol\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE vllm:gpu_cache_usage_perc gauge")) << text;
  EXPECT_EQ(m.name("x"), "vllm:x");
}

TEST(Metrics, OneTwoFiveBucketsUpToMaxModelLen) {
  EXPECT_EQ(one_two_five_buckets(8192),
            (std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}));
  EXPECT_EQ(one_two_five_buckets(10), (std::vector<double>{1, 2, 5, 10}));
  EXPECT_EQ(one_two_five_buckets(0), (std::vector<double>{1}));
}

TEST(Metrics, LabelValuesAreEscaped) {
  MetricsRegistry reg;
  reg.counter("x_total", "X.", {{"model_name", "a\"b\\c\nd"}}).inc();
  EXPECT_NE(reg.render().find("x_total{model_name=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos)
      << reg.render();
}

TEST(Metrics, SpecDecodeCountersOnlyWhenEnabled) {
  ServerMetrics m("tiny");
  EXPECT_EQ(m.registry.render().find("spec_decode"), std::string::npos);
  m.enable_spec_decode(3);
  m.enable_spec_decode(3);  // once only
  m.spec_decode_num_drafts->inc(2);
  m.spec_decode_num_draft_tokens->inc(6);
  m.spec_decode_num_accepted_tokens->inc(4);
  m.spec_decode_num_accepted_tokens_per_pos[0]->inc(2);
  m.spec_decode_num_accepted_tokens_per_pos[1]->inc(2);
  const std::string text = m.registry.render();
  EXPECT_TRUE(has_line(text, "# TYPE nanoserve:spec_decode_num_drafts_total counter")) << text;
  EXPECT_TRUE(has_line(text, "nanoserve:spec_decode_num_drafts_total{model_name=\"tiny\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "nanoserve:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 6")) << text;
  EXPECT_TRUE(has_line(text, "nanoserve:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 4"))
      << text;
  EXPECT_TRUE(has_line(
      text, "nanoserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"} 2"))
      << text;
  EXPECT_TRUE(has_line(
      text, "nanoserve:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"2\"} 0"))
      << text;
  EXPECT_EQ(m.spec_decode_num_accepted_tokens_per_pos.size(), 3u);
}

TEST(Metrics, ServerMetricsUseVllmNames) {
  ServerMetrics m("smol");
  m.request_finished(FinishReason::kAbort);
  m.request_finished(FinishReason::kStop);
  m.request_finished(FinishReason::kStop);
  m.kv_cache_usage_perc.set(0.5);
  std::string text = m.registry.render();
  for (const char* name :
       {"nanoserve:num_requests_running", "nanoserve:num_requests_waiting", "nanoserve:kv_cache_usage_perc",
        "nanoserve:prompt_tokens_total", "nanoserve:generation_tokens_total",
        "nanoserve:request_success_total", "nanoserve:num_preemptions_total",
        "nanoserve:time_to_first_token_seconds", "nanoserve:inter_token_latency_seconds",
        "nanoserve:e2e_request_latency_seconds"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  EXPECT_TRUE(
      has_line(text, "nanoserve:request_success_total{model_name=\"smol\",finished_reason=\"stop\"} 2"))
      << text;
  EXPECT_TRUE(
      has_line(text, "nanoserve:request_success_total{model_name=\"smol\",finished_reason=\"abort\"} 1"));
  EXPECT_TRUE(has_line(text, "nanoserve:kv_cache_usage_perc{model_name=\"smol\"} 0.5"));
  // Each family is declared once, however many series it has.
  size_t first = text.find("# TYPE nanoserve:request_success_total");
  EXPECT_EQ(text.find("# TYPE nanoserve:request_success_total", first + 1), std::string::npos);
}

}  // namespace
}  // namespace nanoserve::server
