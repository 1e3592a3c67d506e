#include "server/auth.h"

#include <cctype>
#include <cstdint>

namespace nanoserve::server {

bool constant_time_equal(std::string_view given, std::string_view expected) {
  // Walk all of `given`; index `expected` modulo its length so the loop never
  // branches on a byte. A length mismatch is folded into the same accumulator.
  uint8_t diff = given.size() == expected.size() ? 0 : 1;
  if (expected.empty()) return given.empty();
  for (size_t i = 0; i < given.size(); ++i) {
    diff |= static_cast<uint8_t>(given[i]) ^ static_cast<uint8_t>(expected[i % expected.size()]);
  }
  // Keep the compiler from turning the loop into an early exit.
  volatile uint8_t result = diff;
  return result == 0;
}

bool bearer_authorized(std::string_view authorization, std::string_view api_key) {
  if (api_key.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  return constant_time_equal(authorization.substr(kScheme.size()), api_key);
}

}  // namespace nanoserve::server
