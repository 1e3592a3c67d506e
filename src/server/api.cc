#include "server/api.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <utility>

#include "core/logging.h"
#include "server/anthropic.h"
#include "server/auth.h"
#include "server/chat_page.h"
#include "server/openai_responses.h"

namespace nanoserve::server {

using nlohmann::json;

namespace {

// The field a chat-template failure blames: the request's own template when it gave one, the
// missing template when the model has none, else the messages the model's template refused.
std::string chat_error_param(const Status& st, const ChatTemplateRequest& r) {
  if (r.chat_template || st.code() == StatusCode::kFailedPrecondition) return "chat_template";
  return "messages";
}

}  // namespace

std::string new_call_id(bool mistral) {
  // Mistral's template accepts only 9 letters and digits; OpenAI's ids are "call_" and 24 more.
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id.push_back(kAlnum[rng() % (sizeof(kAlnum) - 1)]);
  return id;
}

Api::Api(std::string served_model_name, std::string api_key, ServerMetrics& metrics,
         ParseBudget::Options parse_budget, bool metrics_require_key)
    : served_model_name_(std::move(served_model_name)),
      api_key_(std::move(api_key)),
      metrics_require_key_(metrics_require_key),
      created_(static_cast<int64_t>(std::time(nullptr))),
      metrics_(metrics),
      parse_budget_(parse_budget),
      id_rng_(std::random_device{}()) {}

template <typename T>
Parsed<T> Api::parse_metered(std::string_view body,
                             Parsed<T> (*parse)(std::string_view, const ProtocolLimits&)) {
  const auto start = std::chrono::steady_clock::now();
  ParseBudget::Lease lease = parse_budget_.acquire(body.size());
  if (!lease.held()) {
    metrics_.parse_budget_refused_total.inc();
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    return parse_budget_full(body.size(), parse_budget_.options().capacity_bytes,
                             static_cast<long long>(waited.count()));
  }
  // The JSON tree is built and freed inside `parse`.
  Parsed<T> parsed = parse(body, limits_);
  if (body.size() > parse_budget_.options().small_body_bytes) {
    // glibc keeps a large tree's freed nodes in the parsing thread's malloc arena, and the
    // next large parse may land in another arena: without this, resident memory grows with
    // the number of arenas (8 per core), not with the budget. Costs about 12% of the parse.
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }
  return parsed;
}

void Api::set_ready(const ModelCodec& codec, EngineLoop& loop, const ProtocolLimits& limits) {
  codec_ = &codec;
  loop_ = &loop;
  limits_ = limits;
  limits_.served_model_name = served_model_name_;
  limits_.served_model_aliases = aliases_;
  limits_.sampling_defaults = sampling_defaults_;
  ready_.store(true, std::memory_order_release);
}

const RouteSpec* find_route(std::string_view path) {
  static constexpr RouteSpec kRoutes[] = {
      {Route::kHealth, "/health", "GET"},
      {Route::kVersion, "/version", "GET"},
      {Route::kModels, "/v1/models", "GET"},
      {Route::kMetrics, "/metrics", "GET"},
      {Route::kTokenize, "/tokenize", "POST"},
      {Route::kDetokenize, "/detokenize", "POST"},
      {Route::kChat, "/v1/chat/completions", "POST"},
      {Route::kCompletion, "/v1/completions", "POST"},
      {Route::kMessages, "/v1/messages", "POST"},
      {Route::kResponses, "/v1/responses", "POST"},
      {Route::kChatPage, "/", "GET"},
  };
  static constexpr RouteSpec kModel{Route::kModel, "/v1/models/{id}", "GET"};
  static constexpr std::string_view kModelPrefix = "/v1/models/";
  for (const RouteSpec& r : kRoutes) {
    if (r.path == path) return &r;
  }
  if (path.size() > kModelPrefix.size() && path.substr(0, kModelPrefix.size()) == kModelPrefix)
    return &kModel;
  return nullptr;
}

std::optional<std::string> model_id_of_path(std::string_view path) {
  constexpr std::string_view kPrefix = "/v1/models/";
  if (path.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const std::string_view raw = path.substr(kPrefix.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string id;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      id.push_back(raw[i]);
      continue;
    }
    if (i + 2 >= raw.size()) return std::nullopt;  // '%' needs two hex digits after it
    const int a = hex(raw[i + 1]);
    const int b = hex(raw[i + 2]);
    if (a < 0 || b < 0) return std::nullopt;
    id.push_back(static_cast<char>(a * 16 + b));
    i += 2;
  }
  return id;
}

bool Api::needs_auth(Route route) const {
  if (api_key_.empty()) return false;
  if (route == Route::kMetrics) return metrics_require_key_;
  // The chat page asks for the key itself and sends it with each request.
  return !(route == Route::kHealth || route == Route::kVersion || route == Route::kChatPage);
}

Outcome Api::handle(Route route, std::string_view body, std::string_view path) {
  switch (route) {
    case Route::kHealth: return health();
    case Route::kVersion: return version();
    case Route::kModels: return models();
    case Route::kModel: return model(path);
    case Route::kMetrics: return metrics();
    case Route::kTokenize: return tokenize(body);
    case Route::kDetokenize: return detokenize(body);
    case Route::kChat: return generate(Endpoint::kChat, body);
    case Route::kCompletion: return generate(Endpoint::kCompletion, body);
    case Route::kMessages: return messages(body);
    case Route::kResponses: return responses(body);
    case Route::kChatPage: return chat_page();
  }
  return error_reply(from_http_status(404));
}

bool Api::authorized(std::string_view authorization_header) const {
  return bearer_authorized(authorization_header, api_key_);
}

bool Api::key_authorized(std::string_view x_api_key_header) const {
  return api_key_.empty() || constant_time_equal(x_api_key_header, api_key_);
}

Outcome Api::responses(std::string_view body) {
  if (!ready()) return error_reply(not_ready());
  auto chat = responses_to_chat(body);
  if (auto* e = std::get_if<ApiError>(&chat)) return error_reply(*e);
  Outcome out = generate(Endpoint::kChat, dump_json(std::get<json>(chat)));
  if (auto* job = std::get_if<std::unique_ptr<GenerationJob>>(&out))
    (*job)->set_responses("resp_" + new_call_id(false).substr(5));
  return out;
}

Outcome Api::messages(std::string_view body) {
  auto anthropic_reply = [](const Reply& r) {
    return Reply{r.status, anthropic_error_from_openai(r.status, r.body)};
  };
  if (!ready()) return anthropic_reply(error_reply(not_ready()));
  auto chat = anthropic_to_chat(body);
  if (auto* e = std::get_if<ApiError>(&chat)) return Reply{e->http_status, anthropic_error_body(*e)};
  Outcome out = generate(Endpoint::kChat, dump_json(std::get<json>(chat)));
  if (auto* r = std::get_if<Reply>(&out)) return anthropic_reply(*r);
  std::string id = new_call_id(false);
  std::get<std::unique_ptr<GenerationJob>>(out)->set_anthropic("msg_" + id.substr(5));
  return out;
}

Reply Api::chat_page() const {
  if (!frontend_) return error_reply(from_http_status(404));
  return Reply{200, std::string(chat_page_html()), "text/html; charset=utf-8"};
}

Reply Api::health() const {
  if (!ready()) return error_reply(not_ready());
  return Reply{200, "{\"status\":\"ok\"}"};
}

Reply Api::version() const {
  return Reply{200, dump_json(json{{"version", version_}})};
}

json Api::model_json(const std::string& id) const {
  // vLLM's model card: every name is a card of the same model, whose root is what was loaded.
  json model{{"id", id},
             {"object", "model"},
             {"created", created_},
             {"owned_by", "nanoserve"},
             {"root", model_root_.empty() ? served_model_name_ : model_root_},
             {"parent", nullptr}};
  if (ready()) model["max_model_len"] = limits_.max_model_len;
  return model;
}

Reply Api::models() const {
  json data = json::array({model_json(served_model_name_)});
  for (const std::string& alias : aliases_) data.push_back(model_json(alias));
  return Reply{200, dump_json(json{{"object", "list"}, {"data", std::move(data)}})};
}

Reply Api::model(std::string_view path) const {
  const std::optional<std::string> id = model_id_of_path(path);
  if (!id) return error_reply(bad_request("The model id in the path has a malformed %-escape.", "model"));
  if (*id == served_model_name_ || std::find(aliases_.begin(), aliases_.end(), *id) != aliases_.end())
    return Reply{200, dump_json(model_json(*id))};
  return error_reply(model_not_found(*id));
}

Reply Api::metrics() const {
  return Reply{200, metrics_.registry.render(), "text/plain; version=0.0.4; charset=utf-8"};
}

Reply Api::tokenize(std::string_view body) {
  if (!ready()) return error_reply(not_ready());
  auto parsed = parse_metered(body, &parse_tokenize_request);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  StatusOr<std::vector<int32_t>> ids = r.prompt ? codec_->encode(*r.prompt, r.add_special_tokens)
                                                : codec_->encode_chat(r.messages, r.chat_template);
  if (!ids.ok()) {
    const std::string param = r.prompt ? "" : chat_error_param(ids.status(), r.chat_template);
    return error_reply(bad_request(ids.status().message(), param));
  }
  return Reply{200, dump_json(json{
                        {"tokens", *ids}, {"count", ids->size()}, {"max_model_len", limits_.max_model_len}})};
}

Reply Api::detokenize(std::string_view body) {
  if (!ready()) return error_reply(not_ready());
  auto parsed = parse_metered(body, &parse_detokenize_request);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
  const DetokenizeRequest& r = std::get<DetokenizeRequest>(parsed);
  return Reply{200, dump_json(json{{"prompt", codec_->decode(r.tokens)}})};
}

std::string Api::new_id(Endpoint endpoint) {
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(id_mu_);
    a = id_rng_();
    b = id_rng_();
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s-%016llx%016llx", endpoint == Endpoint::kChat ? "chatcmpl" : "cmpl",
                static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  return buf;
}

std::variant<Reply, std::unique_ptr<GenerationJob>> Api::generate(Endpoint endpoint, std::string_view body) {
  if (!ready()) return error_reply(not_ready());
  auto parsed =
      parse_metered(body, endpoint == Endpoint::kChat ? &parse_chat_request : &parse_completion_request);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error_reply(*e);
  GenerateRequest& r = std::get<GenerateRequest>(parsed);
  for (const std::string& name : r.unknown_fields) {
    const std::string label = quote_excerpt(name);  // a label, not a 4 MiB key
    if (metrics_.unknown_field(label)) {
      NS_LOG(WARNING) << "request field '" << label << "' is not known and is ignored; counted in "
                      << metrics_.name("request_unknown_fields_total") << ", logged once";
    }
  }
  auto constraint = structured_.constraint_for(r, *codec_);
  if (auto* e = std::get_if<ApiError>(&constraint)) return error_reply(*e);
  r.params.constraint = std::get<std::shared_ptr<const TokenConstraintFactory>>(std::move(constraint));
  ToolSetup tools;
  if (endpoint == Endpoint::kChat && r.tools.calls()) {
    const std::string choice = r.tools.legacy ? "function_call" : "tool_choice";
    if (r.params.constraint)
      return error_reply(bad_request(
          "'response_format' cannot be combined with tool calls; give '" + choice + "': \"none\" to use it.",
          "response_format"));
    if (r.tools.choice != ToolRequest::Choice::kAuto && (r.params.ignore_eos || r.params.min_tokens > 0))
      return error_reply(
          bad_request(std::string("'") + (r.params.ignore_eos ? "ignore_eos" : "min_tokens") +
                          "' cannot be combined with a required tool call: the output ends when "
                          "the calls do.",
                      r.params.ignore_eos ? "ignore_eos" : "min_tokens"));
    const std::string source =
        r.chat_template.chat_template ? *r.chat_template.chat_template : codec_->chat_template_source();
    auto setup = setup_tools(r.tools, tool_options_, source, *codec_, structured_.cache(*codec_));
    if (auto* e = std::get_if<ApiError>(&setup)) return error_reply(*e);
    tools = std::get<ToolSetup>(std::move(setup));
    r.params.constraint = tools.constraint;
    if (tools.keep_special_text) r.params.skip_special_tokens = false;
  }

  // Encode every prompt and resolve max_tokens against the context.
  std::vector<std::vector<int32_t>> prompts;
  if (endpoint == Endpoint::kChat) {
    auto ids = codec_->encode_chat(r.messages, r.chat_template);
    if (!ids.ok()) {
      return error_reply(
          bad_request(ids.status().message(), chat_error_param(ids.status(), r.chat_template)));
    }
    prompts.push_back(std::move(*ids));
    // The template's end of turn ends the reply, where the model's eos ids lack it (an
    // overriding --chat-template or the request's chat_template).
    if (auto eot = codec_->chat_end_of_turn_id(r.chat_template)) {
      const std::vector<int32_t> eos = codec_->eos_ids();
      std::vector<int32_t>& stops = r.params.stop_token_ids;
      if (stops.size() < static_cast<size_t>(SamplingParams::kMaxStops) &&
          std::find(eos.begin(), eos.end(), *eot) == eos.end() &&
          std::find(stops.begin(), stops.end(), *eot) == stops.end()) {
        stops.push_back(*eot);
      }
    }
  } else {
    for (Prompt& p : r.prompts) {
      if (auto* text = std::get_if<std::string>(&p)) {
        auto ids = codec_->encode(*text, /*add_special_tokens=*/true);
        if (!ids.ok()) return error_reply(bad_request(ids.status().message(), "prompt"));
        prompts.push_back(std::move(*ids));
      } else {
        prompts.push_back(std::move(std::get<std::vector<int32_t>>(p)));
      }
    }
  }
  std::vector<EngineRequest> choices;
  int64_t prompt_tokens = 0;
  // best_of > n: that many candidates per prompt, ranked by their cumulative logprob at the end.
  const int candidates = std::max(r.n, r.best_of);
  SamplingParams params = r.params;
  params.n = 1;  // the server fans out the choices
  if (candidates > r.n) params.logprobs = true;  // the candidates are ranked by their logprob
  for (std::vector<int32_t>& ids : prompts) {
    auto max_tokens = check_context_length(static_cast<int64_t>(ids.size()), r.max_tokens,
                                           limits_.max_model_len, endpoint);
    if (auto* e = std::get_if<ApiError>(&max_tokens)) return error_reply(*e);
    if (const auto cap = limits_.sampling_defaults.max_tokens)  // generation_config's max_new_tokens
      std::get<int64_t>(max_tokens) = std::min(std::get<int64_t>(max_tokens), *cap);
    if (r.params.min_tokens > std::get<int64_t>(max_tokens)) {
      return error_reply(bad_request(
          "'min_tokens' (" + std::to_string(r.params.min_tokens) + ") is more than the " +
              std::to_string(std::get<int64_t>(max_tokens)) + " tokens left in the context after the prompt.",
          "min_tokens"));
    }
    prompt_tokens += static_cast<int64_t>(ids.size());
    for (int j = 0; j < candidates; ++j) {
      EngineRequest er;
      er.prompt = ids;
      er.params = params;
      er.params.max_tokens = static_cast<int32_t>(
          std::min<int64_t>(std::get<int64_t>(max_tokens), std::numeric_limits<int32_t>::max()));
      // Choice i of a seeded request samples with seed + i: reproducible, yet the choices differ.
      if (r.params.seed) er.params.seed = *r.params.seed + choices.size();
      choices.push_back(std::move(er));
    }
  }

  auto handle = loop_->submit(std::move(choices));
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kResourceExhausted) return error_reply(queue_full());
    if (handle.status().code() == StatusCode::kInvalidArgument) {
      // Can never be admitted: a 400 with the reason, not a 429 that invites a retry.
      return error_reply(bad_request(handle.status().message() + ".", candidates > r.n ? "best_of" : "n"));
    }
    return error_reply(ApiError{503, handle.status().message(), "service_unavailable", {}, {}});
  }
  ResponseMeta meta{endpoint, new_id(endpoint), static_cast<int64_t>(std::time(nullptr)), served_model_name_};
  const ModelCodec* codec = codec_;
  OutputShape shape;
  if (endpoint == Endpoint::kChat) {
    shape.tool_format = tools.format;
    shape.legacy_functions = r.tools.legacy;
    shape.reasoning = reasoning_;
    const std::vector<int32_t>& ids = prompts.front();
    const size_t tail = std::min<size_t>(ids.size(), 8);
    if (reasoning_)
      shape.prompt_tail = codec_->decode(std::span<const int32_t>(ids).subspan(ids.size() - tail));
    shape.new_call_id = [mistral = tools.format == ToolFormat::kMistral] { return new_call_id(mistral); };
  }
  // echo and prompt_logprobs show the prompt: its ids (and echo's text) go with the job.
  if (r.echo || r.prompt_logprobs) {
    shape.prompts = prompts;
    shape.prompt_logprobs = r.prompt_logprobs.has_value();
    for (size_t i = 0; r.echo && i < prompts.size(); ++i) {
      const auto* text = i < r.prompts.size() ? std::get_if<std::string>(&r.prompts[i]) : nullptr;
      shape.echo_texts.push_back(text != nullptr ? *text : codec_->decode(prompts[i]));
    }
  }
  return std::make_unique<GenerationJob>(
      *loop_, std::move(*handle), std::move(meta), r, prompt_tokens,
      [codec](int32_t id) { return codec->token_text(id); }, std::move(shape));
}

}  // namespace nanoserve::server
