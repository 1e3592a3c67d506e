// nanoserve serve: the OpenAI-compatible HTTP server.
//
// The HTTP server comes up first (so /health answers 503 while the model
// loads), then the model, the engine and its thread. SIGINT / SIGTERM stop
// the engine loop (in-flight requests end with an error event) and then HTTP;
// a start-up error exits non-zero at once.

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/vllm_flags.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/load_engine.h"
#include "server/api.h"
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
};

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
  if (checked.ok()) checked = apply_vllm_serve_flags(opt.vllm, spec->path, &*config);
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
  std::string served_name = opt.served_model_names.empty() ? "" : opt.served_model_names[0];
  if (opt.served_model_names.size() > 1) {
    std::string rest;
    for (size_t i = 1; i < opt.served_model_names.size(); ++i)
      rest += (i > 1 ? "', '" : "") + opt.served_model_names[i];
    NS_LOG(WARNING) << "--served-model-name: the API serves the first name, '" << served_name
                    << "'; requests naming '" << rest
                    << "' get 404 (answering several names is not there yet)";
  }
  if (served_name.empty() && !spec->hub_id.empty()) served_name = spec->hub_id;  // as vLLM names it
  if (served_name.empty()) {
    std::filesystem::path p(model_path);
    if (p.filename().empty()) p = p.parent_path();  // "models/hf/": the folder's name
    served_name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
  }

  server::ServerMetrics metrics(served_name);
  if (config->speculative.enabled()) metrics.enable_spec_decode(config->speculative.num_speculative_tokens);
  server::ParseBudget::Options parse_budget;
  parse_budget.capacity_bytes = static_cast<size_t>(opt.max_parse_bytes);
  server::Api api(served_name, api_key, metrics, parse_budget, opt.metrics_require_key);
  server::ToolOptions tool_options;
  if (!opt.tool_call_parser.empty()) tool_options.parser = server::tool_format_named(opt.tool_call_parser);
  tool_options.enable_auto_tool_choice = opt.enable_auto_tool_choice;
  api.set_output_options(tool_options, !opt.reasoning_parser.empty());
  server::HttpOptions http_opts;
  http_opts.host = opt.host;
  http_opts.port = opt.port;
  http_opts.num_threads = opt.http_threads;
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
  server::EngineLoop loop(*m.engine, metrics, server::EngineLoop::Options{opt.max_waiting_requests});
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
  NS_LOG(INFO) << m.engine->capacity_line();
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
                  "model name in the API (default: file stem); vLLM's several names are taken, the first "
                  "is the one served")
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
  cmd->add_option("--max-parse-bytes", opt->max_parse_bytes,
                  "request-body bytes parsed at once (parsing costs up to 40x the body); "
                  "a body that finds no room within 1 s gets 503")
      ->check(CLI::Range(min_parse_bytes, int64_t{1} << 40))
      ->capture_default_str();
  return [opt] {
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
