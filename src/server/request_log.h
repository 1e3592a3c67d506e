#pragma once
// The request log: one line per answered request (serve logs them unless
// --disable-log-requests), at info for the API's endpoints and for every
// error, at debug for /health (a probe, whatever it answers) and for scrapes
// and listings (/metrics, /version, /v1/models, preflights) that answer 2xx:
//
//   request id=chatcmpl-3f.. method=POST path=/v1/chat/completions status=200
//           prompt_tokens=21 output_tokens=8 ttft_s=0.034 total_s=0.121
//
// id is the response's id (generation requests; "-" otherwise). ttft_s is from
// the request head's arrival to the first generated token reaching the
// connection; total_s to the last byte queued. Token counts and ttft_s appear
// only where there are any. A client gone before its answer is status 499.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace nanoserve::server {

inline constexpr int kClientClosedStatus = 499;  // nginx's code for a client that left first

struct RequestRecord {
  using Clock = std::chrono::steady_clock;
  bool active = false;  // a request head was read and nothing logged for it yet
  std::string method = "-";
  std::string path = "-";
  bool api_endpoint = false;  // an endpoint that does work (generation, tokenize): logged at info
  bool probe = false;         // /health: at debug whatever it answers (503 while the model loads)
  Clock::time_point start;
  std::optional<Clock::time_point> first_token;
  std::string id = "-";
  int64_t prompt_tokens = -1;  // -1: not a generation
  int64_t output_tokens = -1;
};

// Logs the record's line, answered with `status` at `now`.
void log_request_line(const RequestRecord& r, int status, RequestRecord::Clock::time_point now);

}  // namespace nanoserve::server
