// nanoserve serve: the OpenAI-compatible HTTP server.
//
// The HTTP server comes up first (so /health answers 503 while the model
// loads), then the model, the engine and its thread. SIGINT / SIGTERM stop
// the engine loop (in-flight requests end with an error event) and then HTTP;
// a start-up error exits non-zero at once.

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/vllm_flags.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/load_engine.h"
#include "server/api.h"
#include "server/cors.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/reasoning_parser.h"
#include "server/tokenizer_codec.h"
#include "server/tool_parser.h"
#include "template/chat_template.h"

namespace nanoserve::cli {

namespace {

struct ServeOptions {
  ModelArg model_arg;
  std::string model;  // resolved from model_arg
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  bool metrics_require_key = false;
  std::vector<std::string> served_model_names;  // vLLM takes several; the first is the API's name
  int64_t max_waiting_requests = 256;
  int http_threads = server::HttpOptions{}.num_threads;
  int64_t max_parse_bytes = int64_t{16} << 20;
  EngineFlags engine;
  VllmServeFlags vllm;
  std::string chat_template;     // a file or the template text; empty: the model's
  std::string tool_call_parser;  // empty: from the chat template
  bool enable_auto_tool_choice = false;
  std::string reasoning_parser;  // empty: none
  std::string log_format = "text";
  std::string metrics_prefix = "nanoserve";
  // vLLM's CORS flags: JSON lists (vLLM's form) or comma-separated names; vLLM's defaults.
  std::string allowed_origins = "[\"*\"]";
  std::string allowed_methods = "[\"*\"]";
  std::string allowed_headers = "[\"*\"]";
  bool allow_credentials = false;
  bool disable_frontend = false;  // no chat page at /
};

// A CORS flag's names: a JSON list of strings, as vLLM takes them (--allowed-origins
// '["https://a.example"]'), or the names separated by commas.
StatusOr<std::vector<std::string>> name_list(const char* flag, const std::string& value) {
  std::vector<std::string> out;
  if (!value.empty() && value.front() == '[') {
    nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    if (!j.is_array()) return invalid_argument(std::string(flag) + ": not a JSON list: " + value);
    for (const nlohmann::json& e : j) {
      if (!e.is_string())
        return invalid_argument(std::string(flag) + ": every entry must be a string: " + value);
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = value.find(',', start);
    std::string name = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (!name.empty()) out.push_back(std::move(name));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

StatusOr<server::CorsOptions> cors_options(const ServeOptions& opt) {
  server::CorsOptions c;
  NS_ASSIGN_OR_RETURN(c.allowed_origins, name_list("--allowed-origins", opt.allowed_origins));
  NS_ASSIGN_OR_RETURN(c.allowed_methods, name_list("--allowed-methods", opt.allowed_methods));
  NS_ASSIGN_OR_RETURN(c.allowed_headers, name_list("--allowed-headers", opt.allowed_headers));
  c.allow_credentials = opt.allow_credentials;
  return c;
}

// The start-up lines that say what runs: device, dtypes, threads, batch limits, the KV pool and
// max_model_len, all as the server will use them (max_model_len after any lowering to the pool).
void log_engine(const LoadedEngine& m, const EngineConfig& config, const ThreadPool& pool,
                int64_t max_model_len) {
  Engine& engine = *m.engine;
  const BlockManager& bm = engine.block_manager();
  const bool cpu = m.device == Device::kCPU;
  const DType kv_dt = config.kv_cache_dtype.value_or(cpu ? DType::kF32 : DType::kBF16);
  std::string kv_dtype = kv_dt == DType::kF8E4M3 ? "fp8_e4m3" : dtype_name(kv_dt);
  for (char& c : kv_dtype) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const int64_t tokens = static_cast<int64_t>(bm.num_blocks()) * bm.block_size();
  const double mib = static_cast<double>(engine.runner().kv_bytes_per_block(bm.block_size())) *
                     static_cast<double>(bm.num_blocks()) / (1024.0 * 1024.0);
  NS_LOG(INFO)
          .field("device", cpu ? "cpu" : "cuda")
          .field("dtype", cpu ? "float32" : "bfloat16")
          .field("kv_cache_dtype", kv_dtype)
          .field("threads", pool.num_threads())
          .field("max_num_seqs", config.max_num_seqs)
          .field("max_num_batched_tokens", config.max_num_batched_tokens)
          .field("block_size", bm.block_size())
          .field("kv_cache_blocks", bm.num_blocks())
          .field("kv_cache_tokens", tokens)
          .field("max_model_len", max_model_len)
      << "engine";
  char line[256];
  std::snprintf(line, sizeof(line),
                "KV cache: %d blocks x %d tokens = %lld tokens (%.1f MiB); up to %.2f sequences of "
                "max_model_len %lld; prefix caching %s",
                bm.num_blocks(), bm.block_size(), static_cast<long long>(tokens), mib,
                static_cast<double>(tokens) / static_cast<double>(max_model_len),
                static_cast<long long>(max_model_len), bm.prefix_caching() ? "on" : "off");
  NS_LOG(INFO) << line << "; " << engine.preemption_line();
}

// The chat template chats render with: --chat-template, else the model's own. A model without
// one, or whose template does not compile, still serves completions; its chat requests get a
// 400 saying why (vLLM refuses them too rather than guessing a format).
StatusOr<ChatTemplate> chat_template_of(const Tokenizer& tokenizer, const std::string& override) {
  auto t = ChatTemplate::of_model_or_override(tokenizer, override);
  if (!t.ok()) {
    NS_LOG(WARNING) << "chat requests will be refused: " << t.status().message();
  }
  return t;
}

// SIGINT and SIGTERM, blocked in every thread and taken by one of their own.
// Before the server is ready nothing is in flight, so a signal exits at once;
// after, the first asks for a graceful stop (wait()) and a second exits at once.
class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    // Every thread started from here inherits the mask.
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    thread_ = std::thread([this] { run(); });
  }
  ~StopSignals() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
  }
  void set_ready() {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = true;
  }
  // Blocks until the first stop signal; returns it.
  int wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  void run() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      if (quit_) return;
      if (!ready_ || signal_ != 0) {
        std::fprintf(stderr, "nanoserve serve: signal %d%s: exiting now\n", sig,
                     ready_ ? " again" : " during start-up");
        std::_Exit(128 + sig);
      }
      signal_ = sig;
      cv_.notify_all();
    }
  }

  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool ready_ = false;
  bool quit_ = false;
  int signal_ = 0;
  std::thread thread_;
};

// The periodic statistics line's interval: vLLM's VLLM_LOG_STATS_INTERVAL (seconds), else 10.
double log_stats_interval_s() {
  constexpr double kDefault = 10.0;
  const char* env = std::getenv("VLLM_LOG_STATS_INTERVAL");
  if (env == nullptr || *env == '\0') return kDefault;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    NS_LOG(WARNING) << "VLLM_LOG_STATS_INTERVAL='" << env << "' is not a positive number of seconds; using "
                    << kDefault;
    return kDefault;
  }
  return v;
}

// A host as it goes into a URL: an IPv6 address in brackets (RFC 3986).
std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

// Thousands of connections need as many descriptors: take the hard limit.
void raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

int run_serve(const ServeOptions& opt) {
  // Every flag is checked, against the model's config too, before anything
  // starts: a bad value is a usage error naming it, never a later abort.
  auto config = engine_config_from_flags(opt.engine);
  StatusOr<ModelSpec> spec =
      config.ok() ? model_spec_from_flags(opt.engine, opt.model) : StatusOr<ModelSpec>(config.status());
  Status checked = spec.ok() ? check_flags_against_model(opt.engine, *spec) : spec.status();
  server::SamplingDefaults sampling_defaults;
  if (checked.ok()) checked = apply_vllm_serve_flags(opt.vllm, spec->path, &*config, &sampling_defaults);
  StatusOr<server::CorsOptions> cors = cors_options(opt);
  if (checked.ok() && !cors.ok()) checked = cors.status();
  if (!checked.ok()) {
    std::fprintf(stderr, "nanoserve serve: %s\n", checked.to_string().c_str());
    return 2;
  }

  StopSignals signals;
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
  raise_open_file_limit();

  std::string api_key = opt.api_key;
  if (api_key.empty()) {
    if (const char* env = std::getenv("NANOSERVE_API_KEY")) api_key = env;
  }
  const std::string& model_path = spec->path;
  // vLLM's several names: each is answered; the first names the model in responses and metrics.
  std::string served_name = opt.served_model_names.empty() ? "" : opt.served_model_names[0];
  std::vector<std::string> aliases;
  for (size_t i = 1; i < opt.served_model_names.size(); ++i) {
    const std::string& n = opt.served_model_names[i];
    if (n != served_name && std::find(aliases.begin(), aliases.end(), n) == aliases.end())
      aliases.push_back(n);
  }
  if (served_name.empty() && !spec->hub_id.empty()) served_name = spec->hub_id;  // as vLLM names it
  if (served_name.empty()) {
    std::filesystem::path p(model_path);
    if (p.filename().empty()) p = p.parent_path();  // "models/hf/": the folder's name
    served_name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
  }

  server::ServerMetrics metrics(served_name, opt.metrics_prefix);
  if (config->speculative.enabled()) metrics.enable_spec_decode(config->speculative.num_speculative_tokens);
  server::ParseBudget::Options parse_budget;
  parse_budget.capacity_bytes = static_cast<size_t>(opt.max_parse_bytes);
  server::Api api(served_name, api_key, metrics, parse_budget, opt.metrics_require_key);
  server::ToolOptions tool_options;
  if (!opt.tool_call_parser.empty()) tool_options.parser = server::tool_format_named(opt.tool_call_parser);
  tool_options.enable_auto_tool_choice = opt.enable_auto_tool_choice;
  api.set_output_options(tool_options, !opt.reasoning_parser.empty());
  api.set_model_aliases(aliases);
  api.set_sampling_defaults(sampling_defaults);
  api.set_version(NANOSERVE_VERSION);
  api.set_model_root(spec->hub_id.empty() ? model_path : spec->hub_id);
  api.set_frontend(!opt.disable_frontend);
  server::HttpOptions http_opts;
  http_opts.host = opt.host;
  http_opts.port = opt.port;
  http_opts.num_threads = opt.http_threads;
  http_opts.cors = *cors;
  http_opts.log_requests = !opt.vllm.disable_log_requests;
  server::HttpServer http(api, http_opts);
  auto port = http.bind();
  if (!port.ok()) {
    std::fprintf(stderr, "nanoserve serve: %s\n", port.status().to_string().c_str());
    return 1;
  }
  std::thread http_thread([&] { http.serve(); });
  const std::string host = url_host(opt.host);
  std::printf("nanoserve: listening on http://%s:%d (model loading)\n", host.c_str(), *port);
  std::fflush(stdout);

  ThreadPool pool(opt.engine.threads);
  StatusOr<LoadedEngine> loaded = load_engine(*spec, *config, pool);
  if (!loaded.ok()) {
    std::fprintf(stderr, "nanoserve serve: %s\n", loaded.status().to_string().c_str());
    http.stop();
    http_thread.join();
    return 1;
  }
  LoadedEngine& m = *loaded;

  StatusOr<ChatTemplate> chat_template = chat_template_of(*m.tokenizer, opt.chat_template);
  if (!opt.chat_template.empty() && !chat_template.ok()) {
    std::fprintf(stderr, "nanoserve serve: %s\n", chat_template.status().to_string().c_str());
    http.stop();
    http_thread.join();
    return 1;
  }
  server::TokenizerCodec codec(*m.tokenizer, std::move(chat_template));
  server::EngineLoop::Options loop_options;
  loop_options.max_waiting = opt.max_waiting_requests;
  loop_options.log_stats_interval_s = opt.vllm.disable_log_stats ? 0.0 : log_stats_interval_s();
  server::EngineLoop loop(*m.engine, metrics, loop_options);
  loop.start();
  server::ProtocolLimits limits;
  limits.max_model_len = m.engine->max_model_len();
  if (const int64_t capacity = m.engine->kv_capacity_tokens(); capacity < limits.max_model_len) {
    // One sequence must fit the pool, or the engine would refuse it only after admission.
    NS_LOG(WARNING) << "the KV cache holds " << capacity << " tokens, fewer than max_model_len "
                    << limits.max_model_len << "; requests are limited to " << capacity;
    limits.max_model_len = capacity;
  }
  limits.max_num_seqs = config->max_num_seqs;
  limits.vocab_size = codec.vocab_size();
  // A stop signal shuts down in order from here, before /health can turn 200; "ready" is said
  // once requests are taken (a client that waits for the line may send at once).
  signals.set_ready();
  api.set_ready(codec, loop, limits);
  log_engine(m, *config, pool, limits.max_model_len);
  std::printf("nanoserve: ready, serving '%s' (max_model_len %lld) on http://%s:%d\n", served_name.c_str(),
              static_cast<long long>(limits.max_model_len), host.c_str(), *port);
  std::fflush(stdout);

  const int sig = signals.wait();
  NS_LOG(INFO) << "signal " << sig << ": shutting down";
  // The engine first: every request in flight ends with an error event (streams) or a 503,
  // which HTTP still delivers; then HTTP stops accepting and drains.
  loop.stop();
  http.stop();
  http_thread.join();
  return 0;
}

}  // namespace

CommandRun add_serve_command(CLI::App& app) {
  auto opt = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, metrics)");
  add_model_arg(cmd, opt->model_arg,
                "GGUF file or Hugging Face folder (default: the bundled SmolLM2-135M-Instruct)");
  cmd->add_option("--host", opt->host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", opt->port, "port; 0 picks a free one (printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", opt->api_key,
                  "require 'Authorization: Bearer KEY' (or env NANOSERVE_API_KEY)");
  cmd->add_flag("--metrics-require-key", opt->metrics_require_key,
                "/metrics needs the API key too (public by default, as in vLLM)");
  cmd->add_option("--served-model-name", opt->served_model_names,
                  "model names in the API (default: the file's stem or the hub id); each is answered, the "
                  "first names the model in responses and metrics")
      ->expected(1, -1);
  add_engine_flags(cmd, opt->engine);
  add_vllm_serve_flags(cmd, opt->vllm);
  cmd->add_option("--chat-template", opt->chat_template,
                  "Chat template to use instead of the model's: a Jinja file, or the template text itself");
  cmd->add_option("--max-waiting-requests", opt->max_waiting_requests,
                  "sequences that may wait before requests get 429")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--http-threads", opt->http_threads,
                  "HTTP I/O threads; event-driven, each serves any number of connections")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  // The smallest budget still admits one body of the largest size HTTP accepts, beside the small reserve.
  const auto min_parse_bytes = static_cast<int64_t>(server::HttpOptions{}.max_body_bytes +
                                                    server::ParseBudget::Options{}.small_reserve_bytes);
  cmd->add_option("--tool-call-parser", opt->tool_call_parser,
                  "format of tool calls: hermes (also qwen), llama3_json, mistral; default: the chat "
                  "template's, else hermes")
      ->check([](const std::string& v) {
        return server::tool_format_named(v) ? std::string()
                                            : "unknown parser '" + v + "' (hermes, llama3_json, mistral)";
      });
  cmd->add_flag("--enable-auto-tool-choice", opt->enable_auto_tool_choice,
                "allow tool_choice \"auto\": the model decides; a call it opens is decoded under its schema");
  cmd->add_option("--reasoning-parser", opt->reasoning_parser,
                  "split <think>...</think> into reasoning_content: deepseek_r1, qwen3")
      ->check([](const std::string& v) {
        return server::reasoning_format_named(v) ? std::string()
                                                 : "unknown parser '" + v + "' (deepseek_r1, qwen3)";
      });
  cmd->add_option("--log-format", opt->log_format,
                  "text (default) or json: one JSON object per line, for log shippers")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option(
         "--metrics-prefix", opt->metrics_prefix,
         "the prefix of the metric names; vllm publishes as vLLM does (vllm:...), for its dashboards")
      ->check([](const std::string& v) {
        bool ok = !v.empty() && !std::isdigit(static_cast<unsigned char>(v[0]));
        for (char c : v) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
        return ok ? std::string() : "a metric prefix is letters, digits and '_', not starting with a digit";
      })
      ->capture_default_str();
  cmd->add_option("--allowed-origins", opt->allowed_origins,
                  "CORS: origins allowed, a JSON list as vLLM takes it (or comma-separated)")
      ->capture_default_str();
  cmd->add_option("--allowed-methods", opt->allowed_methods, "CORS: methods allowed (a JSON list)")
      ->capture_default_str();
  cmd->add_option("--allowed-headers", opt->allowed_headers, "CORS: request headers allowed (a JSON list)")
      ->capture_default_str();
  cmd->add_flag("--allow-credentials", opt->allow_credentials, "CORS: allow credentials (cookies)");
  cmd->add_flag("--disable-frontend", opt->disable_frontend, "no chat page at / (the API alone)");
  cmd->add_option("--max-parse-bytes", opt->max_parse_bytes,
                  "request-body bytes parsed at once (parsing costs up to 40x the body); "
                  "a body that finds no room within 1 s gets 503")
      ->check(CLI::Range(min_parse_bytes, int64_t{1} << 40))
      ->capture_default_str();
  return [opt] {
    set_log_format(opt->log_format == "json" ? LogFormat::kJson : LogFormat::kText);
    StatusOr<std::string> model = resolve_model_arg(opt->model_arg);
    if (!model.ok()) {
      std::fprintf(stderr, "nanoserve serve: %s\n", model.status().message().c_str());
      return 2;
    }
    opt->model = *model;
    return run_serve(*opt);
  };
}

}  // namespace nanoserve::cli
