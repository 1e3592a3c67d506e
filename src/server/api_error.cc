#include "server/api_error.h"

#include <utility>

namespace nanoserve::server {

nlohmann::json ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", std::move(e)}};
}

std::string ApiError::body() const {
  return dump_json(to_json());
}

ApiError bad_request(std::string message, std::string param) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

std::string quote_excerpt(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t end = max_bytes;
  // Back up over continuation bytes (10xxxxxx) so no character is split.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end) + "...";
}

ApiError model_not_found(const std::string& model) {
  return ApiError{404, "The model '" + quote_excerpt(model) + "' does not exist.", "invalid_request_error",
                  "model", "model_not_found"};
}

ApiError unauthorized() {
  return ApiError{401,
                  "Incorrect or missing API key. Pass it as 'Authorization: Bearer <key>'.",
                  "invalid_request_error",
                  {},
                  "invalid_api_key"};
}

ApiError payload_too_large(size_t limit_bytes) {
  return ApiError{413,
                  "Request body is larger than the limit of " + std::to_string(limit_bytes) + " bytes.",
                  "invalid_request_error",
                  {},
                  "request_too_large"};
}

ApiError queue_full() {
  return ApiError{429,
                  "The server is at capacity: the request queue is full. Retry later.",
                  "rate_limit_error",
                  {},
                  "queue_full"};
}

ApiError not_ready() {
  return ApiError{503, "The model is still loading.", "service_unavailable", {}, "not_ready"};
}

ApiError parse_budget_full(size_t body_bytes, size_t budget_bytes, long long waited_ms) {
  return ApiError{503,
                  "The server is parsing too many large request bodies at once: this body of " +
                      std::to_string(body_bytes) + " bytes did not fit the parse budget of " +
                      std::to_string(budget_bytes) + " bytes (--max-parse-bytes) within " +
                      std::to_string(waited_ms) + " ms. Retry later.",
                  "service_unavailable",
                  {},
                  "parse_budget_full"};
}

ApiError internal(std::string message) {
  return ApiError{500, std::move(message), "internal_error", {}, "internal_error"};
}

ApiError from_http_status(int status) {
  switch (status) {
    case 400: return bad_request("Malformed HTTP request.");
    case 401: return unauthorized();
    case 404: return ApiError{404, "Not found.", "not_found_error", {}, "not_found"};
    case 405: return ApiError{405, "Method not allowed.", "invalid_request_error", {}, "method_not_allowed"};
    case 413: return ApiError{413, "Request is too large.", "invalid_request_error", {}, "request_too_large"};
    case 429: return queue_full();
    case 503: return not_ready();
    default: return ApiError{status, "HTTP error " + std::to_string(status) + ".", "internal_error", {}, {}};
  }
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace nanoserve::server
