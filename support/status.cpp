#include "support/status.h"

#include <cstring>

namespace kiln {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCompileError: return "compile error";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kInternal: return "internal error";
    case StatusCode::kPermissionDenied: return "permission denied";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(m_code)) + ": " + m_message;
}

Status errno_status(const std::string& what, int err) {
  return io_error(what + ": " + std::strerror(err));
}

}  // namespace kiln
