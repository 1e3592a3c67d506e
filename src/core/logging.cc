#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace nanoserve {

namespace {

LogLevel level_from_env() {
  const char* e = std::getenv("NANOSERVE_LOG");
  if (e == nullptr) return LogLevel::kInfo;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "warning")) return LogLevel::kWarning;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}
std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{level_from_env()};
  return level;
}
std::atomic<LogFormat>& format_ref() {
  static std::atomic<LogFormat> format{LogFormat::kText};
  return format;
}

// The length of the valid UTF-8 sequence at s[i], or 0 when the byte there does not start one
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as RFC 3629 says).
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong three-byte forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlong four-byte forms
    if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(k) < 0x80 || b(k) > 0xBF) return 0;
  }
  return n;
}

// logfmt: a value with a space, a quote, '=' or a control byte (or an empty one) is quoted.
std::string text_value(const LogField& f) {
  if (!f.quoted) return f.value;
  bool plain = !f.value.empty();
  for (unsigned char c : f.value) plain = plain && c > 0x20 && c != '"' && c != '=' && c != 0x7F;
  if (plain) return f.value;
  std::string out = "\"";
  out.append(json_escape(f.value));
  out.push_back('"');
  return out;
}

void format_time(int64_t now_ms, char* buf, size_t size) {
  const std::time_t secs = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(now_ms % 1000));
}

}  // namespace

LogLevel log_level() {
  return level_ref().load(std::memory_order_relaxed);
}
void set_log_level(LogLevel level) {
  level_ref().store(level);
}
LogFormat log_format() {
  return format_ref().load(std::memory_order_relaxed);
}
void set_log_format(LogFormat format) {
  format_ref().store(format);
}

std::string json_escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
        continue;
      }
      out.append(s.substr(i, n));
      i += n;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string format_log_line(LogFormat format, LogLevel level, int64_t now_ms, std::string_view message,
                            const std::vector<LogField>& fields) {
  static const char* kTags[] = {"D", "I", "W", "E"};
  static const char* kNames[] = {"debug", "info", "warning", "error"};
  char time[64];
  format_time(now_ms, time, sizeof(time));
  const int l = static_cast<int>(level);
  std::string line;
  if (format == LogFormat::kJson) {
    line.append("{\"time\":\"").append(time).append("\",\"level\":\"").append(kNames[l]);
    line.append("\",\"msg\":\"").append(json_escape(message)).push_back('"');
    for (const LogField& f : fields) {
      line.append(",\"").append(json_escape(f.key)).append("\":");
      if (f.quoted) {
        line.append("\"").append(json_escape(f.value)).push_back('"');
      } else {
        line.append(f.value);
      }
    }
    line.push_back('}');
    return line;
  }
  line.append(time).append(" [").append(kTags[l]).append("] ").append(message);
  for (const LogField& f : fields) line.append(" ").append(f.key).append("=").append(text_value(f));
  return line;
}

LogMessage& LogMessage::field(std::string_view key, double value, int decimals) {
  if (!std::isfinite(value)) {
    fields_.push_back({std::string(key), "null", false});
    return *this;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  fields_.push_back({std::string(key), buf, false});
  return *this;
}

LogMessage::~LogMessage() {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::string line = format_log_line(log_format(), level_, now_ms, stream_.str(), fields_);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);  // one call: stdio locks the stream for it
}

}  // namespace nanoserve
