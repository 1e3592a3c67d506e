// nanoserve bench serve: load on a running OpenAI-compatible server
// (docs/bench_serve.md). The flags are vLLM's `vllm bench serve` ones; the
// prompts are made by bench_serve_prompts.cc.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/bench_dataset.h"
#include "cli/bench_serve.h"
#include "cli/commands.h"

namespace nanoserve::cli {

namespace {

using json = nlohmann::json;

constexpr double kSetupTimeoutS = 30;

struct BenchServeArgs {
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  std::string dataset_name = "random";
  DatasetFlags dataset;  // sharegpt, custom: cli/bench_dataset.h
  int num_prompts = 1000;
  int input_len = 1024;
  int output_len = 128;
  double range_ratio = 0.0;
  int prefix_len = 0;
  std::string prompt_kind = "auto";
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  double temperature = 0.0;
  std::string extra_body;
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
  std::string metric_percentiles = "99";
  double request_timeout_s = 600;
  bool save_result = false;
  bool save_detailed = false;
  std::string result_dir;
  std::string result_filename;
  bool no_progress = false;
  double ready_timeout_s = 600;
};

int fail_setup(const std::string& msg) {
  std::fprintf(stderr, "nanoserve bench serve: %s\n", msg.c_str());
  return 1;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Waits while GET /health answers 503 (a server still loading its model), for at most
// `timeout_s`; any other answer (200, a 404 or 401 from another server) ends the wait, and a
// connection error is left to the first real request to report. Says once what it waits for;
// the error says what it saw last.
Status wait_until_ready(const ServerUrl& url, const std::string& key, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last;
  bool said = false;
  while (true) {
    StatusOr<HttpReply> r = http_fetch(url, "GET", "/health", "", key, kSetupTimeoutS);
    if (!r.ok() || r->status != 503) return Status();
    last = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
    if (Clock::now() >= deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.0f", timeout_s);
      return failed_precondition("the server is not ready after " + std::string(secs) +
                                 " s (--ready-check-timeout-sec); last: " + last);
    }
    if (!said) {
      std::fprintf(stderr, "nanoserve bench serve: the server is not ready (%s); waiting up to %.0f s\n",
                   last.c_str(), timeout_s);
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The served model: the first of GET /v1/models.
StatusOr<std::string> first_model(const ServerUrl& url, const std::string& key) {
  StatusOr<HttpReply> r = http_fetch(url, "GET", "/v1/models", "", key, kSetupTimeoutS);
  if (!r.ok()) return r.status();
  if (r->status != 200) {
    return failed_precondition("GET /v1/models: HTTP " + std::to_string(r->status) + ": " +
                               r->body.substr(0, 300));
  }
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return failed_precondition("GET /v1/models: no data[0].id in " + r->body.substr(0, 300) +
                               " (give --model)");
  }
  return j["data"][0]["id"].get<std::string>();
}

std::string default_result_name(const BenchServeArgs& a, const std::string& model) {
  std::string base = model.substr(model.find_last_of('/') + 1);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
  std::string conc = a.max_concurrency > 0 ? "-concurrency" + std::to_string(a.max_concurrency) : "";
  return "bench-serve-" + a.request_rate + "qps" + conc + "-" + base + "-" + date + ".json";
}

}  // namespace

std::optional<SpecDecodeCounts> parse_spec_decode_metrics(const std::string& text) {
  SpecDecodeCounts c;
  bool any = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    const size_t name_end = line.find_first_of("{ ");
    if (colon == std::string::npos || name_end == std::string::npos || colon > name_end) continue;
    std::string name = line.substr(colon + 1, name_end - colon - 1);
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0) name.resize(name.size() - 6);
    const size_t value_at = line.find_last_of(' ');
    double value = 0;
    try {
      value = std::stod(line.substr(value_at + 1));
    } catch (const std::exception&) {
      continue;
    }
    if (name == "spec_decode_num_drafts") {
      c.drafts += value;
    } else if (name == "spec_decode_num_draft_tokens") {
      c.draft_tokens += value;
    } else if (name == "spec_decode_num_accepted_tokens") {
      c.accepted_tokens += value;
    } else if (name == "spec_decode_num_accepted_tokens_per_pos") {
      const size_t label = line.find("position=\"");
      if (label == std::string::npos || label > value_at) continue;
      const int j = std::atoi(line.c_str() + label + 10);
      if (j < 0 || j > 1024) continue;
      if (static_cast<int>(c.accepted_per_pos.size()) <= j) c.accepted_per_pos.resize(j + 1, 0.0);
      c.accepted_per_pos[j] += value;
    } else {
      continue;
    }
    any = true;
  }
  if (!any) return std::nullopt;
  return c;
}

json spec_decode_json(const SpecDecodeCounts& before, const SpecDecodeCounts& after) {
  json per_pos = json::array();
  for (size_t j = 0; j < after.accepted_per_pos.size(); ++j)
    per_pos.push_back(after.accepted_per_pos[j] -
                      (j < before.accepted_per_pos.size() ? before.accepted_per_pos[j] : 0.0));
  return {{"drafts", after.drafts - before.drafts},
          {"draft_tokens", after.draft_tokens - before.draft_tokens},
          {"accepted_tokens", after.accepted_tokens - before.accepted_tokens},
          {"accepted_per_pos", per_pos}};
}

namespace {

// The server's speculative decoding counters now, if it exports any.
std::optional<SpecDecodeCounts> spec_decode_now(const ServerUrl& url, const std::string& key) {
  StatusOr<HttpReply> r = http_fetch(url, "GET", "/metrics", "", key, kSetupTimeoutS);
  if (!r.ok() || r->status != 200) return std::nullopt;
  return parse_spec_decode_metrics(r->body);
}

int run_bench_serve(BenchServeArgs a) {
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "nanoserve bench serve: %s\n", m.c_str());
    return 2;
  };
  if (a.dataset_name != "random" && a.dataset_name != "sharegpt" && a.dataset_name != "custom")
    return bad("--dataset-name: '" + a.dataset_name + "' is not random, sharegpt or custom");
  if (a.dataset_name == "random" && !a.dataset.path.empty())
    return bad("--dataset-path needs --dataset-name sharegpt or custom");
  if (a.dataset_name != "random" && a.prompt_kind == "ids")
    return bad("--prompt-kind ids is the random dataset's");
  if (a.endpoint != "/v1/completions" && a.endpoint != "/v1/chat/completions") {
    return bad("--endpoint must be /v1/completions or /v1/chat/completions, got '" + a.endpoint + "'");
  }
  const bool chat = a.endpoint == "/v1/chat/completions";
  if (a.prompt_kind == "auto") a.prompt_kind = chat || a.dataset_name != "random" ? "text" : "ids";
  if (a.prompt_kind != "ids" && a.prompt_kind != "text")
    return bad("--prompt-kind must be auto, ids or text");
  if (chat && a.prompt_kind == "ids") return bad("--prompt-kind ids needs --endpoint /v1/completions");
  double rate = 0;
  {
    char* end = nullptr;
    rate = std::strtod(a.request_rate.c_str(), &end);
    if (a.request_rate.empty() || *end != '\0' || !(rate > 0)) {
      return bad("--request-rate must be a positive number or inf, got '" + a.request_rate + "'");
    }
  }
  json extra = json::object();
  if (!a.extra_body.empty()) {
    extra = json::parse(a.extra_body, nullptr, false);
    if (extra.is_discarded() || !extra.is_object()) return bad("--extra-body must be a JSON object");
  }
  ReportOptions ro;
  ro.percentile_metrics = split_commas(a.percentile_metrics);
  for (const std::string& m : ro.percentile_metrics) {
    if (m != "ttft" && m != "tpot" && m != "itl" && m != "e2el") {
      return bad("--percentile-metrics: unknown metric '" + m + "' (ttft, tpot, itl, e2el)");
    }
  }
  for (const std::string& p : split_commas(a.metric_percentiles)) {
    char* end = nullptr;
    const double v = std::strtod(p.c_str(), &end);
    if (*end != '\0' || !(v > 0 && v < 100))
      return bad("--metric-percentiles: '" + p + "' is not in (0, 100)");
    ro.percentiles.push_back(v);
  }
  if (a.api_key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY"); env != nullptr) a.api_key = env;
  }
  const std::string base =
      a.base_url.empty() ? "http://" + a.host + ":" + std::to_string(a.port) : a.base_url;
  StatusOr<ServerUrl> url = parse_base_url(base);
  if (!url.ok()) return bad(url.status().message());

  // Many streams at once need descriptors: the soft limit goes up to the hard one.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }

  if (Status ready = wait_until_ready(*url, a.api_key, a.ready_timeout_s); !ready.ok())
    return fail_setup(ready.message());
  std::string model = a.model;
  if (model.empty()) {
    StatusOr<std::string> m = first_model(*url, a.api_key);
    if (!m.ok()) return fail_setup(m.status().message());
    model = *m;
  }
  ServerTokenizer tok(*url, model, a.api_key);
  RequestShape shape;
  shape.model = model;
  shape.chat = chat;
  shape.temperature = a.temperature;
  shape.ignore_eos = a.ignore_eos;
  shape.extra = extra;
  StatusOr<PromptSet> d = PromptSet{};
  if (a.dataset_name == "random") {
    RandomPrompts spec;
    spec.num_prompts = a.num_prompts;
    spec.input_len = a.input_len;
    spec.output_len = a.output_len;
    spec.prefix_len = a.prefix_len;
    spec.range_ratio = a.range_ratio;
    spec.seed = a.seed;
    spec.ids = a.prompt_kind == "ids";
    d = random_prompts(spec, shape, tok);
  } else {
    d = file_prompts(a.dataset_name, a.dataset, a.num_prompts, a.seed, shape, tok);
  }
  if (!d.ok()) return fail_setup(d.status().message());

  LoadOptions o;
  o.endpoint = a.endpoint;
  o.api_key = a.api_key;
  o.request_rate = rate;
  o.burstiness = a.burstiness;
  o.max_concurrency = a.max_concurrency;
  o.request_timeout_s = a.request_timeout_s;
  o.seed = a.seed;
  o.keep_text = a.save_detailed;
  o.progress_bar = isatty(STDERR_FILENO);
  o.quiet = a.no_progress;
  std::printf(
      "bench serve: %d requests to %s%s, model %s; input %d tokens (range ratio %.2f, prefix %d), "
      "output %d; rate %s, burstiness %.2f, max concurrency %s; prompts: %s\n",
      a.num_prompts, base.c_str(), a.endpoint.c_str(), model.c_str(), a.input_len, a.range_ratio,
      a.prefix_len, a.output_len, a.request_rate.c_str(), a.burstiness,
      a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "none", d->how.c_str());
  std::fflush(stdout);

  const std::optional<SpecDecodeCounts> spec_before = spec_decode_now(*url, a.api_key);
  const LoadResult r = run_load(*url, d->requests, o);
  const std::optional<SpecDecodeCounts> spec_after = spec_decode_now(*url, a.api_key);

  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
  json info = {{"date", date},
               {"backend", "openai"},
               {"endpoint", a.endpoint},
               {"base_url", base},
               {"model_id", model},
               {"num_prompts", a.num_prompts},
               {"random_input_len", a.input_len},
               {"random_output_len", a.output_len},
               {"random_range_ratio", a.range_ratio},
               {"random_prefix_len", a.prefix_len},
               {"prompt_kind", a.prompt_kind},
               {"input_lengths", d->how},
               {"request_rate", std::isinf(rate) ? json("inf") : json(rate)},
               {"burstiness", a.burstiness},
               {"max_concurrency", a.max_concurrency},
               {"ignore_eos", a.ignore_eos},
               {"seed", a.seed}};
  if (spec_before.has_value() && spec_after.has_value())
    info["spec_decode"] = spec_decode_json(*spec_before, *spec_after);
  json result = report_load(r, d->requests, ro, info, a.save_detailed);
  if (a.save_result || !a.result_filename.empty()) {
    std::string name = a.result_filename.empty() ? default_result_name(a, model) : a.result_filename;
    if (!a.result_dir.empty()) name = a.result_dir + "/" + name;
    std::ofstream f(name);
    f << result.dump(2) << "\n";
    if (!f) return fail_setup("--save-result: could not write " + name);
    std::printf("Result saved to %s\n", name.c_str());
  }
  return result["completed"].get<int64_t>() > 0 ? 0 : 1;
}

}  // namespace

CommandRun add_bench_serve_command(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* sub = bench.add_subcommand(
      "serve", "Load a running OpenAI-compatible server over HTTP (vLLM's bench serve; docs/bench_serve.md)");
  sub->add_option("--base-url", a->base_url,
                  "Server URL, http://HOST:PORT[/prefix] (default: from --host, --port)");
  sub->add_option("--host", a->host, "Server host")->capture_default_str();
  sub->add_option("--port", a->port, "Server port")->check(CLI::Range(1, 65535))->capture_default_str();
  sub->add_option("--endpoint", a->endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  sub->add_option("--model", a->model, "Model name sent in requests (default: the first of /v1/models)");
  sub->add_option("--api-key", a->api_key, "Bearer key (default: $OPENAI_API_KEY)");
  sub->add_option(
         "--dataset-name", a->dataset_name,
         "Dataset: random, sharegpt (a ShareGPT JSON file) or custom (JSON Lines of {\"prompt\": ...})")
      ->capture_default_str();
  add_dataset_flags(sub, a->dataset);
  sub->add_option("--num-prompts", a->num_prompts, "Requests")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--random-input-len", a->input_len, "Prompt tokens")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--random-output-len", a->output_len, "max_tokens of each request")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--random-range-ratio", a->range_ratio,
                  "Lengths uniform in [L(1-R), L(1+R)]; 0: every prompt has the same length")
      ->check(CLI::Range(0.0, 0.999))
      ->capture_default_str();
  sub->add_option("--random-prefix-len", a->prefix_len, "Tokens of one random prefix shared by every prompt")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub->add_option(
         "--prompt-kind", a->prompt_kind,
         "ids (token-id prompts, completions only) or text; auto: ids for completions, text for chat")
      ->capture_default_str();
  sub->add_option("--request-rate", a->request_rate,
                  "Requests per second (Poisson arrivals), or inf: all at once")
      ->capture_default_str();
  sub->add_option("--burstiness", a->burstiness, "Gamma shape of the arrival gaps: 1 Poisson, <1 burstier")
      ->check(CLI::Range(1e-3, 1e3))
      ->capture_default_str();
  sub->add_option("--max-concurrency", a->max_concurrency, "Requests in flight at most (0: no limit)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--seed", a->seed, "Seed of the prompts and of the arrivals")->capture_default_str();
  sub->add_flag("--ignore-eos", a->ignore_eos, "Send ignore_eos, so every request makes its max_tokens");
  sub->add_option("--temperature", a->temperature, "Sampling temperature")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  sub->add_option("--extra-body", a->extra_body, "JSON object merged into every request body");
  sub->add_option("--percentile-metrics", a->percentile_metrics, "Metrics to print: of ttft,tpot,itl,e2el")
      ->capture_default_str();
  sub->add_option("--metric-percentiles", a->metric_percentiles, "Percentiles to print, e.g. 50,90,99")
      ->capture_default_str();
  sub->add_option("--request-timeout", a->request_timeout_s,
                  "Seconds before a request is failed as timed out")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  sub->add_flag("--save-result", a->save_result, "Write the figures as JSON (vLLM's keys)");
  sub->add_flag("--save-detailed", a->save_detailed, "Also keep every generated text in the JSON");
  sub->add_option("--result-dir", a->result_dir, "Folder of the JSON file");
  sub->add_option("--result-filename", a->result_filename, "Name of the JSON file (implies --save-result)");
  sub->add_flag("--no-progress", a->no_progress, "No progress bar or lines");
  sub->add_option("--ready-check-timeout-sec", a->ready_timeout_s,
                  "Seconds to wait for the server to be ready (GET /health 200) before the run")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  return [a] {
    try {
      return run_bench_serve(*a);
    } catch (const std::exception& e) {  // a reply of an unexpected shape, a full disk
      std::fprintf(stderr, "nanoserve bench serve: %s\n", e.what());
      return 1;
    }
  };
}

}  // namespace nanoserve::cli
