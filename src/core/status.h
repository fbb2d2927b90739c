// Status and Result<T>: errors as values across module boundaries.
//
// A Status is OK or carries a code and a message for the user. The codes follow Triton's
// TRITONSERVER_Error codes so that the HTTP and gRPC front ends map them the way Triton does
// (see server/http/http_status.h). Return the most specific code that fits.
//
// Thread safety: a Status or Result is a value; const methods are safe from any thread.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace vramd {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller sent something wrong: 400
  kNotFound,         // the named model, version or tensor does not exist: 404
  kUnavailable,      // exists but cannot serve now (not ready, unloading): 503
  kUnsupported,      // a feature vramd does not implement: 501
  kAlreadyExists,    // 409-like, reported as 400 as Triton does
  kInternal,         // a bug or a backend failure: 500
  kResourceExhausted,  // a limit was hit (body size, queue): 400 unless a front end says else
  kCancelled,
  kUnknown,  // Triton's TRITONSERVER_ERROR_UNKNOWN, relayed from a model (python's TritonError)
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unknown(std::string m) { return {StatusCode::kUnknown, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // A copy whose message is "<prefix>: <message>"; OK stays OK. For adding context on the way up.
  Status WithContext(std::string_view prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status saying why there is none. Never holds an OK status without a value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status without a value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  // REQUIRES: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace vramd

#define VRAMD_CONCAT_INNER_(a, b) a##b
#define VRAMD_CONCAT_(a, b) VRAMD_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define VRAMD_RETURN_IF_ERROR(expr)                       \
  do {                                                    \
    ::vramd::Status vramd_status_ = (expr);               \
    if (!vramd_status_.ok()) return vramd_status_;        \
  } while (0)

// `lhs = value of rexpr`, or returns its Status from the enclosing function.
#define VRAMD_ASSIGN_OR_RETURN(lhs, rexpr) \
  VRAMD_ASSIGN_OR_RETURN_IMPL_(VRAMD_CONCAT_(vramd_result_, __LINE__), lhs, rexpr)
#define VRAMD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                 \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
