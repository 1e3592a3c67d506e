#pragma once
// Minimal stderr logging: NS_LOG(INFO) << "loaded " << n << " tensors";

#include <sstream>

namespace nanoserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default: kInfo; env NANOSERVE_LOG=debug|info|warning|error.
LogLevel log_level();
void set_log_level(LogLevel level);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  template <typename T>
  LogMessage& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace nanoserve

#define NS_LOG_LEVEL_DEBUG ::nanoserve::LogLevel::kDebug
#define NS_LOG_LEVEL_INFO ::nanoserve::LogLevel::kInfo
#define NS_LOG_LEVEL_WARNING ::nanoserve::LogLevel::kWarning
#define NS_LOG_LEVEL_ERROR ::nanoserve::LogLevel::kError
#define NS_LOG(level)                                 \
  if (NS_LOG_LEVEL_##level < ::nanoserve::log_level()) \
    ;                                                 \
  else                                                \
    ::nanoserve::LogMessage(NS_LOG_LEVEL_##level)
