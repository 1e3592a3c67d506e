#pragma once
// The OpenAI-compatible API, independent of the HTTP library: each endpoint
// takes the request body and returns status + body, or (generation) a job
// the transport drives. http_connection.cc maps routes onto these.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/engine_loop.h"
#include "server/generation.h"
#include "server/metrics.h"
#include "server/model_codec.h"
#include "server/parse_budget.h"
#include "server/protocol.h"
#include "server/sampling_defaults.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace nanoserve::server {

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

// The routes the server answers. The transport finds the route by path first
// (unknown: 404, before any key check), then checks the method (405 with Allow).
enum class Route {
  kHealth,
  kVersion,
  kModels,
  kModel,  // GET /v1/models/{id}
  kMetrics,
  kTokenize,
  kDetokenize,
  kChat,
  kCompletion,
  kMessages,
  kResponses,
  kChatPage  // GET /: the chat page (chat_page.h), unless --disable-frontend
};
struct RouteSpec {
  Route route;
  std::string_view path;
  std::string_view method;  // "GET" (HEAD too) or "POST"
};
// The route at `path` (the target without its query), or nullptr. /v1/models/ID is kModel.
const RouteSpec* find_route(std::string_view path);
// The model id of a /v1/models/ID path, percent-decoded (OpenAI's clients send an org/name id
// as it is, others escape its slash); nullopt when the escapes are malformed.
std::optional<std::string> model_id_of_path(std::string_view path);

// A tool call's id: "call_" + 24 letters and digits, or (mistral) 9 of them.
std::string new_call_id(bool mistral);

using Outcome = std::variant<Reply, std::unique_ptr<GenerationJob>>;

class Api {
 public:
  // metrics_require_key: /metrics needs the key too (it is public by default, as in vLLM).
  Api(std::string served_model_name, std::string api_key, ServerMetrics& metrics,
      ParseBudget::Options parse_budget = {}, bool metrics_require_key = false);

  // Tool calls and reasoning output (serve's --tool-call-parser, --enable-auto-tool-choice,
  // --reasoning-parser); before set_ready.
  void set_output_options(const ToolOptions& tools, bool reasoning) {
    tool_options_ = tools;
    reasoning_ = reasoning;
  }

  // The served model's other names (--served-model-name A B ...): requests naming them are
  // answered as the first's, and /v1/models lists them all. Before set_ready.
  void set_model_aliases(std::vector<std::string> aliases) { aliases_ = std::move(aliases); }
  // Sampling defaults for the fields a request omits (--generation-config). Before set_ready.
  void set_sampling_defaults(const SamplingDefaults& defaults) { sampling_defaults_ = defaults; }
  // What GET /version reports.
  void set_version(std::string version) { version_ = std::move(version); }
  // The model cards' `root`: what was loaded (a path or hub id), as vLLM reports it.
  void set_model_root(std::string root) { model_root_ = std::move(root); }

  // Once the model is loaded: from here on the generation endpoints work and /health says 200.
  void set_ready(const ModelCodec& codec, EngineLoop& loop, const ProtocolLimits& limits);
  bool ready() const { return ready_.load(std::memory_order_acquire); }

  // True when the route needs the bearer key: with a key, every route but /health, /version
  // and (unless metrics_require_key) /metrics. /v1/models needs it, as in vLLM (every /v1 path).
  bool needs_auth(Route route) const;
  bool authorized(std::string_view authorization_header) const;
  // Anthropic's clients send the key as `x-api-key: KEY`.
  bool key_authorized(std::string_view x_api_key_header) const;

  // Runs the route's endpoint on `body` (`path`: the target without its query, which kModel
  // reads). May block (parse budget, tokenization): the transport calls it off its I/O threads.
  Outcome handle(Route route, std::string_view body, std::string_view path = {});

  // The chat page at / (on by default; serve's --disable-frontend turns it off: 404).
  void set_frontend(bool enabled) { frontend_ = enabled; }
  Reply chat_page() const;

  Reply health() const;
  Reply version() const;
  Reply models() const;
  Reply model(std::string_view path) const;  // GET /v1/models/{id}
  Reply metrics() const;
  Reply tokenize(std::string_view body);
  Reply detokenize(std::string_view body);

  // POST /v1/messages (Anthropic): the chat path with Anthropic's request, reply and errors.
  Outcome messages(std::string_view body);
  // POST /v1/responses (OpenAI Responses API, stateless).
  Outcome responses(std::string_view body);

  // A Reply when the request fails before it reaches the engine, else the job.
  std::variant<Reply, std::unique_ptr<GenerationJob>> generate(Endpoint endpoint, std::string_view body);

  static Reply error_reply(const ApiError& e) { return Reply{e.http_status, e.body()}; }

 private:
  std::string new_id(Endpoint endpoint);
  nlohmann::json model_json(const std::string& id) const;
  // Runs `parse` on the body while holding its bytes of the parse budget; the
  // 503 error when the budget stayed full.
  template <typename T>
  Parsed<T> parse_metered(std::string_view body, Parsed<T> (*parse)(std::string_view, const ProtocolLimits&));

  const std::string served_model_name_;
  std::vector<std::string> aliases_;
  SamplingDefaults sampling_defaults_;
  std::string version_ = "unknown";
  std::string model_root_;  // empty: the first served name
  const std::string api_key_;
  const bool metrics_require_key_;
  const int64_t created_;
  ServerMetrics& metrics_;
  std::atomic<bool> ready_{false};
  const ModelCodec* codec_ = nullptr;  // set once before ready_
  EngineLoop* loop_ = nullptr;
  ProtocolLimits limits_;
  ParseBudget parse_budget_;
  StructuredOutput structured_;
  ToolOptions tool_options_;
  bool reasoning_ = false;
  bool frontend_ = true;
  std::mutex id_mu_;
  std::mt19937_64 id_rng_;
};

}  // namespace nanoserve::server
