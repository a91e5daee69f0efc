// Status and StatusOr: error values that carry one human-readable line.
//
// gptc does not use exceptions. Every fallible operation returns a Status
// (or a StatusOr<T>) whose message names the thing at fault, e.g.
// "%h3_qkv: dot contracting dim 2 has size 768, rhs dim 0 has size 2304".
#ifndef GPTC_COMPILER_SUPPORT_STATUS_H_
#define GPTC_COMPILER_SUPPORT_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace gptc {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message), true); }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Returns this error with `prefix: ` in front, so callers can add context
  // ("thunk 41: ...") without losing the original subject.
  Status WithPrefix(std::string_view prefix) const {
    if (ok()) return *this;
    return Error(fmt::format("{}: {}", prefix, message_));
  }

 private:
  Status(std::string message, bool failed) : message_(std::move(message)), failed_(failed) {}
  std::string message_;
  bool failed_ = false;
};

template <typename... Args>
Status Error(fmt::format_string<Args...> format, Args&&... args) {
  return Status::Error(fmt::format(format, std::forward<Args>(args)...));
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
