// Status and Result<T>: kiln's one error model (see STYLE.md, "one error model").
//
// A Status is ok or carries a code and a message that names the values involved. A Result<T>
// holds a T or a non-ok Status. A cache miss is never an error: lookups return
// std::optional. Exceptions never cross a kiln API.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: a spec, a flag, a target string
  kNotFound,         // an op, a file, a kernel that does not exist
  kCompileError,     // the compiler rejected the source; diagnostics carry the details
  kUnavailable,      // a capability is absent: a toolchain library, a device
  kDataLoss,         // stored bytes failed an integrity check
  kIoError,          // a system call failed
  kInternal,
  kPermissionDenied,  // a server or the system refused these credentials or this user
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : m_code(code), m_message(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return m_code == StatusCode::kOk; }
  StatusCode code() const { return m_code; }
  const std::string& message() const { return m_message; }
  // "compile error: ..." for logs; the message alone for users who know the context.
  std::string to_string() const;

 private:
  StatusCode m_code = StatusCode::kOk;
  std::string m_message;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status permission_denied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
// errno-based I/O error: "open /x/y: No such file or directory".
Status errno_status(const std::string& what, int err);

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_value(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : m_value(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(m_value).ok() && "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(m_value); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(m_value);
  }
  T& value() & { return std::get<T>(m_value); }
  const T& value() const& { return std::get<T>(m_value); }
  // By value, so `for (auto& x : f().value())` does not dangle.
  T value() && { return std::get<T>(std::move(m_value)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> m_value;
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Return the Status from the enclosing function when `expr` is not ok.
#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::kiln::Status kiln_status_ = (expr);     \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

// `KILN_ASSIGN_OR_RETURN(auto x, f());` binds the value of a Result or returns its Status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
