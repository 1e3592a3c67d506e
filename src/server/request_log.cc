#include "server/request_log.h"

#include "core/logging.h"

namespace nanoserve::server {

void log_request_line(const RequestRecord& r, int status, RequestRecord::Clock::time_point now) {
  const bool info = !r.probe && (r.api_endpoint || status >= 400);
  if ((info ? LogLevel::kInfo : LogLevel::kDebug) < log_level()) return;
  LogMessage line(info ? LogLevel::kInfo : LogLevel::kDebug);
  line.field("id", r.id).field("method", r.method).field("path", r.path).field("status", status);
  if (r.prompt_tokens >= 0) line.field("prompt_tokens", r.prompt_tokens);
  if (r.output_tokens >= 0) line.field("output_tokens", r.output_tokens);
  auto seconds = [](RequestRecord::Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (r.first_token) line.field("ttft_s", seconds(*r.first_token - r.start), 3);
  line.field("total_s", seconds(now - r.start), 3);
  line << "request";
}

}  // namespace nanoserve::server
