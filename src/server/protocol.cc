#include "server/protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/protocol_fields.h"
#include "server/request_body.h"

namespace nanoserve::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {


void check_model(Fields& f, const ProtocolLimits& limits, std::string* model,
                 std::optional<ApiError>* not_found) {
  const json* v = f.get("model");
  if (v == nullptr) {
    *model = limits.served_model_name;
    return;
  }
  if (!v->is_string()) return f.fail("'model' must be a string.", "model");
  *model = v->get<std::string>();
  const auto& aliases = limits.served_model_aliases;
  if (*model != limits.served_model_name && std::find(aliases.begin(), aliases.end(), *model) == aliases.end())
    *not_found = model_not_found(*model);
}

// Message content: a string, or a list of {"type": "text", "text": ...} parts joined by newlines.
bool read_content(const json& v, std::string* out, Fields& f, const std::string& param) {
  if (v.is_null()) return true;
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (!v.is_array()) {
    f.fail("'" + param + "' must be a string or a list of text parts.", param);
    return false;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const json& part = v[i];
    auto type = part.is_object() ? part.find("type") : part.end();
    auto text = part.is_object() ? part.find("text") : part.end();
    if (!part.is_object() || type == part.end() || *type != "text" || text == part.end() ||
        !text->is_string()) {
      f.fail("'" + param + "[" + std::to_string(i) + "]' must be {\"type\": \"text\", \"text\": string}; " +
                 "only text content is supported.",
             param);
      return false;
    }
    if (i > 0) out->push_back('\n');
    *out += text->get<std::string>();
  }
  return true;
}

bool read_message_list(const json* v, std::vector<ChatMessage>* out, Fields& f, ordered_json& for_template,
                       bool& any_extras) {
  if (v == nullptr) {
    f.fail("'messages' is required.", "messages");
    return false;
  }
  if (!v->is_array()) {
    f.fail("'messages' must be a list of messages.", "messages");
    return false;
  }
  if (v->empty()) {
    f.fail("'messages' must not be empty.", "messages");
    return false;
  }
  if (v->size() > kMaxMessages) {
    f.fail("'messages' has more than " + std::to_string(kMaxMessages) + " entries.", "messages");
    return false;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) {
      f.fail("'" + param + "' must be an object.", param);
      return false;
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      f.fail("'" + param + ".role' must be a string.", param + ".role");
      return false;
    }
    ChatMessage msg;
    msg.role = role->get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool" &&
        msg.role != "developer") {
      f.fail("'" + param + ".role' must be one of system, developer, user, assistant, tool; got '" +
                 quote_excerpt(msg.role) + "'.",
             param + ".role");
      return false;
    }
    ordered_json extras = ordered_json::object();
    if (auto e = read_message_tool_parts(m, param, &extras)) {
      f.fail(e->message, e->param);
      return false;
    }
    auto content = m.find("content");
    // OpenAI allows an assistant message without content only beside its tool_calls.
    const bool content_optional = extras.contains("tool_calls");
    if (!content_optional && (content == m.end() || content->is_null())) {
      f.fail("'" + param + ".content' is required.", param + ".content");
      return false;
    }
    if (content != m.end() && !read_content(*content, &msg.content, f, param + ".content")) return false;
    ordered_json tm{{"role", msg.role}};
    tm["content"] =
        content == m.end() || content->is_null() ? ordered_json(nullptr) : ordered_json(msg.content);
    if (!extras.empty()) any_extras = true;
    for (auto& [k, v] : extras.items()) tm[k] = v;
    for_template.push_back(std::move(tm));
    out->push_back(std::move(msg));
  }
  return true;
}

bool read_messages(const json* v, std::vector<ChatMessage>* out, Fields& f, ChatTemplateRequest* ct) {
  ordered_json for_template = ordered_json::array();
  bool any_extras = false;
  const bool ok = read_message_list(v, out, f, for_template, any_extras);
  if (ok && any_extras) ct->messages = std::move(for_template);
  return ok;
}

// chat_template (a string) and chat_template_kwargs (an object, re-read from the body in its key order).
void read_chat_template(Fields& f, std::string_view body, ChatTemplateRequest* out) {
  if (const json* t = f.get("chat_template")) {
    if (!t->is_string()) return f.fail("'chat_template' must be a string.", "chat_template");
    out->chat_template = t->get<std::string>();
  }
  if (const json* k = f.get("chat_template_kwargs")) {
    if (!k->is_object()) return f.fail("'chat_template_kwargs' must be an object.", "chat_template_kwargs");
    auto ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (ordered.is_object() && ordered.contains("chat_template_kwargs")) {
      out->kwargs = ordered["chat_template_kwargs"];
    }
  }
}

// tools and the tool-choice fields (tool_protocol.h); the template gets the tools in the order sent.
void read_tool_fields(Fields& f, const json& j, std::string_view body, ToolRequest* out,
                      ChatTemplateRequest* ct) {
  if (f.failed()) return;
  ordered_json ordered = ordered_json::object();
  if (j.contains("tools") || j.contains("functions")) {
    ordered = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!ordered.is_object()) return f.fail("Request body is not valid JSON.", "");
  }
  if (auto e = read_tools(j, ordered, out)) return f.fail(e->message, e->param);
  ct->tools = out->tools;
}

bool read_stop(Fields& f, std::vector<std::string>* out) {
  const json* v = f.get("stop");
  if (v == nullptr) return true;
  if (v->is_string()) {
    out->push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) {
        f.fail("'stop' must be a string or a list of strings.", "stop");
        return false;
      }
      out->push_back(s.get<std::string>());
    }
  } else {
    f.fail("'stop' must be a string or a list of strings.", "stop");
    return false;
  }
  if (out->size() > kMaxStopStrings) {
    f.fail("'stop' has " + std::to_string(out->size()) + " entries; at most " +
               std::to_string(kMaxStopStrings) + " are allowed.",
           "stop");
    return false;
  }
  for (const std::string& s : *out) {
    if (s.empty()) {
      f.fail("'stop' strings must not be empty.", "stop");
      return false;
    }
    if (s.size() > kMaxStopStringBytes) {
      f.fail("'stop' strings may be at most " + std::to_string(kMaxStopStringBytes) + " bytes; one has " +
                 std::to_string(s.size()) + ".",
             "stop");
      return false;
    }
  }
  return true;
}

bool read_token_ids(const json& v, std::vector<int32_t>* out, Fields& f, const ProtocolLimits& limits,
                    const std::string& param) {
  for (const json& t : v) {
    if (!t.is_number_integer()) {
      f.fail("'" + param + "' must hold integer token ids.", param);
      return false;
    }
    bool ok = t.is_number_unsigned() ? t.get<uint64_t>() < static_cast<uint64_t>(limits.vocab_size)
                                     : t.get<int64_t>() >= 0 && t.get<int64_t>() < limits.vocab_size;
    if (!ok) {
      f.fail("'" + param + "' holds token id " + t.dump() + ", outside the vocabulary [0, " +
                 std::to_string(limits.vocab_size) + ").",
             param);
      return false;
    }
    out->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
bool read_prompts(const json* v, std::vector<Prompt>* out, Fields& f, const ProtocolLimits& limits) {
  const char* kShape =
      "'prompt' must be a string, a list of strings, a list of token ids, or a list of lists of "
      "token ids.";
  if (v == nullptr) {
    f.fail("'prompt' is required.", "prompt");
    return false;
  }
  if (v->is_string()) {
    if (v->get_ref<const std::string&>().empty()) {
      f.fail("'prompt' must not be empty.", "prompt");
      return false;
    }
    out->emplace_back(v->get<std::string>());
    return true;
  }
  if (!v->is_array()) {
    f.fail(kShape, "prompt");
    return false;
  }
  if (v->empty()) {
    f.fail("'prompt' must not be empty.", "prompt");
    return false;
  }
  const json& first = v->front();
  if (first.is_number_integer()) {
    std::vector<int32_t> ids;
    if (!read_token_ids(*v, &ids, f, limits, "prompt")) return false;
    out->emplace_back(std::move(ids));
    return true;
  }
  if (v->size() > kMaxPrompts) {
    f.fail("'prompt' has more than " + std::to_string(kMaxPrompts) + " entries.", "prompt");
    return false;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& p = (*v)[i];
    std::string param = "prompt[" + std::to_string(i) + "]";
    if (p.is_string() && first.is_string()) {
      if (p.get_ref<const std::string&>().empty()) {
        f.fail("'" + param + "' must not be empty.", "prompt");
        return false;
      }
      out->emplace_back(p.get<std::string>());
    } else if (p.is_array() && first.is_array()) {
      if (p.empty()) {
        f.fail("'" + param + "' must not be empty.", "prompt");
        return false;
      }
      std::vector<int32_t> ids;
      if (!read_token_ids(p, &ids, f, limits, param)) return false;
      out->emplace_back(std::move(ids));
    } else {
      f.fail(kShape, "prompt");
      return false;
    }
  }
  return true;
}

// The fields both endpoints share.
void read_common(Fields& f, GenerateRequest* r, const ProtocolLimits& limits) {
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  SamplingParams& p = r->params;
  apply_sampling_defaults(limits.sampling_defaults, f, &p);  // the fields below override them
  // Types here; every range once, in SamplingParams::validate (check_sampling).
  if (auto v = f.integer("max_tokens", std::numeric_limits<int64_t>::min(), kMaxInt, "an integer"))
    r->max_tokens = *v;
  if (auto v = f.integer("max_completion_tokens", std::numeric_limits<int64_t>::min(), kMaxInt, "an integer"))
    r->max_tokens = *v;
  if (auto v = f.real("temperature")) p.temperature = *v;
  if (auto v = f.real("top_p")) p.top_p = *v;
  if (auto v = f.integer("top_k", std::numeric_limits<int32_t>::min(), kMaxInt, "an integer"))
    p.top_k = *v == 0 ? -1 : static_cast<int32_t>(*v);  // 0 and -1 both mean off
  if (auto v = f.real("min_p")) p.min_p = *v;
  if (auto v = f.real("presence_penalty")) p.presence_penalty = *v;
  if (auto v = f.real("frequency_penalty")) p.frequency_penalty = *v;
  if (auto v = f.real("repetition_penalty")) p.repetition_penalty = *v;
  if (auto v = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                         "a 64-bit integer")) {
    p.seed = static_cast<uint64_t>(*v);
  }
  if (auto v = f.boolean("ignore_eos")) p.ignore_eos = *v;
  if (auto v = f.integer("n", 1, limits.max_num_seqs,
                         ("in [1, " + std::to_string(limits.max_num_seqs) + "] (max_num_seqs)").c_str())) {
    r->n = static_cast<int>(*v);
  }
  read_stop(f, &r->params.stop);
  if (auto v = f.boolean("stream")) r->stream = *v;
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) {
      f.fail("'stream_options' must be an object.", "stream_options");
    } else if (!r->stream) {
      f.fail("'stream_options' is only allowed when 'stream' is true.", "stream_options");
    } else {
      Fields sf(*so);
      if (auto v = sf.boolean("include_usage")) r->include_usage = *v;
      if (sf.failed()) f.fail("'stream_options.include_usage' must be a boolean.", "stream_options");
    }
  }
  if (auto e = read_response_format(f.get("response_format"), &r->response_format))
    f.fail(e->message, e->param);
  if (auto v = f.integer("prompt_logprobs", 0, kMaxTopLogprobs, "in [0, 20]")) {
    r->prompt_logprobs = static_cast<int32_t>(*v);
    if (r->stream) f.fail("'prompt_logprobs' is not available when 'stream' is true.", "prompt_logprobs");
  }
}

// vLLM's guided_* and structured_outputs, and the schema's key order (response_format.h).
void read_guided(Fields& f, const json& j, std::string_view body, GenerateRequest* r) {
  if (f.failed()) return;
  if (auto e = read_guided_fields(j, body, &r->response_format)) f.fail(e->message, e->param);
}

// stop_token_ids, min_tokens, logit_bias, best_of, the refused tool fields, and the unknown
// fields (protocol_fields.cc); after every other field, so the first error is reported.
void read_extras(Fields& f, const json& j, GenerateRequest* r, const ProtocolLimits& limits) {
  if (f.failed()) return;
  if (auto e = read_extra_fields(j, r, limits)) return f.fail(e->message, e->param);
  r->unknown_fields = unknown_fields(j, r->endpoint);
}

// The request's sampling fields, each range checked once, by the engine's own
// rule; the 400 names the field. max_tokens is the request's (the largest
// int32 when unset: the Api resolves it against the context).
void check_sampling(Fields& f, GenerateRequest& r, const ProtocolLimits& limits, const char* logprobs_param) {
  if (f.failed()) return;
  // Echo with logprobs scores the prompt too, at the request's top count.
  const int32_t echo_scores = r.echo && r.params.logprobs ? r.params.top_logprobs : -1;
  r.params.prompt_logprobs = std::max(r.prompt_logprobs.value_or(-1), echo_scores);
  SamplingParams p = r.params;
  p.max_tokens = static_cast<int32_t>(r.max_tokens.value_or(std::numeric_limits<int32_t>::max()));
  const char* max_name = f.get("max_completion_tokens") != nullptr ? "max_completion_tokens" : "max_tokens";
  // Generating nothing is asked only to score or echo the prompt (completions).
  const bool may_be_zero = r.endpoint == Endpoint::kCompletion && (r.echo || r.prompt_logprobs);
  const int64_t asked = r.max_tokens.value_or(1);  // int64: a cast could turn -2^32 into 0
  if (asked < 1 && !(asked == 0 && may_be_zero)) {
    return f.fail("max_tokens must be >= 1, got " + std::to_string(asked) +
                      " (0 only with 'echo' or 'prompt_logprobs' on /v1/completions).",
                  max_name);
  }
  std::string field;
  if (Status st = p.validate(static_cast<int32_t>(limits.vocab_size), &field); !st.ok()) {
    if (field == "top_logprobs") field = logprobs_param;
    if (field == "max_tokens" && f.get("max_completion_tokens") != nullptr) field = "max_completion_tokens";
    f.fail(st.message() + ".", field);
  }
}

template <typename T>
Parsed<T> finish(Fields& f, std::optional<ApiError>& model_error, T value) {
  if (f.failed()) return f.error();
  if (model_error) return *model_error;
  return value;
}

}  // namespace

Parsed<GenerateRequest> parse_chat_request(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  Fields f(j);
  GenerateRequest r;
  r.endpoint = Endpoint::kChat;
  std::optional<ApiError> model_error;
  check_model(f, limits, &r.model, &model_error);
  read_messages(f.get("messages"), &r.messages, f, &r.chat_template);
  read_chat_template(f, body, &r.chat_template);
  read_tool_fields(f, j, body, &r.tools, &r.chat_template);
  read_common(f, &r, limits);
  read_guided(f, j, body, &r);
  // Chat: logprobs is a bool; top_logprobs (0..20) needs it.
  bool logprobs = f.boolean("logprobs").value_or(false);
  auto top = f.integer("top_logprobs", 0, kMaxTopLogprobs, "in [0, 20]");
  if (top && !logprobs) f.fail("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs");
  if (logprobs) {
    r.params.logprobs = true;
    r.params.top_logprobs = static_cast<int32_t>(top.value_or(0));
  }
  read_extras(f, j, &r, limits);
  check_sampling(f, r, limits, "top_logprobs");
  return finish(f, model_error, std::move(r));
}

Parsed<GenerateRequest> parse_completion_request(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  Fields f(j);
  GenerateRequest r;
  r.endpoint = Endpoint::kCompletion;
  std::optional<ApiError> model_error;
  check_model(f, limits, &r.model, &model_error);
  read_prompts(f.get("prompt"), &r.prompts, f, limits);
  read_common(f, &r, limits);
  read_guided(f, j, body, &r);
  // Completions: logprobs is the number of alternatives (0..20).
  if (auto v = f.integer("logprobs", 0, kMaxTopLogprobs, "in [0, 20]"))
  {
    r.params.logprobs = true;
    r.params.top_logprobs = static_cast<int32_t>(*v);
  }
  if (auto echo = f.boolean("echo")) r.echo = *echo;
  if (const json* s = f.get("suffix"); s != nullptr) f.fail("'suffix' is not supported.", "suffix");
  read_extras(f, j, &r, limits);
  check_sampling(f, r, limits, "logprobs");
  if (!f.failed() && !model_error &&
      r.prompts.size() * static_cast<size_t>(std::max(r.n, r.best_of)) >
          static_cast<size_t>(limits.max_num_seqs) * kMaxPrompts) {
    f.fail("Too many sequences requested (prompts x n).", r.best_of > r.n ? "best_of" : "n");
  }
  return finish(f, model_error, std::move(r));
}

Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  Fields f(j);
  TokenizeRequest r;
  std::string model;
  std::optional<ApiError> model_error;
  check_model(f, limits, &model, &model_error);
  const json* prompt = f.get("prompt");
  const json* messages = f.get("messages");
  if ((prompt == nullptr) == (messages == nullptr)) {
    f.fail("Give exactly one of 'prompt' (a string) or 'messages'.", "prompt");
  } else if (prompt != nullptr) {
    if (!prompt->is_string())
      f.fail("'prompt' must be a string.", "prompt");
    else
      r.prompt = prompt->get<std::string>();
  } else {
    read_messages(messages, &r.messages, f, &r.chat_template);
    read_chat_template(f, body, &r.chat_template);
    ToolRequest tools;
    read_tool_fields(f, j, body, &tools, &r.chat_template);
  }
  if (auto v = f.boolean("add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = f.boolean("add_generation_prompt")) r.chat_template.add_generation_prompt = *v;
  return finish(f, model_error, std::move(r));
}

Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ProtocolLimits& limits) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  Fields f(j);
  DetokenizeRequest r;
  std::string model;
  std::optional<ApiError> model_error;
  check_model(f, limits, &model, &model_error);
  const json* tokens = f.get("tokens");
  if (tokens == nullptr || !tokens->is_array()) {
    f.fail("'tokens' must be a list of token ids.", "tokens");
  } else {
    read_token_ids(*tokens, &r.tokens, f, limits, "tokens");
  }
  return finish(f, model_error, std::move(r));
}

Parsed<int64_t> check_context_length(int64_t prompt_tokens, std::optional<int64_t> max_tokens,
                                     int64_t max_model_len, Endpoint endpoint) {
  if (prompt_tokens < 1) return bad_request("The prompt is empty after tokenization.", "prompt");
  int64_t want = max_tokens.value_or(0);
  // max_tokens 0 (scoring) needs no room after the prompt; otherwise at least one token's.
  if (prompt_tokens + (max_tokens && want == 0 ? 0 : std::max<int64_t>(want, 1)) > max_model_len) {
    const std::string input = endpoint == Endpoint::kChat ? "messages" : "prompt";
    std::string msg = "This model's maximum context length is " + std::to_string(max_model_len) +
                      " tokens. However, you requested " + std::to_string(prompt_tokens + want) +
                      " tokens (" + std::to_string(prompt_tokens) + " in the " + input + ", " +
                      std::to_string(want) + " in the completion). Please reduce the length of the " + input +
                      " or completion.";
    return ApiError{400, std::move(msg), "invalid_request_error", input, "context_length_exceeded"};
  }
  if (max_tokens) return *max_tokens;
  const int64_t left = max_model_len - prompt_tokens;
  return endpoint == Endpoint::kCompletion ? std::min(left, kDefaultCompletionMaxTokens) : left;
}

}  // namespace nanoserve::server
