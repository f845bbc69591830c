#include "jit/toolchain.h"

namespace kiln::jit {

bool has_angled_include(std::string_view text) {
  for (size_t pos = 0; (pos = text.find("#include", pos)) != std::string_view::npos; pos += 8) {
    size_t open = text.find_first_not_of(" \t", pos + 8);
    if (open != std::string_view::npos && text[open] == '<') return true;
  }
  return false;
}

const char* severity_name(Diagnostic::Severity s) {
  switch (s) {
    case Diagnostic::Severity::kNote: return "note";
    case Diagnostic::Severity::kWarning: return "warning";
    case Diagnostic::Severity::kError: return "error";
    case Diagnostic::Severity::kFatal: return "fatal error";
  }
  return "error";
}

std::string Diagnostic::to_string() const {
  std::string out;
  if (!file.empty()) {
    out += file;
    if (line) out += ":" + std::to_string(line) + ":" + std::to_string(column);
    out += ": ";
  }
  out += severity_name(severity);
  out += ": " + message;
  return out;
}

}  // namespace kiln::jit
