// Status and StatusOr: error values that carry one human-readable line and
// the kind of failure it is.
//
// gptc does not use exceptions. Every fallible operation returns a Status
// (or a StatusOr<T>) whose message names the thing at fault, e.g.
// "%h3_qkv: dot contracting dim 2 has size 768, rhs dim 0 has size 2304".
// Callers that act on what went wrong (a tool's exit code, a retry) branch
// on code(), never on the message's text.
#ifndef GPTC_COMPILER_SUPPORT_STATUS_H_
#define GPTC_COMPILER_SUPPORT_STATUS_H_

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace gptc {

// What kind of failure a Status is. Kept small: a kind exists when some
// caller treats it differently (the tools map kUsage to exit code 2).
enum class StatusCode : uint8_t {
  kOk = 0,
  kUnknown,      // not classified (what Error(...) makes)
  kUsage,        // a bad flag, value or argument: the command line is at fault
  kNotFound,     // a file, entry or name that does not exist
  kCorrupt,      // a file's content is malformed or inconsistent
  kResource,     // out of memory or over a budget
  kUnavailable,  // a device or a peer failed or went away (a closed connection)
  kTimedOut,     // a wait passed its deadline
  kInternal,     // a defect of gptc itself
};

// "usage", "not found", ...: for tests and diagnostics, never for messages.
constexpr std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kUnknown: return "unknown";
    case StatusCode::kUsage: return "usage";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kResource: return "resource";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kTimedOut: return "timed out";
    case StatusCode::kInternal: return "internal";
  }
  return "invalid";
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  // An error of kind `code`; kOk is not an error and reads as kUnknown.
  static Status Error(std::string message, StatusCode code = StatusCode::kUnknown) {
    return Status(std::move(message), code == StatusCode::kOk ? StatusCode::kUnknown : code);
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns this error with `prefix: ` in front, so callers can add context
  // ("thunk 41: ...") without losing the original subject or its kind.
  Status WithPrefix(std::string_view prefix) const {
    if (ok()) return *this;
    return Error(fmt::format("{}: {}", prefix, message_), code_);
  }
  // Returns this error reclassified as `code` (an ok Status stays ok), for a
  // caller that knows better what the failure means to it.
  Status WithCode(StatusCode code) const {
    if (ok()) return *this;
    return Error(message_, code);
  }

 private:
  Status(std::string message, StatusCode code) : message_(std::move(message)), code_(code) {}
  std::string message_;
  StatusCode code_ = StatusCode::kOk;
};

template <typename... Args>
Status Error(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...));
}

// Errors of a known kind, formatted like Error(...).
template <typename... Args>
Status UsageError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kUsage);
}
template <typename... Args>
Status NotFoundError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kNotFound);
}
template <typename... Args>
Status CorruptError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kCorrupt);
}
template <typename... Args>
Status ResourceError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kResource);
}
template <typename... Args>
Status UnavailableError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...),
                       StatusCode::kUnavailable);
}
template <typename... Args>
Status TimedOutError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kTimedOut);
}
template <typename... Args>
Status InternalError(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...), StatusCode::kInternal);
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr built from an ok Status has no value");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gptc

#define GPTC_CONCAT_INNER(a, b) a##b
#define GPTC_CONCAT(a, b) GPTC_CONCAT_INNER(a, b)

// Returns early from the enclosing function if `expr` (a Status) failed.
#define RETURN_IF_ERROR(expr)               \
  do {                                      \
    ::gptc::Status gptc_status_ = (expr);   \
    if (!gptc_status_.ok()) return gptc_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, F());` binds the value of a StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(GPTC_CONCAT(gptc_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#endif  // GPTC_COMPILER_SUPPORT_STATUS_H_
