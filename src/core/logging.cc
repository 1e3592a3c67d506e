#include "core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
}  // namespace

LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { level_ref().store(level); }

LogMessage::~LogMessage() {
  static const char* kTags[] = {"D", "I", "W", "E"};
  std::string s = stream_.str();
  std::fprintf(stderr, "[%s] %s\n", kTags[static_cast<int>(level_)], s.c_str());
}

}  // namespace nanoserve
