#pragma once
// Status and StatusOr: errors that a user, a file or a request can cause.
// Internal invariants use NS_CHECK (core/check.h) instead.

#include <string>
#include <utility>
#include <variant>

namespace nanoserve {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad user input or request field
  kNotFound,           // missing file, key or tensor
  kOutOfRange,         // a value outside its allowed range
  kDataLoss,           // a malformed or truncated file
  kResourceExhausted,  // out of KV blocks, queue full, too large
  kFailedPrecondition, // valid input the current state cannot take
  kUnimplemented,      // a feature this build does not have
  kAborted,            // cancelled by the caller
  kUnavailable,        // not ready yet
  kInternal,           // a bug, or a device error
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DATA_LOSS: tensor 'x': data offset 123 past end of file (size 100)"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace nanoserve

#define NS_STATUS_CONCAT_INNER(a, b) a##b
#define NS_STATUS_CONCAT(a, b) NS_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not ok.
#define NS_RETURN_IF_ERROR(expr)                   \
  do {                                             \
    ::nanoserve::Status ns_status_ = (expr);       \
    if (!ns_status_.ok()) return ns_status_;       \
  } while (0)

// NS_ASSIGN_OR_RETURN(auto x, make_x()); declares x from the StatusOr's value.
#define NS_ASSIGN_OR_RETURN(lhs, expr) \
  NS_ASSIGN_OR_RETURN_IMPL(NS_STATUS_CONCAT(ns_statusor_, __LINE__), lhs, expr)
#define NS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
