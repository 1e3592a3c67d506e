// nanoserve serve: the OpenAI-compatible HTTP server.
//
// The HTTP server comes up first (so /health answers 503 while the model
// loads), then the model, the engine and its thread. SIGINT / SIGTERM stop
// the engine loop (in-flight requests end with an error event) and then HTTP.

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/llama_runner.h"
#include "server/api.h"
#include "server/engine_loop.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/tokenizer_codec.h"
#include "tokenizer/chat_template.h"

namespace nanoserve::cli {

namespace {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  int64_t max_waiting_requests = 256;
  int http_threads = 128;
  int64_t max_parse_bytes = int64_t{16} << 20;
  EngineFlags engine;
};

// The model's own chat template when it is one we render, else ChatML.
ChatTemplate chat_template_of(const Tokenizer& tokenizer) {
  if (tokenizer.chat_template().empty()) return ChatTemplate::chatml();
  auto parsed = ChatTemplate::parse(tokenizer.chat_template());
  if (parsed.ok()) return std::move(*parsed);
  NS_LOG(WARNING) << "chat template not recognised (" << parsed.status().message() << "); using ChatML";
  return ChatTemplate::chatml();
}

int run_serve(const ServeOptions& opt) {
  // Every thread started from here inherits the mask; one thread waits for the signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal

  std::string api_key = opt.api_key;
  if (api_key.empty()) {
    if (const char* env = std::getenv("NANOSERVE_API_KEY")) api_key = env;
  }
  const std::string model_path = opt.model.empty() ? default_model_path() : opt.model;
  std::string served_name = opt.served_model_name;
  if (served_name.empty()) {
    std::filesystem::path p(model_path);
    if (p.filename().empty()) p = p.parent_path();  // "models/hf/": the folder's name
    served_name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
  }

  server::ServerMetrics metrics(served_name);
  server::ParseBudget::Options parse_budget;
  parse_budget.capacity_bytes = static_cast<size_t>(opt.max_parse_bytes);
  server::Api api(served_name, api_key, metrics, parse_budget);
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
  std::printf("nanoserve: listening on http://%s:%d (model loading)\n", opt.host.c_str(), *port);
  std::fflush(stdout);

  auto config = engine_config_from_flags(opt.engine);
  ThreadPool pool(opt.engine.threads);
  StatusOr<LoadedEngine> loaded =
      config.ok() ? load_engine(*model_spec_from_flags(opt.engine, opt.model), *config, pool)
                  : StatusOr<LoadedEngine>(config.status());
  if (!loaded.ok()) {
    std::fprintf(stderr, "nanoserve serve: %s\n", loaded.status().to_string().c_str());
    http.stop();
    http_thread.join();
    return 1;
  }
  LoadedEngine& m = *loaded;

  server::TokenizerCodec codec(*m.tokenizer, chat_template_of(*m.tokenizer));
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
  api.set_ready(codec, loop, limits);
  NS_LOG(INFO) << m.engine->capacity_line();
  std::printf("nanoserve: ready, serving '%s' (max_model_len %lld) on http://%s:%d\n", served_name.c_str(),
              static_cast<long long>(limits.max_model_len), opt.host.c_str(), *port);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  NS_LOG(INFO) << "signal " << sig << ": shutting down";
  loop.stop();
  http.stop();
  http_thread.join();
  return 0;
}

}  // namespace

CommandRun add_serve_command(CLI::App& app) {
  auto opt = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat, completions, metrics)");
  cmd->add_option("-m,--model", opt->model,
                  "GGUF file or Hugging Face folder (default: the bundled SmolLM2-135M-Instruct)");
  cmd->add_option("--host", opt->host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", opt->port, "port; 0 picks a free one (printed)")->capture_default_str();
  cmd->add_option("--api-key", opt->api_key,
                  "require 'Authorization: Bearer KEY' (or env NANOSERVE_API_KEY)");
  cmd->add_option("--served-model-name", opt->served_model_name,
                  "model name in the API (default: file stem)");
  add_engine_flags(cmd, opt->engine);
  cmd->add_option("--max-waiting-requests", opt->max_waiting_requests,
                  "sequences that may wait before requests get 429")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--http-threads", opt->http_threads, "HTTP worker threads (caps concurrent connections)")
      ->check(CLI::Range(4, 4096))
      ->capture_default_str();
  // The smallest budget still admits one body of the largest size HTTP accepts, beside the small reserve.
  const auto min_parse_bytes = static_cast<int64_t>(server::HttpOptions{}.max_body_bytes +
                                                    server::ParseBudget::Options{}.small_reserve_bytes);
  cmd->add_option("--max-parse-bytes", opt->max_parse_bytes,
                  "request-body bytes parsed at once (parsing costs up to 40x the body); "
                  "a body that finds no room within 1 s gets 503")
      ->check(CLI::Range(min_parse_bytes, int64_t{1} << 40))
      ->capture_default_str();
  return [opt] { return run_serve(*opt); };
}

}  // namespace nanoserve::cli
