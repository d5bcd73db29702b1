#pragma once

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace bm {

// What the caller should do about a failure. Codes are semantic: they never leak which
// transport or library produced the error.
enum class StatusCode {
  kOk = 0,
  kInternal,          // a bug or unexpected failure: report it, do not retry
  kNotFound,          // the block / worker / RDD does not exist
  kInvalidArgument,   // the request itself is wrong: fix it, do not retry
  kOutOfSpace,        // memory budget or disk limit exhausted
  kUnavailable,       // peer unreachable or timed out: reconnect and retry later
  kUnknownWorker,     // master does not know this worker: register again
  kAborted,           // lost a race (block replaced mid-read): retry
  kTooLarge,          // over a protocol or configured limit
  kPermissionDenied,  // the key is not allowed in, or its role may not do this: do not retry
  kDataLoss,  // stored bytes are corrupt (failed their checksum): never served; try another copy
};

const char* StatusCodeName(StatusCode code);

// The result of an operation that can fail in expected ways. Cheap to copy when OK.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "not found: block rdd_1_2 is not stored here"
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status OutOfSpaceError(std::string m) { return {StatusCode::kOutOfSpace, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status TooLargeError(std::string m) { return {StatusCode::kTooLarge, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) {
      std::cerr << "Result constructed from an OK status without a value\n";
      std::abort();
    }
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace bm

#define BM_CONCAT_INNER(a, b) a##b
#define BM_CONCAT(a, b) BM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` failed.
#define BM_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::bm::Status bm_status_ = (expr);        \
    if (!bm_status_.ok()) return bm_status_; \
  } while (0)

// `BM_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result or returns its Status.
#define BM_ASSIGN_OR_RETURN(lhs, expr) \
  BM_ASSIGN_OR_RETURN_IMPL(BM_CONCAT(bm_result_, __LINE__), lhs, expr)
#define BM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

// A broken invariant is a bug: crash loudly with where it happened.
#define BM_CHECK(cond)                                                                   \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::cerr << __FILE__ << ":" << __LINE__ << ": CHECK failed: " #cond << std::endl; \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
