#pragma once
// Errors as the OpenAI API returns them:
//   HTTP <status>, {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Every failure the server reports, from a bad field to a full queue, goes through this shape.

#include <string>

#include <nlohmann/json.hpp>

namespace nanoserve::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field; empty -> null
  std::string code;   // machine-readable code; empty -> null

  nlohmann::json to_json() const;
  std::string body() const;  // to_json() serialised
};

// A user-supplied string as an error message quotes it: at most `max_bytes`, cut at a
// UTF-8 character boundary, with "..." when cut. A 4 MiB model name must not make a 4 MiB error.
inline constexpr size_t kMaxQuotedBytes = 64;
std::string quote_excerpt(const std::string& s, size_t max_bytes = kMaxQuotedBytes);

// 400: a field has the wrong type or value. `param` names the field.
ApiError bad_request(std::string message, std::string param = {});
// 404: the model name is not the one being served.
ApiError model_not_found(const std::string& model);
// 401: missing or wrong bearer key.
ApiError unauthorized();
// 413: the body is larger than the server accepts.
ApiError payload_too_large(size_t limit_bytes);
// 429: the waiting queue is full.
ApiError queue_full();
// 503: the model is still loading.
ApiError not_ready();
// 503: the body did not fit the parse budget (parse_budget.h) within `waited_ms`.
ApiError parse_budget_full(size_t body_bytes, size_t budget_bytes, long long waited_ms);
// 500: anything the engine reports while running a request.
ApiError internal(std::string message);
// The fallback for a status code with no more specific message (unknown route, ...).
ApiError from_http_status(int status);

// JSON text that never throws on invalid UTF-8 (bytes are replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

}  // namespace nanoserve::server
