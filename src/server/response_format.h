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

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nanoserve::server {

struct ResponseFormat {
  enum class Type { kText, kJsonObject, kJsonSchema };
  Type type = Type::kText;
  nlohmann::json schema;  // kJsonSchema
  std::string name;
  bool strict = false;  // accepted; the schema is always enforced exactly
};

// Reads `value` (the field, or nullptr when absent) into out; the error names response_format.
std::optional<ApiError> read_response_format(const nlohmann::json* value, ResponseFormat* out);

}  // namespace nanoserve::server
