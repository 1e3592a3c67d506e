#pragma once
// A request body as JSON, read field by field: parse_object bounds the body
// (syntax, nesting) and Fields reads typed fields, recording the first error
// as the 400 that names its field. Shared by the protocol's parsers.

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace nanoserve::server {

// The body as a JSON object, or the 400 that says why it is not one.
std::variant<nlohmann::json, ApiError> parse_object(std::string_view body);

class Fields {
 public:
  explicit Fields(const nlohmann::json& obj) : obj_(obj) {}

  bool failed() const { return error_.has_value(); }
  ApiError error() const { return *error_; }
  void fail(std::string message, std::string param) {
    if (!error_) error_ = bad_request(std::move(message), std::move(param));
  }

  // The field, or nullptr when absent or null (null means "not given").
  const nlohmann::json* get(const char* name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::optional<bool> boolean(const char* name) {
    const nlohmann::json* v = get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      fail(std::string("'") + name + "' must be a boolean.", name);
      return std::nullopt;
    }
    return v->get<bool>();
  }

  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi, const char* range_text) {
    const nlohmann::json* v = get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) {
      fail(std::string("'") + name + "' must be an integer.", name);
      return std::nullopt;
    }
    bool in_range;
    bool too_large;
    int64_t x = 0;
    if (v->is_number_unsigned()) {
      uint64_t u = v->get<uint64_t>();
      too_large = u > static_cast<uint64_t>(hi);
      in_range = !too_large && (lo <= 0 || u >= static_cast<uint64_t>(lo));
      x = in_range ? static_cast<int64_t>(u) : hi;
    } else {
      x = v->get<int64_t>();
      too_large = x > hi;
      in_range = x >= lo && !too_large;
    }
    if (too_large) {
      fail(std::string("'") + name + "' is too large: got " + v->dump() + ", the largest accepted is " +
               std::to_string(hi) + ".",
           name);
      return std::nullopt;
    }
    if (!in_range) {
      fail(std::string("'") + name + "' must be " + range_text + ", got " + v->dump() + ".", name);
      return std::nullopt;
    }
    return x;
  }

  // A finite number whose float value is accepted by `ok`; `range_text` describes the accepted range.
  // The range is checked on the float the engine will use, not on the double JSON gave: 1e-50 is
  // in (0, 1] but rounds to 0.
  // A JSON number as the 32-bit float the engine takes; its range is the
  // engine's to judge (SamplingParams::validate).
  std::optional<float> real(const char* name) {
    const nlohmann::json* v = get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) {
      fail(std::string("'") + name + "' must be a number.", name);
      return std::nullopt;
    }
    const double x = v->get<double>();
    // Beyond float's range the conversion is undefined, so test before converting.
    if (!std::isfinite(x) || std::fabs(x) > static_cast<double>(std::numeric_limits<float>::max())) {
      fail(std::string("'") + name + "' must be a finite number.", name);
      return std::nullopt;
    }
    return static_cast<float>(x);
  }

 private:
  const nlohmann::json& obj_;
  std::optional<ApiError> error_;
};

}  // namespace nanoserve::server
