#include "server/response_format.h"

namespace nanoserve::server {

using nlohmann::json;

namespace {

ApiError bad(std::string message) {
  return bad_request(std::move(message), "response_format");
}

}  // namespace

std::optional<ApiError> read_response_format(const json* value, ResponseFormat* out) {
  *out = ResponseFormat{};
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_object())
    return bad("'response_format' must be an object such as {\"type\": \"json_object\"}, got " +
               quote_excerpt(value->dump()) + ".");
  auto type = value->find("type");
  if (type == value->end() || !type->is_string())
    return bad("'response_format.type' must be one of \"text\", \"json_object\", \"json_schema\".");
  const std::string t = type->get<std::string>();
  for (const auto& [k, v] : value->items()) {
    if (k != "type" && !(k == "json_schema" && t == "json_schema"))
      return bad("'response_format' has an unknown field '" + quote_excerpt(k) + "' for type \"" +
                 quote_excerpt(t) + "\".");
  }
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    out->type = ResponseFormat::Type::kJsonObject;
    return std::nullopt;
  }
  if (t != "json_schema")
    return bad("'response_format.type' must be one of \"text\", \"json_object\", \"json_schema\", got \"" +
               quote_excerpt(t) + "\".");
  auto js = value->find("json_schema");
  if (js == value->end() || !js->is_object())
    return bad("'response_format.json_schema' must be an object with a 'schema'.");
  for (const auto& [k, v] : js->items()) {
    if (k == "name") {
      if (!v.is_string()) return bad("'response_format.json_schema.name' must be a string.");
      out->name = v.get<std::string>();
    } else if (k == "strict") {
      if (!v.is_null() && !v.is_boolean())
        return bad("'response_format.json_schema.strict' must be a boolean.");
      out->strict = v.is_boolean() && v.get<bool>();
    } else if (k == "schema") {
      if (!v.is_object() && !v.is_boolean())
        return bad("'response_format.json_schema.schema' must be a JSON schema (an object).");
    } else if (k != "description") {
      return bad("'response_format.json_schema' has an unknown field '" + quote_excerpt(k) + "'.");
    }
  }
  auto schema = js->find("schema");
  if (schema == js->end()) return bad("'response_format.json_schema.schema' is required.");
  out->type = ResponseFormat::Type::kJsonSchema;
  out->schema = *schema;
  return std::nullopt;
}

}  // namespace nanoserve::server

namespace nanoserve::server {

namespace {

using ordered = nlohmann::ordered_json;

ApiError refuse(const std::string& param, std::string message) {
  return bad_request("'" + param + "' " + std::move(message), param);
}

// The value at `path` in the body read in key order (null when absent).
ordered ordered_at(std::string_view body, std::initializer_list<const char*> path) {
  ordered v = ordered::parse(body, nullptr, /*allow_exceptions=*/false);
  for (const char* key : path) {
    if (!v.is_object() || !v.contains(key)) return nullptr;
    ordered next = std::move(v[key]);
    v = std::move(next);
  }
  return v;
}

// A schema given as an object (or boolean), or as the JSON text of one (vLLM takes both).
std::optional<ApiError> read_schema(const json& v, const ordered& in_order, const std::string& param,
                                    ResponseFormat* out) {
  if (v.is_string()) {
    ordered parsed = ordered::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !(parsed.is_object() || parsed.is_boolean()))
      return refuse(param, "must be a JSON schema: an object, or a string holding one.");
    out->schema = std::move(parsed);
  } else if (v.is_object() || v.is_boolean()) {
    out->schema = in_order;
  } else {
    return refuse(param, "must be a JSON schema: an object, or a string holding one.");
  }
  out->type = ResponseFormat::Type::kJsonSchema;
  out->param = param;
  return std::nullopt;
}

std::optional<ApiError> read_regex(const json& v, const std::string& param, ResponseFormat* out) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    return refuse(param, "must be a non-empty string (a regular expression).");
  out->type = ResponseFormat::Type::kRegex;
  out->regex = v.get<std::string>();
  out->param = param;
  return std::nullopt;
}

std::optional<ApiError> read_choice(const json& v, const std::string& param, ResponseFormat* out) {
  constexpr size_t kMaxChoices = 256;
  if (!v.is_array() || v.empty() || v.size() > kMaxChoices)
    return refuse(param, "must be a list of 1 to 256 non-empty strings.");
  out->choices.clear();
  for (const json& c : v) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty() ||
        c.get_ref<const std::string&>().size() > 1024)
      return refuse(param, "must be a list of non-empty strings (at most 1024 bytes each).");
    out->choices.push_back(c.get<std::string>());
  }
  out->type = ResponseFormat::Type::kChoice;
  out->param = param;
  return std::nullopt;
}

// structured_outputs: exactly one of json, regex, choice, json_object: true.
std::optional<ApiError> read_structured_outputs(const json& v, std::string_view body, ResponseFormat* out) {
  const std::string p = "structured_outputs";
  if (!v.is_object()) return refuse(p, "must be an object such as {\"json\": {...}}.");
  int asks = 0;
  for (const auto& [k, x] : v.items()) {
    const std::string name = p + "." + k;
    if (x.is_null()) continue;
    if (k == "json") {
      ++asks;
      if (auto e = read_schema(x, ordered_at(body, {"structured_outputs", "json"}), name, out)) return e;
    } else if (k == "regex") {
      ++asks;
      if (auto e = read_regex(x, name, out)) return e;
    } else if (k == "choice") {
      ++asks;
      if (auto e = read_choice(x, name, out)) return e;
    } else if (k == "json_object") {
      if (!x.is_boolean()) return refuse(name, "must be a boolean.");
      if (!x.get<bool>()) continue;
      ++asks;
      out->type = ResponseFormat::Type::kJsonObject;
      out->param = name;
    } else if (k == "grammar" || k == "structural_tag") {
      return refuse(name,
                    "is not supported: this server decodes JSON schemas, regular expressions and "
                    "choices only.");
    } else if (k == "whitespace_pattern") {
      return refuse(name, "is not supported: whitespace between JSON tokens is the decoder's own.");
    } else if (k == "disable_any_whitespace") {
      if (!x.is_boolean()) return refuse(name, "must be a boolean.");
      if (x.get<bool>())
        return refuse(name, "is not supported: the decoder may write whitespace between tokens.");
    } else if (k == "disable_fallback" || k == "disable_additional_properties") {
      // Honoured as they are: there is no fallback backend, and a schema without
      // additionalProperties never gets other keys here.
      if (!x.is_boolean()) return refuse(name, "must be a boolean.");
    } else {
      return refuse(name, "is not a known field of 'structured_outputs'.");
    }
  }
  if (asks != 1)
    return refuse(p, asks == 0 ? "must give one of 'json', 'regex', 'choice' or 'json_object'."
                               : "must give only one of 'json', 'regex', 'choice' or 'json_object'.");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_guided_fields(const json& fields, std::string_view body, ResponseFormat* out) {
  auto get = [&](const char* name) -> const json* {
    auto it = fields.find(name);
    return it == fields.end() || it->is_null() ? nullptr : &*it;
  };
  if (get("guided_grammar") != nullptr)
    return refuse("guided_grammar",
                  "is not supported: this server decodes JSON schemas (guided_json), regular "
                  "expressions (guided_regex) and choices (guided_choice) only.");
  if (get("guided_whitespace_pattern") != nullptr)
    return refuse(
        "guided_whitespace_pattern",
        "is not supported: whitespace between JSON tokens is the decoder's own (at most 16 bytes).");
  if (const json* b = get("guided_decoding_backend")) {
    if (!b->is_string() || b->get_ref<const std::string&>() != "auto")
      return refuse("guided_decoding_backend",
                    "must be \"auto\": this server has one structured-output decoder of its own.");
  }
  // The key order of response_format's schema, which the first read (a sorted map) lost.
  if (out->type == ResponseFormat::Type::kJsonSchema)
    out->schema = ordered_at(body, {"response_format", "json_schema", "schema"});
  const char* kFields[] = {"guided_json", "guided_regex", "guided_choice", "guided_json_object",
                           "structured_outputs"};
  for (const char* name : kFields) {
    const json* v = get(name);
    if (v == nullptr) continue;
    if (out->type != ResponseFormat::Type::kText) {
      const std::string first = out->param.substr(0, out->param.find('.'));
      return refuse(name, "cannot be combined with '" + first + "': give the output's form once.");
    }
    const std::string n = name;
    if (n == "guided_json_object") {
      if (!v->is_boolean()) return refuse(n, "must be a boolean.");
      if (v->get<bool>()) out->type = ResponseFormat::Type::kJsonObject, out->param = n;
      continue;
    }
    std::optional<ApiError> e = n == "guided_json"     ? read_schema(*v, ordered_at(body, {name}), n, out)
                                : n == "guided_regex"  ? read_regex(*v, n, out)
                                : n == "guided_choice" ? read_choice(*v, n, out)
                                                       : read_structured_outputs(*v, body, out);
    if (e) return e;
  }
  return std::nullopt;
}

}  // namespace nanoserve::server
