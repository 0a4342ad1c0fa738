// Status and Result<T>: how every pipecast library reports an expected failure.
//
// A Status is either OK or carries a code from a small fixed set and a message
// written for the person who will read it: it names the subject (a file, a JSON
// path, a stage, an op) and the setting that controls it. Libraries return
// these and never print or exit; tools map codes to exit codes.
//
// Thread-safety: values; safe to copy between threads.
#ifndef PIPECAST_BASE_STATUS_H_
#define PIPECAST_BASE_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace pipecast {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the input is wrong: malformed file, bad value
  kNotFound,            // a file, preset or name does not exist
  kFailedPrecondition,  // valid input, but it cannot be done (deadlock, OOM)
  kUnavailable,         // hardware or build feature missing (no GPU, no CUDA)
  kInternal,            // a bug in pipecast
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status FailedPrecondition(std::string msg) {
    return Status(StatusCode::kFailedPrecondition, std::move(msg));
  }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithPrefix(const std::string& prefix) const {
    if (ok()) return *this;
    return Status(code_, prefix + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Status::Internal("Result built from OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
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

}  // namespace pipecast

// Propagates a non-OK Status out of the enclosing function.
#define PIPECAST_RETURN_IF_ERROR(expr) \
  do {                                 \
    ::pipecast::Status _st = (expr);   \
    if (!_st.ok()) return _st;         \
  } while (0)

// Evaluates `expr`, a Result<T>; returns its Status from the enclosing
// function when it is not OK, else declares or assigns `lhs` from its value:
//   PIPECAST_ASSIGN_OR_RETURN(Schedule schedule, MakeSchedule(kind, p, m));
// `lhs` may not contain a bare comma (use auto for std::map<K, V>).
#define PIPECAST_ASSIGN_OR_RETURN(lhs, ...) \
  PIPECAST_ASSIGN_OR_RETURN_IMPL_(PIPECAST_STATUS_CONCAT_(_result_, __LINE__), lhs, __VA_ARGS__)
#define PIPECAST_STATUS_CONCAT_INNER_(a, b) a##b
#define PIPECAST_STATUS_CONCAT_(a, b) PIPECAST_STATUS_CONCAT_INNER_(a, b)
#define PIPECAST_ASSIGN_OR_RETURN_IMPL_(result, lhs, ...) \
  auto result = (__VA_ARGS__);                            \
  if (!result.ok()) return result.status();               \
  lhs = std::move(*result)

#endif  // PIPECAST_BASE_STATUS_H_
