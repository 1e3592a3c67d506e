#pragma once
// Logging to stderr, one line per message, written with one call so lines of
// different threads never interleave:
//
//   NS_LOG(INFO) << "loaded " << n << " tensors";
//   NS_LOG(INFO).field("id", id).field("status", 200) << "request";
//
// Text (default):  2026-12-04T22:40:01.123Z [I] request id=cmpl-1 status=200
// JSON (--log-format json, for log shippers), one object per line:
//   {"time":"2026-12-04T22:40:01.123Z","level":"info","msg":"request","id":"cmpl-1","status":200}
// Fields keep their order; a field's key must be a plain identifier.

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace nanoserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// Messages below this level are dropped. Default: kInfo; env NANOSERVE_LOG=debug|info|warning|error.
LogLevel log_level();
void set_log_level(LogLevel level);
LogFormat log_format();
void set_log_format(LogFormat format);

// One structured field, its value already rendered: a JSON number or literal
// (quoted = false), or a string (quoted = true; escaped when written).
struct LogField {
  std::string key;
  std::string value;
  bool quoted = true;
};

// The line as it is written (without the newline), for `now_ms` (Unix time, milliseconds).
std::string format_log_line(LogFormat format, LogLevel level, int64_t now_ms, std::string_view message,
                            const std::vector<LogField>& fields);

// `s` as the body of a JSON string: quotes, backslashes and control bytes escaped, and each
// byte that is not part of valid UTF-8 replaced by U+FFFD, so every line parses.
std::string json_escape(std::string_view s);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;

  template <typename T>
  LogMessage& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

  LogMessage& field(std::string_view key, std::string_view value) {
    fields_.push_back({std::string(key), std::string(value), true});
    return *this;
  }
  LogMessage& field(std::string_view key, const char* value) { return field(key, std::string_view(value)); }
  LogMessage& field(std::string_view key, const std::string& value) {
    return field(key, std::string_view(value));
  }
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  LogMessage& field(std::string_view key, T value) {
    fields_.push_back({std::string(key), std::to_string(value), false});
    return *this;
  }
  // A real number with `decimals` digits after the point (NaN and infinities as null).
  LogMessage& field(std::string_view key, double value, int decimals);

 private:
  LogLevel level_;
  std::ostringstream stream_;
  std::vector<LogField> fields_;
};

}  // namespace nanoserve

#define NS_LOG_LEVEL_DEBUG ::nanoserve::LogLevel::kDebug
#define NS_LOG_LEVEL_INFO ::nanoserve::LogLevel::kInfo
#define NS_LOG_LEVEL_WARNING ::nanoserve::LogLevel::kWarning
#define NS_LOG_LEVEL_ERROR ::nanoserve::LogLevel::kError
#define NS_LOG(level)                                  \
  if (NS_LOG_LEVEL_##level < ::nanoserve::log_level()) \
    ;                                                  \
  else                                                 \
    ::nanoserve::LogMessage(NS_LOG_LEVEL_##level)
