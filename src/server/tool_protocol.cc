#include "server/tool_protocol.h"

namespace nanoserve::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  }
  return true;
}

// One function definition {"name", "description"?, "parameters"?, "strict"?}.
std::optional<ApiError> read_function(const json& f, const std::string& param, ToolSpec* spec) {
  if (!f.is_object()) return bad_request("'" + param + "' must be an object.", param);
  for (const auto& [k, v] : f.items()) {
    if (k != "name" && k != "description" && k != "parameters" && k != "strict")
      return bad_request("'" + param + "' has an unknown field '" + quote_excerpt(k) + "'.", param);
  }
  auto name = f.find("name");
  if (name == f.end() || !name->is_string() || !valid_name(name->get<std::string>()))
    return bad_request("'" + param + ".name' must be a string of 1 to 64 letters, digits, '_' or '-'.",
                       param + ".name");
  if (auto d = f.find("description"); d != f.end() && !d->is_string() && !d->is_null())
    return bad_request("'" + param + ".description' must be a string.", param + ".description");
  if (auto s = f.find("strict"); s != f.end() && !s->is_boolean() && !s->is_null())
    return bad_request("'" + param + ".strict' must be a boolean.", param + ".strict");
  spec->name = name->get<std::string>();
  spec->parameters = json::object();
  if (auto p = f.find("parameters"); p != f.end() && !p->is_null()) {
    if (!p->is_object())
      return bad_request("'" + param + ".parameters' must be a JSON schema object.", param + ".parameters");
    spec->parameters = *p;
  }
  return std::nullopt;
}

}  // namespace

std::vector<ToolSpec> ToolRequest::callable() const {
  if (choice != Choice::kNamed) return specs;
  for (const ToolSpec& s : specs) {
    if (s.name == named) return {s};
  }
  return {};
}

std::optional<ApiError> read_tools(const json& body, const ordered_json& ordered, ToolRequest* out) {
  const json* tools = field(body, "tools");
  const json* functions = field(body, "functions");
  if (tools != nullptr && functions != nullptr)
    return bad_request("Give 'tools' or the legacy 'functions', not both.", "functions");
  const char* list_name = tools != nullptr ? "tools" : "functions";
  const json* list = tools != nullptr ? tools : functions;
  out->legacy = functions != nullptr;
  if (list != nullptr) {
    if (!list->is_array()) return bad_request(std::string("'") + list_name + "' must be a list.", list_name);
    if (list->size() > kMaxTools)
      return bad_request(
          std::string("'") + list_name + "' has more than " + std::to_string(kMaxTools) + " entries.",
          list_name);
    ordered_json for_template = ordered_json::array();
    const ordered_json& olist = ordered.at(list_name);
    for (size_t i = 0; i < list->size(); ++i) {
      const json& t = (*list)[i];
      const std::string param = std::string(list_name) + "[" + std::to_string(i) + "]";
      ToolSpec spec;
      if (tools != nullptr) {
        if (!t.is_object()) return bad_request("'" + param + "' must be an object.", param);
        auto type = t.find("type");
        if (type == t.end() || *type != "function")
          return bad_request("'" + param + ".type' must be \"function\": only function tools are supported.",
                             param + ".type");
        for (const auto& [k, v] : t.items()) {
          if (k != "type" && k != "function")
            return bad_request("'" + param + "' has an unknown field '" + quote_excerpt(k) + "'.", param);
        }
        auto fn = t.find("function");
        if (fn == t.end()) return bad_request("'" + param + ".function' is required.", param + ".function");
        if (auto e = read_function(*fn, param + ".function", &spec)) return e;
        for_template.push_back(olist[i]);
      } else {
        if (auto e = read_function(t, param, &spec)) return e;
        for_template.push_back(ordered_json{{"type", "function"}, {"function", olist[i]}});
      }
      for (const ToolSpec& s : out->specs) {
        if (s.name == spec.name)
          return bad_request("'" + std::string(list_name) + "' names the function '" + spec.name + "' twice.",
                             list_name);
      }
      out->specs.push_back(std::move(spec));
    }
    if (!out->specs.empty()) out->tools = std::move(for_template);
  }

  const json* choice = field(body, "tool_choice");
  const json* legacy_choice = field(body, "function_call");
  if (choice != nullptr && legacy_choice != nullptr)
    return bad_request("Give 'tool_choice' or the legacy 'function_call', not both.", "function_call");
  const char* choice_name = choice != nullptr ? "tool_choice" : "function_call";
  const json* c = choice != nullptr ? choice : legacy_choice;
  out->choice = out->specs.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
  if (c != nullptr) {
    const std::string p = choice_name;
    if (c->is_string()) {
      const std::string s = c->get<std::string>();
      if (s == "none") {
        out->choice = ToolRequest::Choice::kNone;
      } else if (s == "auto") {
        out->choice = ToolRequest::Choice::kAuto;
      } else if (s == "required" && choice != nullptr) {
        out->choice = ToolRequest::Choice::kRequired;
      } else {
        return bad_request("'" + p + "' must be \"none\", \"auto\"" +
                               (choice != nullptr ? ", \"required\"" : "") + " or a named function; got \"" +
                               quote_excerpt(s) + "\".",
                           p);
      }
    } else if (c->is_object()) {
      const json* fn = choice != nullptr ? field(*c, "function") : c;
      if (choice != nullptr && (!c->contains("type") || (*c)["type"] != "function"))
        return bad_request("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                           p);
      if (fn == nullptr || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
        return bad_request("'" + p + "' must name a function: " +
                               (choice != nullptr ? "{\"type\": \"function\", \"function\": {\"name\": ...}}."
                                                  : "{\"name\": ...}."),
                           p);
      out->choice = ToolRequest::Choice::kNamed;
      out->named = (*fn)["name"].get<std::string>();
    } else {
      return bad_request("'" + p + "' must be a string or an object.", p);
    }
    if (out->choice != ToolRequest::Choice::kNone && out->specs.empty())
      return bad_request("'" + p + "' asks for a tool call but no 'tools' are given.", p);
    if (out->choice == ToolRequest::Choice::kNamed && out->callable().empty())
      return bad_request(
          "'" + p + "' names the function '" + quote_excerpt(out->named) + "', which is not among the tools.",
          p);
  }
  if (const json* par = field(body, "parallel_tool_calls")) {
    if (!par->is_boolean())
      return bad_request("'parallel_tool_calls' must be a boolean.", "parallel_tool_calls");
    out->parallel = par->get<bool>();
  }
  if (out->legacy) out->parallel = false;  // function_call returns one call
  return std::nullopt;
}

std::optional<ApiError> read_message_tool_parts(const json& m, const std::string& param, ordered_json* out) {
  const std::string role = m.value("role", "");
  if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
    const std::string p = param + ".tool_calls";
    if (role != "assistant") return bad_request("'" + p + "' is only allowed in an assistant message.", p);
    if (!calls->is_array()) return bad_request("'" + p + "' must be a list.", p);
    ordered_json list = ordered_json::array();
    for (size_t i = 0; i < calls->size(); ++i) {
      const json& c = (*calls)[i];
      const std::string pi = p + "[" + std::to_string(i) + "]";
      if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
        return bad_request(
            "'" + pi + "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}.",
            pi);
      const json& fn = c["function"];
      if (!fn.contains("name") || !fn["name"].is_string())
        return bad_request("'" + pi + ".function.name' must be a string.", pi + ".function.name");
      if (c.contains("type") && c["type"] != "function")
        return bad_request("'" + pi + ".type' must be \"function\".", pi + ".type");
      ordered_json call = ordered_json::object();
      if (c.contains("id")) {
        if (!c["id"].is_string()) return bad_request("'" + pi + ".id' must be a string.", pi + ".id");
        call["id"] = c["id"];
      }
      call["type"] = "function";
      ordered_json f = ordered_json::object();
      f["name"] = fn["name"];
      // OpenAI sends arguments as JSON text; templates write them with tojson, so they get the
      // object (as vLLM passes it). Text that is not a JSON object stays a string.
      if (auto a = fn.find("arguments"); a != fn.end() && !a->is_null()) {
        if (a->is_string()) {
          auto parsed = ordered_json::parse(a->get<std::string>(), nullptr, false);
          f["arguments"] = parsed.is_object() ? parsed : ordered_json(a->get<std::string>());
        } else if (a->is_object()) {
          f["arguments"] = ordered_json::parse(a->dump());
        } else {
          return bad_request("'" + pi + ".function.arguments' must be a string of JSON.",
                             pi + ".function.arguments");
        }
      } else {
        f["arguments"] = ordered_json::object();
      }
      call["function"] = std::move(f);
      list.push_back(std::move(call));
    }
    (*out)["tool_calls"] = std::move(list);
  }
  if (auto fc = m.find("function_call"); fc != m.end() && !fc->is_null()) {
    const std::string p = param + ".function_call";
    if (role != "assistant" || !fc->is_object() || !fc->contains("name") || !(*fc)["name"].is_string())
      return bad_request("'" + p + "' must be {\"name\", \"arguments\"} in an assistant message.", p);
    ordered_json f{{"name", (*fc)["name"]}};
    auto parsed = ordered_json::parse(fc->value("arguments", std::string("{}")), nullptr, false);
    f["arguments"] = parsed.is_object() ? parsed : ordered_json::object();
    (*out)["tool_calls"] = ordered_json::array({ordered_json{{"type", "function"}, {"function", f}}});
  }
  if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
    const std::string p = param + ".tool_call_id";
    if (role != "tool") return bad_request("'" + p + "' is only allowed in a tool message.", p);
    if (!id->is_string()) return bad_request("'" + p + "' must be a string.", p);
    (*out)["tool_call_id"] = *id;
  }
  if (auto name = m.find("name"); name != m.end() && !name->is_null()) {
    if (!name->is_string()) return bad_request("'" + param + ".name' must be a string.", param + ".name");
    (*out)["name"] = *name;
  }
  return std::nullopt;
}

}  // namespace nanoserve::server
