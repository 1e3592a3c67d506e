// nanoserve run-batch: an OpenAI batch file through the engine, as `vllm run-batch` runs one.
//
// Each line of the input is {"custom_id", "method": "POST", "url", "body"} for
// /v1/chat/completions or /v1/completions. The body goes through the server's
// own Api (server/api.h): the same parsing, checks, engine loop and response
// bodies as `nanoserve serve`. Each line gets one output line, in input order:
//   {"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}
// and a line that is no request (not JSON, no custom_id, another url) gets
//   {"id", "custom_id" (or null), "response": null, "error": {"code", "message"}}.
//
// Memory is bounded: at most --max-in-flight lines are read ahead of the
// oldest unwritten one, and each output line is flushed as soon as the lines
// before it are written. Resuming: the output's complete lines are checked
// against the input's first lines (custom_id by custom_id) and skipped; a
// torn last line is cut off.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/load_engine.h"
#include "server/api.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/tokenizer_codec.h"
#include "template/chat_template.h"

namespace nanoserve::cli {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;  // records keep OpenAI's field order

struct RunBatchOptions {
  ModelArg model_arg;
  std::string model;
  std::string input;
  std::string output;
  std::string served_model_name;
  int max_in_flight = 256;
  EngineFlags engine;
};

// One input line on its way to the output.
struct Pending {
  int64_t line = 0;                            // 1-based, in the input
  json custom_id;                              // null when the line had none
  std::unique_ptr<server::GenerationJob> job;  // null once the record is made
  std::string record;                          // the output line, once made
  bool ok = false;                             // a 200 response
};

std::string batch_request_id() {
  static std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof(buf), "batch_req_%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

std::string error_record(const json& custom_id, int64_t line, const std::string& code,
                         const std::string& message) {
  ordered_json r{{"id", batch_request_id()},
                 {"custom_id", custom_id},
                 {"response", nullptr},
                 {"error", {{"code", code}, {"message", "line " + std::to_string(line) + ": " + message}}}};
  return r.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string response_record(const json& custom_id, int status, const std::string& body) {
  ordered_json parsed = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string request_id = parsed.is_object() && parsed.contains("id") && parsed["id"].is_string()
                               ? parsed["id"].get<std::string>()
                               : batch_request_id();
  ordered_json r{
      {"id", batch_request_id()},
      {"custom_id", custom_id},
      {"response", {{"status_code", status}, {"request_id", request_id}, {"body", std::move(parsed)}}},
      {"error", nullptr}};
  return r.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// The custom_id of an input line, for resuming: null when it has none or is not JSON.
json custom_id_of(const std::string& line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("custom_id")) return j["custom_id"];
  return nullptr;
}

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

// Starts one input line: an error record at once, or a job in the engine.
Pending start(server::Api& api, const std::string& text, int64_t line) {
  Pending p;
  p.line = line;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    p.record = error_record(nullptr, line, "invalid_json", "not a JSON object");
    return p;
  }
  if (!j.is_object()) {
    p.record = error_record(nullptr, line, "invalid_request", "a request line is a JSON object");
    return p;
  }
  if (j.contains("custom_id")) p.custom_id = j["custom_id"];
  auto fail = [&](const std::string& message) {
    p.record = error_record(p.custom_id, line, "invalid_request", message);
    return std::move(p);
  };
  if (!p.custom_id.is_string()) return fail("'custom_id' must be a string");
  if (!j.contains("method") || j["method"] != "POST") return fail("'method' must be \"POST\"");
  const json url = j.value("url", json());
  server::Endpoint endpoint;
  if (url == "/v1/chat/completions") {
    endpoint = server::Endpoint::kChat;
  } else if (url == "/v1/completions") {
    endpoint = server::Endpoint::kCompletion;
  } else {
    return fail("'url' must be \"/v1/chat/completions\" or \"/v1/completions\"");
  }
  if (!j.contains("body") || !j["body"].is_object()) return fail("'body' must be a JSON object");
  if (j["body"].value("stream", false) == true) return fail("'body.stream' must be false in a batch");
  server::Outcome out = api.generate(endpoint, j["body"].dump());
  if (auto* reply = std::get_if<server::Reply>(&out)) {
    p.record = response_record(p.custom_id, reply->status, reply->body);
    p.ok = reply->status == 200;
  } else {
    p.job = std::move(std::get<std::unique_ptr<server::GenerationJob>>(out));
  }
  return p;
}

// Reads the output's complete records, checks them against the input's first lines, and cuts
// a torn last line. Returns how many input lines are done, or an error.
StatusOr<int64_t> resume(const std::string& input, const std::string& output) {
  std::error_code ec;
  if (!std::filesystem::exists(output, ec)) return int64_t{0};
  std::ifstream out(output, std::ios::binary);
  if (!out) return invalid_argument("cannot read the output '" + output + "'");
  std::ifstream in(input, std::ios::binary);
  std::string rec, line;
  int64_t done = 0, good_bytes = 0, bytes = 0, line_no = 0;
  while (std::getline(out, rec)) {
    const bool complete = !out.eof();  // a last line without its newline was torn by a stop
    bytes += static_cast<int64_t>(rec.size()) + (complete ? 1 : 0);
    json r = json::parse(rec, nullptr, false);
    if (!complete || !r.is_object() || !r.contains("custom_id")) break;
    do {
      if (!std::getline(in, line))
        return invalid_argument("the output '" + output + "' has more records than the input has lines");
      ++line_no;
    } while (blank(line));
    if (custom_id_of(line) != r["custom_id"]) {
      return invalid_argument("the output's record " + std::to_string(done + 1) + " is for custom_id " +
                              r["custom_id"].dump() + ", but input line " + std::to_string(line_no) + " is " +
                              custom_id_of(line).dump() + ": '" + output +
                              "' holds the results of another input");
    }
    ++done;
    good_bytes = bytes;
  }
  out.close();
  if (std::filesystem::file_size(output, ec) != static_cast<uintmax_t>(good_bytes)) {
    NS_LOG(WARNING) << "run-batch: cutting a torn last record off '" << output << "'";
    std::filesystem::resize_file(output, static_cast<uintmax_t>(good_bytes), ec);
    if (ec) return invalid_argument("cannot cut the torn last record of '" + output + "': " + ec.message());
  }
  return done;
}

int run_batch(const RunBatchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  if (std::filesystem::equivalent(opt.input, opt.output, ec)) {
    std::fprintf(stderr, "nanoserve run-batch: -o must not be the input file\n");
    return 2;
  }
  std::ifstream in(opt.input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "nanoserve run-batch: -i: cannot read '%s'\n", opt.input.c_str());
    return 2;
  }
  auto config = engine_config_from_flags(opt.engine);
  StatusOr<ModelSpec> spec =
      config.ok() ? model_spec_from_flags(opt.engine, opt.model) : StatusOr<ModelSpec>(config.status());
  Status checked = spec.ok() ? check_flags_against_model(opt.engine, *spec) : spec.status();
  StatusOr<int64_t> done = checked.ok() ? resume(opt.input, opt.output) : StatusOr<int64_t>(checked);
  if (!done.ok()) {
    std::fprintf(stderr, "nanoserve run-batch: %s\n", done.status().message().c_str());
    return 2;
  }
  std::FILE* out = std::fopen(opt.output.c_str(), "ab");
  if (out == nullptr) {
    std::fprintf(stderr, "nanoserve run-batch: -o: cannot write '%s'\n", opt.output.c_str());
    return 2;
  }

  std::string served_name = opt.served_model_name;
  if (served_name.empty()) {
    std::filesystem::path p(spec->path);
    if (p.filename().empty()) p = p.parent_path();
    served_name = std::filesystem::is_directory(p, ec) ? p.filename().string() : p.stem().string();
  }
  ThreadPool pool(opt.engine.threads);
  StatusOr<LoadedEngine> loaded = load_engine(*spec, *config, pool);
  if (!loaded.ok()) {
    std::fprintf(stderr, "nanoserve run-batch: %s\n", loaded.status().to_string().c_str());
    std::fclose(out);
    return 1;
  }
  LoadedEngine& m = *loaded;
  auto chat_template = ChatTemplate::of_model_or_override(*m.tokenizer, "");
  server::TokenizerCodec codec(*m.tokenizer, std::move(chat_template));
  server::ServerMetrics metrics(served_name);
  server::Api api(served_name, "", metrics);
  // Every line read ahead may wait in the engine.
  server::EngineLoop loop(*m.engine, metrics,
                          server::EngineLoop::Options{int64_t{opt.max_in_flight} * 16 + 256});
  loop.start();
  server::ProtocolLimits limits;
  limits.max_model_len = std::min(m.engine->max_model_len(), m.engine->kv_capacity_tokens());
  limits.max_num_seqs = config->max_num_seqs;
  limits.vocab_size = codec.vocab_size();
  api.set_ready(codec, loop, limits);

  // Wakes the writer when any job has news (a job's on_ready runs on the engine thread).
  std::mutex mu;
  std::condition_variable cv;
  bool news = false;
  auto wake = [&] {
    std::lock_guard<std::mutex> lock(mu);
    news = true;
    cv.notify_one();
  };

  std::deque<Pending> window;
  std::string text;
  int64_t line_no = 0, skipped = 0, written = 0, errors = 0;
  size_t max_window = 0;  // the most lines held at once (read, not yet written)
  bool eof = false;
  while (!eof || !window.empty()) {
    // Read ahead up to the window.
    while (!eof && static_cast<int>(window.size()) < opt.max_in_flight) {
      if (!std::getline(in, text)) {
        eof = true;
        break;
      }
      ++line_no;
      if (blank(text)) continue;
      if (skipped < *done) {
        ++skipped;
        continue;
      }
      window.push_back(start(api, text, line_no));
      max_window = std::max(max_window, window.size());
      if (window.back().job) window.back().job->set_on_ready(wake);
    }
    // Advance every job; write the finished prefix.
    for (Pending& p : window) {
      if (p.job && p.job->poll(nullptr, std::chrono::milliseconds(0))) {
        p.record = response_record(p.custom_id, p.job->final_status(), p.job->final_body());
        p.ok = p.job->final_status() == 200;
        p.job.reset();
      }
    }
    bool wrote = false;
    while (!window.empty() && !window.front().job) {
      Pending& p = window.front();
      if (!p.ok) ++errors;
      p.record.push_back('\n');
      std::fwrite(p.record.data(), 1, p.record.size(), out);
      window.pop_front();
      ++written;
      wrote = true;
    }
    if (wrote) std::fflush(out);
    if (!window.empty() && window.front().job &&
        (eof || static_cast<int>(window.size()) >= opt.max_in_flight)) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return news; });
      news = false;
    }
  }
  const bool write_failed = std::ferror(out) != 0;
  std::fclose(out);
  loop.stop();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr,
               "nanoserve run-batch: %lld written (%lld with an error), %lld already in '%s' skipped, "
               "at most %zu lines held at once, %.1f s\n",
               static_cast<long long>(written), static_cast<long long>(errors),
               static_cast<long long>(skipped), opt.output.c_str(), max_window, secs);
  if (skipped < *done) {
    std::fprintf(stderr, "nanoserve run-batch: the output holds %lld records, the input only %lld lines\n",
                 static_cast<long long>(*done), static_cast<long long>(skipped));
    return 1;
  }
  return write_failed ? 1 : 0;
}

}  // namespace

CommandRun add_run_batch_command(CLI::App& app) {
  auto opt = std::make_shared<RunBatchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run-batch", "run an OpenAI batch file (JSONL of /v1/chat/completions and /v1/completions requests)");
  add_model_arg(cmd, opt->model_arg,
                "GGUF file or Hugging Face folder (default: the bundled SmolLM2-135M-Instruct)");
  cmd->add_option("-i,--input-file", opt->input, "the batch: one request per line (JSONL)")->required();
  cmd->add_option("-o,--output-file", opt->output,
                  "the results, one per input line in order; lines already there are skipped (resume)")
      ->required();
  cmd->add_option("--served-model-name", opt->served_model_name,
                  "the model name request bodies may give (default: the file stem)");
  cmd->add_option("--max-in-flight", opt->max_in_flight,
                  "input lines read ahead of the oldest unwritten result (bounds memory)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  add_engine_flags(cmd, opt->engine);
  return [opt] {
    StatusOr<std::string> model = resolve_model_arg(opt->model_arg);
    if (!model.ok()) {
      std::fprintf(stderr, "nanoserve run-batch: %s\n", model.status().message().c_str());
      return 2;
    }
    opt->model = *model;
    return run_batch(*opt);
  };
}

}  // namespace nanoserve::cli
