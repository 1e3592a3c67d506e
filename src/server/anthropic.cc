#include "server/anthropic.h"

namespace nanoserve::server {

using nlohmann::json;

namespace {

ApiError bad(std::string message, std::string param) {
  return bad_request(std::move(message), std::move(param));
}

std::string event(const char* name, const json& data) {
  return std::string("event: ") + name + "\ndata: " + dump_json(data) + "\n\n";
}

// Text of a string or a list of {"type": "text", "text"} blocks.
std::variant<std::string, ApiError> text_of(const json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) return bad("'" + param + "' must be a string or a list of text blocks.", param);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& b = v[i];
    if (!b.is_object() || b.value("type", "") != "text" || !b.contains("text") || !b["text"].is_string())
      return bad(
          "'" + param + "[" + std::to_string(i) + "]' must be a text block; only text is supported here.",
          param);
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

}  // namespace

std::variant<json, ApiError> anthropic_to_chat(std::string_view body) {
  json in = json::parse(body, nullptr, false);
  if (in.is_discarded()) return bad("Request body is not valid JSON.", "");
  if (!in.is_object()) return bad("Request body must be a JSON object.", "");
  json out = json::object();
  for (const char* refused : {"thinking", "container", "mcp_servers"}) {
    if (in.contains(refused) && !in[refused].is_null())
      return bad(std::string("'") + refused + "' is not supported.", refused);
  }
  if (in.contains("model")) out["model"] = in["model"];
  if (!in.contains("max_tokens")) return bad("'max_tokens' is required.", "max_tokens");
  out["max_tokens"] = in["max_tokens"];
  for (const char* k : {"temperature", "top_p", "top_k", "stream"}) {
    if (in.contains(k)) out[k] = in[k];
  }
  if (in.contains("temperature") && in["temperature"].is_number() &&
      (in["temperature"].get<double>() < 0 || in["temperature"].get<double>() > 1))
    return bad("'temperature' must be in [0, 1].", "temperature");
  if (in.contains("stop_sequences")) out["stop"] = in["stop_sequences"];
  json messages = json::array();
  if (in.contains("system") && !in["system"].is_null()) {
    auto t = text_of(in["system"], "system");
    if (auto* e = std::get_if<ApiError>(&t)) return *e;
    messages.push_back({{"role", "system"}, {"content", std::get<std::string>(t)}});
  }
  if (!in.contains("messages") || !in["messages"].is_array() || in["messages"].empty())
    return bad("'messages' must be a non-empty list.", "messages");
  const json& ms = in["messages"];
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string p = "messages[" + std::to_string(i) + "]";
    const json& m = ms[i];
    if (!m.is_object()) return bad("'" + p + "' must be an object.", p);
    const std::string role = m.value("role", "");
    if (role != "user" && role != "assistant")
      return bad("'" + p + ".role' must be \"user\" or \"assistant\".", p + ".role");
    if (!m.contains("content")) return bad("'" + p + ".content' is required.", p + ".content");
    const json& c = m["content"];
    if (c.is_string()) {
      messages.push_back({{"role", role}, {"content", c}});
      continue;
    }
    if (!c.is_array())
      return bad("'" + p + ".content' must be a string or a list of blocks.", p + ".content");
    std::string text;
    json calls = json::array();
    for (size_t j = 0; j < c.size(); ++j) {
      const std::string bp = p + ".content[" + std::to_string(j) + "]";
      const json& b = c[j];
      const std::string type = b.is_object() ? b.value("type", "") : "";
      if (type == "text" && b.contains("text") && b["text"].is_string()) {
        if (!text.empty()) text += "\n";
        text += b["text"].get<std::string>();
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string() ||
            !b.contains("input") || !b["input"].is_object())
          return bad("'" + bp + "' must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": {...}}.",
                     bp);
        calls.push_back({{"id", b["id"]},
                         {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", b["input"].dump()}}}});
      } else if (type == "tool_result" && role == "user") {
        if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
          return bad("'" + bp + ".tool_use_id' must be a string.", bp + ".tool_use_id");
        std::string result;
        if (b.contains("content") && !b["content"].is_null()) {
          auto t = text_of(b["content"], bp + ".content");
          if (auto* e = std::get_if<ApiError>(&t)) return *e;
          result = std::get<std::string>(t);
        }
        if (!text.empty()) {  // text before the result keeps its place
          messages.push_back({{"role", "user"}, {"content", text}});
          text.clear();
        }
        messages.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
      } else {
        return bad("'" + bp + "' has type '" + quote_excerpt(type) + "', which is not supported in a " +
                       role + " message (text, tool_use in assistant, tool_result in user).",
                   bp);
      }
    }
    if (!calls.empty()) {
      json a{{"role", "assistant"}, {"content", text}, {"tool_calls", calls}};
      messages.push_back(std::move(a));
    } else if (!text.empty() || c.empty()) {
      messages.push_back({{"role", role}, {"content", text}});
    }
  }
  out["messages"] = std::move(messages);
  if (in.contains("tools") && !in["tools"].is_null()) {
    if (!in["tools"].is_array()) return bad("'tools' must be a list.", "tools");
    json tools = json::array();
    for (size_t i = 0; i < in["tools"].size(); ++i) {
      const json& t = in["tools"][i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || !t.contains("name") || !t.contains("input_schema"))
        return bad(
            "'" + p +
                "' must be {\"name\", \"description\"?, \"input_schema\"}; only custom tools are supported.",
            p);
      json fn{{"name", t["name"]}, {"parameters", t["input_schema"]}};
      if (t.contains("description")) fn["description"] = t["description"];
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    out["tools"] = std::move(tools);
  }
  if (in.contains("tool_choice") && !in["tool_choice"].is_null()) {
    const json& tc = in["tool_choice"];
    const std::string type = tc.is_object() ? tc.value("type", "") : "";
    if (type == "auto")
      out["tool_choice"] = "auto";
    else if (type == "any")
      out["tool_choice"] = "required";
    else if (type == "none")
      out["tool_choice"] = "none";
    else if (type == "tool" && tc.contains("name"))
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else
      return bad(
          "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", "
          "\"name\"}.",
          "tool_choice");
    if (tc.value("disable_parallel_tool_use", false)) out["parallel_tool_calls"] = false;
  }
  return out;
}

std::string anthropic_error_body(const ApiError& e) {
  const char* type = e.http_status == 401   ? "authentication_error"
                     : e.http_status == 404 ? "not_found_error"
                     : e.http_status == 413 ? "request_too_large"
                     : e.http_status == 429 ? "rate_limit_error"
                     : e.http_status == 503 ? "overloaded_error"
                     : e.http_status >= 500 ? "api_error"
                                            : "invalid_request_error";
  return dump_json(json{{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}});
}

std::string anthropic_error_from_openai(int status, const std::string& openai_body) {
  ApiError e{status, openai_body, "", {}, {}};
  json j = json::parse(openai_body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object())
    e.message = j["error"].value("message", openai_body);
  return anthropic_error_body(e);
}

const char* anthropic_stop_reason(FinishReason finish, bool tool_calls, const std::string& stop_string) {
  if (finish == FinishReason::kLength) return "max_tokens";
  if (tool_calls) return "tool_use";
  if (!stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_message(const std::string& id, const std::string& model, const ChoiceResult& c,
                       const std::string& stop_string, const Usage& usage) {
  json content = json::array();
  if (!c.text.empty()) content.push_back({{"type", "text"}, {"text", c.text}});
  const bool calls = c.tool_calls.is_array() && !c.tool_calls.empty();
  if (calls) {
    for (const json& tc : c.tool_calls) {
      json input = json::parse(tc["function"]["arguments"].get<std::string>(), nullptr, false);
      content.push_back({{"type", "tool_use"},
                         {"id", tc["id"]},
                         {"name", tc["function"]["name"]},
                         {"input", input.is_object() ? input : json::object()}});
    }
  }
  const char* reason = anthropic_stop_reason(c.finish, calls, stop_string);
  return json{{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model},
              {"content", content},
              {"stop_reason", reason},
              {"stop_sequence", std::string(reason) == "stop_sequence" ? json(stop_string) : json(nullptr)},
              {"usage", {{"input_tokens", usage.prompt_tokens}, {"output_tokens", usage.completion_tokens}}}};
}

std::string AnthropicStream::start(int64_t input_tokens) {
  return event("message_start", {{"type", "message_start"},
                                 {"message",
                                  {{"id", id_},
                                   {"type", "message"},
                                   {"role", "assistant"},
                                   {"model", model_},
                                   {"content", json::array()},
                                   {"stop_reason", nullptr},
                                   {"stop_sequence", nullptr},
                                   {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}}}});
}

std::string AnthropicStream::close_block() {
  if (block_ < 0) return {};
  std::string out = event("content_block_stop", {{"type", "content_block_stop"}, {"index", block_}});
  tool_index_ = -1;
  block_is_text_ = false;
  return out;
}

std::string AnthropicStream::part(const ChunkPart& p) {
  std::string out;
  if (!p.text.empty()) {
    if (block_ < 0 || !block_is_text_) {
      out += close_block();
      ++block_;
      block_is_text_ = true;
      out += event("content_block_start", {{"type", "content_block_start"},
                                           {"index", block_},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}});
    }
    out += event("content_block_delta", {{"type", "content_block_delta"},
                                         {"index", block_},
                                         {"delta", {{"type", "text_delta"}, {"text", p.text}}}});
  }
  if (p.tool_calls.is_array()) {
    for (const json& d : p.tool_calls) {
      const int index = d["index"].get<int>();
      if (d.contains("id")) {
        out += close_block();
        ++block_;
        tool_index_ = index;
        any_tool_ = true;
        out += event("content_block_start", {{"type", "content_block_start"},
                                             {"index", block_},
                                             {"content_block",
                                              {{"type", "tool_use"},
                                               {"id", d["id"]},
                                               {"name", d["function"]["name"]},
                                               {"input", json::object()}}}});
      }
      const std::string args = d["function"].value("arguments", "");
      if (!args.empty() && index == tool_index_) {
        out +=
            event("content_block_delta", {{"type", "content_block_delta"},
                                          {"index", block_},
                                          {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
      }
    }
  }
  return out;
}

std::string AnthropicStream::finish(FinishReason finish, const std::string& stop_string,
                                    int64_t output_tokens) {
  std::string out = close_block();
  const char* reason =
      anthropic_stop_reason(finish, any_tool_ && finish != FinishReason::kLength, stop_string);
  out += event(
      "message_delta",
      {{"type", "message_delta"},
       {"delta",
        {{"stop_reason", reason},
         {"stop_sequence", std::string(reason) == "stop_sequence" ? json(stop_string) : json(nullptr)}}},
       {"usage", {{"output_tokens", output_tokens}}}});
  out += event("message_stop", {{"type", "message_stop"}});
  return out;
}

}  // namespace nanoserve::server
