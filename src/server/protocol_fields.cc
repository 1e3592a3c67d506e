#include "server/protocol_fields.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>

namespace nanoserve::server {

using nlohmann::json;

namespace {

// The field, or nullptr when absent or null (null means "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

// A JSON integer in [lo, hi], or nullopt.
std::optional<int64_t> integer_in(const json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return std::nullopt;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    const auto x = static_cast<int64_t>(u);
    return x >= lo && x <= hi ? std::optional<int64_t>(x) : std::nullopt;
  }
  const int64_t x = v.get<int64_t>();
  return x >= lo && x <= hi ? std::optional<int64_t>(x) : std::nullopt;
}

std::optional<ApiError> read_stop_token_ids(const json& body, SamplingParams& p) {
  const json* v = field(body, "stop_token_ids");
  if (v == nullptr) return std::nullopt;
  if (!v->is_array()) return bad_request("'stop_token_ids' must be a list of token ids.", "stop_token_ids");
  if (v->size() > kMaxStopTokenIds) {
    return bad_request("'stop_token_ids' has " + std::to_string(v->size()) + " entries; at most " +
                           std::to_string(kMaxStopTokenIds) + " are allowed.",
                       "stop_token_ids");
  }
  for (const json& t : *v) {
    // The vocabulary range is SamplingParams::validate's, with every other range.
    auto id = integer_in(t, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    if (!id) {
      return bad_request("'stop_token_ids' holds " + quote_excerpt(t.dump()) + ", which is not a token id.",
                         "stop_token_ids");
    }
    p.stop_token_ids.push_back(static_cast<int32_t>(*id));
  }
  return std::nullopt;
}

std::optional<ApiError> read_min_tokens(const json& body, SamplingParams& p) {
  const json* v = field(body, "min_tokens");
  if (v == nullptr) return std::nullopt;
  auto x = integer_in(*v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  if (!x) return bad_request("'min_tokens' must be a 32-bit integer.", "min_tokens");
  p.min_tokens = static_cast<int32_t>(*x);  // its range, against max_tokens, is SamplingParams::validate's
  return std::nullopt;
}

// A decimal token id as a JSON object key: digits only, at most 10 of them.
std::optional<int64_t> key_token_id(const std::string& key) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  int64_t id = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + (c - '0');
  }
  return id;
}

std::optional<ApiError> read_logit_bias(const json& body, SamplingParams& p) {
  const json* v = field(body, "logit_bias");
  if (v == nullptr) return std::nullopt;
  if (!v->is_object()) {
    return bad_request("'logit_bias' must be an object mapping token ids (as strings) to biases.",
                       "logit_bias");
  }
  if (v->size() > kMaxLogitBias) {
    return bad_request("'logit_bias' has " + std::to_string(v->size()) + " entries; at most " +
                           std::to_string(kMaxLogitBias) + " are allowed.",
                       "logit_bias");
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    auto id = key_token_id(it.key());
    if (!id || *id > std::numeric_limits<int32_t>::max()) {
      return bad_request("'logit_bias' key '" + quote_excerpt(it.key()) + "' is not a token id.", "logit_bias");
    }
    if (!it->is_number()) {
      return bad_request("'logit_bias' values must be numbers; the one for token " + it.key() + " is not.",
                         "logit_bias");
    }
    // Clamped, as OpenAI documents the range; a JSON number is always finite.
    const double b = std::clamp(it->get<double>(), -double{kMaxLogitBiasValue}, double{kMaxLogitBiasValue});
    // The vocabulary range and repeats are SamplingParams::validate's.
    p.logit_bias.emplace_back(static_cast<int32_t>(*id), static_cast<float>(b));
  }
  return std::nullopt;
}

std::optional<ApiError> read_best_of(const json& body, GenerateRequest* r, const ProtocolLimits& limits) {
  const json* v = field(body, "best_of");
  if (v == nullptr) return std::nullopt;
  const std::string range = "[1, " + std::to_string(limits.max_num_seqs) + "] (max_num_seqs)";
  auto x = integer_in(*v, 1, limits.max_num_seqs);
  if (!x) return bad_request("'best_of' must be an integer in " + range + ".", "best_of");
  if (*x < r->n) {
    return bad_request(
        "'best_of' (" + std::to_string(*x) + ") must be at least 'n' (" + std::to_string(r->n) + ").",
        "best_of");
  }
  if (r->stream && *x > 1) {
    return bad_request(
        "'best_of' cannot be used with 'stream': the best candidates are known only at the end.", "best_of");
  }
  r->best_of = static_cast<int>(*x);
  return std::nullopt;
}

// Completions have no tools (chat reads them: tool_protocol.h): each field is refused by name
// unless it asks for nothing.
std::optional<ApiError> refuse_tools(const json& body) {
  struct NoOp {
    const char* name;
    bool (*is_no_op)(const json&);
  };
  static constexpr NoOp kFields[] = {
      {"tools", [](const json& v) { return v.is_array() && v.empty(); }},
      {"functions", [](const json& v) { return v.is_array() && v.empty(); }},
      {"tool_choice",
       [](const json& v) { return v.is_string() && v.get_ref<const std::string&>() == "none"; }},
      {"function_call",
       [](const json& v) { return v.is_string() && v.get_ref<const std::string&>() == "none"; }},
      {"parallel_tool_calls", [](const json& v) { return v.is_boolean() && !v.get<bool>(); }},
  };
  for (const NoOp& f : kFields) {
    const json* v = field(body, f.name);
    if (v == nullptr || f.is_no_op(*v)) continue;
    return bad_request(
        std::string("'") + f.name + "' is not supported by /v1/completions: tools are a chat feature.",
        f.name);
  }
  return std::nullopt;
}

// What each endpoint reads or refuses. response_format and chat_template(_kwargs) have their own
// readers; `user` is accepted and has no effect, as in OpenAI's API.
// clang-format off
constexpr std::array<std::string_view, 37> kSharedFields = {
    "model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "n",
    "best_of", "stop", "stop_token_ids", "seed", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "ignore_eos", "min_tokens", "logit_bias", "logprobs", "stream",
    "stream_options", "response_format", "user", "tools", "tool_choice", "parallel_tool_calls",
    "functions", "function_call", "prompt_logprobs", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "guided_whitespace_pattern", "guided_decoding_backend", "structured_outputs",
    "guided_json_object"};
// clang-format on
constexpr std::array<std::string_view, 4> kChatFields = {"messages", "top_logprobs", "chat_template",
                                                         "chat_template_kwargs"};
constexpr std::array<std::string_view, 3> kCompletionFields = {"prompt", "echo", "suffix"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& names, const std::string& key) {
  return std::find(names.begin(), names.end(), key) != names.end();
}

}  // namespace

std::optional<ApiError> read_extra_fields(const json& body, GenerateRequest* r,
                                          const ProtocolLimits& limits) {
  if (auto e = read_stop_token_ids(body, r->params)) return e;
  if (auto e = read_min_tokens(body, r->params)) return e;
  if (auto e = read_logit_bias(body, r->params)) return e;
  if (auto e = read_best_of(body, r, limits)) return e;
  if (r->endpoint == Endpoint::kCompletion) return refuse_tools(body);
  return std::nullopt;
}

std::vector<std::string> unknown_fields(const json& body, Endpoint endpoint) {
  std::vector<std::string> out;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    if (contains(kSharedFields, key)) continue;
    if (endpoint == Endpoint::kChat ? contains(kChatFields, key) : contains(kCompletionFields, key)) continue;
    out.push_back(key);
  }
  return out;
}

}  // namespace nanoserve::server
