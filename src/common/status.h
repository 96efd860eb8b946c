// Status and Result<T>: expected failures as values.
//
// Contract: functions that can fail for reasons outside the program's control (a bad file, a bad
// request, an unsupported dtype) return Status or Result<T>. Invariant violations use PAGODA_CHECK
// (check.h) instead. Messages name the offending object (tensor name, byte offset, parameter).
#pragma once

#include <fmt/format.h>

#include <string>
#include <utility>
#include <variant>

namespace pagoda {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // caller passed something wrong (bad parameter, bad request)
  kNotFound,           // a named thing (file, tensor, key) does not exist
  kOutOfRange,         // an index/length beyond a limit (context length, file size)
  kDataLoss,           // a file is truncated or corrupt
  kUnimplemented,      // valid input we do not support (yet): a dtype, an architecture
  kResourceExhausted,  // memory, KV blocks, queue capacity
  kCancelled,
  kInternal,
  kIoError,
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
  // "invalid argument: <message>"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <class... Args>
Status make_status(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kInvalidArgument, f, std::forward<Args>(args)...);
}
template <class... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kNotFound, f, std::forward<Args>(args)...);
}
template <class... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kDataLoss, f, std::forward<Args>(args)...);
}
template <class... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kUnimplemented, f, std::forward<Args>(args)...);
}
template <class... Args>
Status out_of_range(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kOutOfRange, f, std::forward<Args>(args)...);
}
template <class... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kResourceExhausted, f, std::forward<Args>(args)...);
}
template <class... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
  return make_status(StatusCode::kIoError, f, std::forward<Args>(args)...);
}

// Result<T>: either a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
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

}  // namespace pagoda

#define PAGODA_CONCAT_INNER(a, b) a##b
#define PAGODA_CONCAT(a, b) PAGODA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) is not ok.
#define PAGODA_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::pagoda::Status pagoda_status_ = (expr);     \
    if (!pagoda_status_.ok()) return pagoda_status_; \
  } while (0)

// `lhs = value of expr` (a Result<T>), or returns its Status.
#define PAGODA_ASSIGN_OR_RETURN(lhs, expr)                                  \
  auto PAGODA_CONCAT(pagoda_result_, __LINE__) = (expr);                    \
  if (!PAGODA_CONCAT(pagoda_result_, __LINE__).ok())                        \
    return PAGODA_CONCAT(pagoda_result_, __LINE__).status();                \
  lhs = std::move(PAGODA_CONCAT(pagoda_result_, __LINE__)).value()
