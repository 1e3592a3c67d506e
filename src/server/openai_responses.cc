#include "server/openai_responses.h"

namespace nanoserve::server {

using nlohmann::json;

namespace {

ApiError bad(std::string message, std::string param) {
  return bad_request(std::move(message), std::move(param));
}

std::variant<std::string, ApiError> content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return bad("'" + param + "' must be a string or a list of text parts.", param);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    const std::string type = p.is_object() ? p.value("type", "") : "";
    if ((type != "input_text" && type != "output_text" && type != "text") || !p.contains("text") ||
        !p["text"].is_string())
      return bad(
          "'" + param + "[" + std::to_string(i) + "]' must be an input_text part; only text is supported.",
          param);
    if (!out.empty()) out += "\n";
    out += p["text"].get<std::string>();
  }
  return out;
}

json message_item(const std::string& id, const std::string& text, const char* status) {
  return json{{"type", "message"},
              {"id", id},
              {"status", status},
              {"role", "assistant"},
              {"content",
               json::array({json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}};
}

json reasoning_item(const std::string& id, const std::string& text) {
  return json{{"type", "reasoning"},
              {"id", id},
              {"summary", json::array()},
              {"content", json::array({json{{"type", "reasoning_text"}, {"text", text}}})}};
}

}  // namespace

std::variant<json, ApiError> responses_to_chat(std::string_view body) {
  json in = json::parse(body, nullptr, false);
  if (in.is_discarded()) return bad("Request body is not valid JSON.", "");
  if (!in.is_object()) return bad("Request body must be a JSON object.", "");
  if (in.contains("previous_response_id") && !in["previous_response_id"].is_null())
    return bad("'previous_response_id' is not supported: responses are not stored; send the whole input.",
               "previous_response_id");
  if (in.value("store", false) == true)
    return bad("'store' must be false: responses are not stored.", "store");
  for (const char* refused : {"background", "conversation", "prompt"}) {
    if (in.contains(refused) && !in[refused].is_null())
      return bad(std::string("'") + refused + "' is not supported.", refused);
  }
  json out = json::object();
  if (in.contains("model")) out["model"] = in["model"];
  if (in.contains("max_output_tokens")) out["max_tokens"] = in["max_output_tokens"];
  for (const char* k : {"temperature", "top_p", "stream", "parallel_tool_calls"}) {
    if (in.contains(k)) out[k] = in[k];
  }
  json messages = json::array();
  if (in.contains("instructions") && !in["instructions"].is_null()) {
    if (!in["instructions"].is_string()) return bad("'instructions' must be a string.", "instructions");
    messages.push_back({{"role", "system"}, {"content", in["instructions"]}});
  }
  if (!in.contains("input")) return bad("'input' is required.", "input");
  const json& input = in["input"];
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      const json& it = input[i];
      const std::string p = "input[" + std::to_string(i) + "]";
      if (!it.is_object()) return bad("'" + p + "' must be an object.", p);
      const std::string type = it.value("type", "message");
      if (type == "message") {
        const std::string role = it.value("role", "");
        if (role != "user" && role != "assistant" && role != "system" && role != "developer")
          return bad("'" + p + ".role' must be user, assistant, system or developer.", p + ".role");
        if (!it.contains("content")) return bad("'" + p + ".content' is required.", p + ".content");
        auto t = content_text(it["content"], p + ".content");
        if (auto* e = std::get_if<ApiError>(&t)) return *e;
        messages.push_back({{"role", role}, {"content", std::get<std::string>(t)}});
      } else if (type == "function_call") {
        if (!it.contains("call_id") || !it.contains("name") || !it.contains("arguments"))
          return bad("'" + p + "' must have call_id, name and arguments.", p);
        json call{{"id", it["call_id"]},
                  {"type", "function"},
                  {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}};
        // Consecutive calls are one assistant turn.
        if (!messages.empty() && messages.back()["role"] == "assistant" &&
            messages.back().contains("tool_calls"))
          messages.back()["tool_calls"].push_back(std::move(call));
        else
          messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", json::array({call})}});
      } else if (type == "function_call_output") {
        if (!it.contains("call_id") || !it.contains("output") || !it["output"].is_string())
          return bad("'" + p + "' must have call_id and a string output.", p);
        messages.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", it["output"]}});
      } else if (type == "reasoning") {
        continue;  // earlier reasoning does not go back to the model, as with chat
      } else {
        return bad("'" + p + ".type' '" + quote_excerpt(type) +
                       "' is not supported (message, function_call, function_call_output, reasoning).",
                   p + ".type");
      }
    }
  } else {
    return bad("'input' must be a string or a list of items.", "input");
  }
  out["messages"] = std::move(messages);
  if (in.contains("tools") && !in["tools"].is_null()) {
    if (!in["tools"].is_array()) return bad("'tools' must be a list.", "tools");
    json tools = json::array();
    for (size_t i = 0; i < in["tools"].size(); ++i) {
      const json& t = in["tools"][i];
      const std::string p = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || t.value("type", "") != "function")
        return bad("'" + p + ".type' must be \"function\": only function tools are supported.", p + ".type");
      json fn = json::object();
      for (const char* k : {"name", "description", "parameters", "strict"}) {
        if (t.contains(k) && !t[k].is_null()) fn[k] = t[k];
      }
      tools.push_back({{"type", "function"}, {"function", fn}});
    }
    out["tools"] = std::move(tools);
  }
  if (in.contains("tool_choice") && !in["tool_choice"].is_null()) {
    const json& tc = in["tool_choice"];
    if (tc.is_string())
      out["tool_choice"] = tc;
    else if (tc.is_object() && tc.value("type", "") == "function" && tc.contains("name"))
      out["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else
      return bad(
          "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\"}.",
          "tool_choice");
  }
  if (in.contains("text") && in["text"].is_object() && in["text"].contains("format")) {
    const json& f = in["text"]["format"];
    const std::string type = f.is_object() ? f.value("type", "") : "";
    if (type == "json_schema") {
      json js{{"name", f.value("name", "response")}, {"schema", f.value("schema", json::object())}};
      if (f.contains("strict")) js["strict"] = f["strict"];
      out["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
    } else if (type == "json_object" || type == "text") {
      out["response_format"] = {{"type", type}};
    } else {
      return bad("'text.format.type' must be text, json_object or json_schema.", "text.format");
    }
  }
  return out;
}

json responses_object(const std::string& id, const std::string& model, int64_t created, const ChoiceResult& c,
                      const Usage& usage) {
  json output = json::array();
  const std::string suffix = id.substr(5);
  if (!c.reasoning.empty()) output.push_back(reasoning_item("rs_" + suffix, c.reasoning));
  if (!c.text.empty() || c.tool_calls.is_null())
    output.push_back(message_item("msg_" + suffix, c.text, "completed"));
  if (c.tool_calls.is_array()) {
    int i = 0;
    for (const json& tc : c.tool_calls) {
      output.push_back({{"type", "function_call"},
                        {"id", "fc_" + suffix + "_" + std::to_string(i++)},
                        {"call_id", tc["id"]},
                        {"name", tc["function"]["name"]},
                        {"arguments", tc["function"]["arguments"]},
                        {"status", "completed"}});
    }
  }
  const bool cut = c.finish == FinishReason::kLength;
  return json{{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", cut ? "incomplete" : "completed"},
              {"incomplete_details", cut ? json{{"reason", "max_output_tokens"}} : json(nullptr)},
              {"error", nullptr},
              {"model", model},
              {"output", output},
              {"parallel_tool_calls", true},
              {"tool_choice", "auto"},
              {"tools", json::array()},
              {"store", false},
              {"usage",
               {{"input_tokens", usage.prompt_tokens},
                {"output_tokens", usage.completion_tokens},
                {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
                {"input_tokens_details", {{"cached_tokens", 0}}},
                {"output_tokens_details", {{"reasoning_tokens", 0}}}}}};
}

std::string ResponsesStream::ev(const char* type, json data) {
  data["type"] = type;
  data["sequence_number"] = seq_++;
  return std::string("event: ") + type + "\ndata: " + dump_json(data) + "\n\n";
}

std::string ResponsesStream::start() {
  json r{{"id", id_},
         {"object", "response"},
         {"created_at", created_},
         {"status", "in_progress"},
         {"model", model_},
         {"output", json::array()},
         {"error", nullptr},
         {"incomplete_details", nullptr},
         {"usage", nullptr},
         {"tools", json::array()},
         {"tool_choice", "auto"},
         {"parallel_tool_calls", true}};
  std::string out = ev("response.created", {{"response", r}});  // two statements: numbered in order
  out += ev("response.in_progress", {{"response", r}});
  return out;
}

std::string ResponsesStream::close_item() {
  std::string out;
  const std::string suffix = id_.substr(5);
  switch (open_) {
    case Open::kNone: return out;
    case Open::kReasoning:
      out +=
          ev("response.reasoning_text.done",
             {{"item_id", "rs_" + suffix}, {"output_index", item_}, {"content_index", 0}, {"text", text_}});
      out += ev("response.output_item.done",
                {{"output_index", item_}, {"item", reasoning_item("rs_" + suffix, text_)}});
      break;
    case Open::kText: {
      json part{{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}};
      out +=
          ev("response.output_text.done",
             {{"item_id", "msg_" + suffix}, {"output_index", item_}, {"content_index", 0}, {"text", text_}});
      out +=
          ev("response.content_part.done",
             {{"item_id", "msg_" + suffix}, {"output_index", item_}, {"content_index", 0}, {"part", part}});
      out += ev("response.output_item.done",
                {{"output_index", item_}, {"item", message_item("msg_" + suffix, text_, "completed")}});
      break;
    }
    case Open::kCall:
      call_["arguments"] = text_;
      call_["status"] = "completed";
      out += ev("response.function_call_arguments.done",
                {{"item_id", call_["id"]}, {"output_index", item_}, {"arguments", text_}});
      out += ev("response.output_item.done", {{"output_index", item_}, {"item", call_}});
      break;
  }
  open_ = Open::kNone;
  text_.clear();
  return out;
}

std::string ResponsesStream::part(const ChunkPart& p) {
  std::string out;
  const std::string suffix = id_.substr(5);
  if (!p.reasoning.empty()) {
    if (open_ != Open::kReasoning) {
      out += close_item();
      ++item_;
      open_ = Open::kReasoning;
      json item = reasoning_item("rs_" + suffix, "");
      item["content"] = json::array();
      out += ev("response.output_item.added", {{"output_index", item_}, {"item", item}});
    }
    text_ += p.reasoning;
    out += ev(
        "response.reasoning_text.delta",
        {{"item_id", "rs_" + suffix}, {"output_index", item_}, {"content_index", 0}, {"delta", p.reasoning}});
  }
  if (!p.text.empty()) {
    if (open_ != Open::kText) {
      out += close_item();
      ++item_;
      open_ = Open::kText;
      json item = message_item("msg_" + suffix, "", "in_progress");
      item["content"] = json::array();
      out += ev("response.output_item.added", {{"output_index", item_}, {"item", item}});
      out += ev("response.content_part.added",
                {{"item_id", "msg_" + suffix},
                 {"output_index", item_},
                 {"content_index", 0},
                 {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
    }
    text_ += p.text;
    out +=
        ev("response.output_text.delta",
           {{"item_id", "msg_" + suffix}, {"output_index", item_}, {"content_index", 0}, {"delta", p.text}});
  }
  if (p.tool_calls.is_array()) {
    for (const json& d : p.tool_calls) {
      if (d.contains("id")) {
        out += close_item();
        ++item_;
        open_ = Open::kCall;
        call_ = {
            {"type", "function_call"}, {"id", "fc_" + suffix + "_" + std::to_string(d["index"].get<int>())},
            {"call_id", d["id"]},      {"name", d["function"]["name"]},
            {"arguments", ""},         {"status", "in_progress"}};
        out += ev("response.output_item.added", {{"output_index", item_}, {"item", call_}});
      }
      const std::string args = d["function"].value("arguments", "");
      if (!args.empty() && open_ == Open::kCall) {
        text_ += args;
        out += ev("response.function_call_arguments.delta",
                  {{"item_id", call_["id"]}, {"output_index", item_}, {"delta", args}});
      }
    }
  }
  return out;
}

std::string ResponsesStream::finish(const json& final) {
  std::string out = close_item();
  const bool cut = final.value("status", "") == "incomplete";
  out += ev(cut ? "response.incomplete" : "response.completed", {{"response", final}});
  return out;
}

}  // namespace nanoserve::server
