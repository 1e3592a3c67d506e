#pragma once
// The request field response_format (OpenAI): what it asks for, checked for
// shape only. The schema itself is compiled later (structured_output.h).
//
//   absent, null, {"type": "text"}        free text
//   {"type": "json_object"}               any JSON object
//   {"type": "json_schema", "json_schema": {"name": str, "schema": {...}, "strict": bool, "description":
//   str}}

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nanoserve::server {

// What the output must be, from response_format or from vLLM's fields
// (guided_json, guided_regex, guided_choice, structured_outputs): at most one
// of them may ask; `param` is the one that did, named by the 400s.
struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema, kRegex, kChoice };
  Type type = Type::kText;
  nlohmann::ordered_json schema;     // kJsonSchema, keys in the order sent
  std::string regex;                 // kRegex: raw text the whole pattern matches
  std::vector<std::string> choices;  // kChoice: exactly one of these, as raw text
  std::string name;
  bool strict = false;  // accepted; the schema is always enforced exactly
  std::string param = "response_format";
};

// Reads `value` (the field, or nullptr when absent) into out; the error names response_format.
std::optional<ApiError> read_response_format(const nlohmann::json* value, ResponseFormat* out);

// vLLM's structured-output fields, after read_response_format:
//   guided_json (a schema, or its JSON text), guided_regex, guided_choice (strings),
//   structured_outputs {"json" | "regex" | "choice" | "json_object": true, ...},
//   guided_decoding_backend ("auto" or absent) and guided_whitespace_pattern (absent);
//   guided_grammar, structured_outputs.grammar / structural_tag and any other backend
//   are refused by name, as is asking through two fields at once.
// `body` (the request's text) is read again in key order, so a schema keeps its
// properties' order (response_format's too). The 400 names the field.
std::optional<ApiError> read_guided_fields(const nlohmann::json& fields, std::string_view body,
                                           ResponseFormat* out);

}  // namespace nanoserve::server
