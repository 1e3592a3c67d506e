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
