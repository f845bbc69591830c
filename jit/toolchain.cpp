#include "jit/toolchain.h"

#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "support/file_util.h"
#include "support/install_paths.h"

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

std::vector<Diagnostic> parse_log_lines(const std::string& log, const LogLineFormat& format) {
  const std::regex pattern(format.pattern);
  std::vector<Diagnostic> out;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    std::string line = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? log.size() : end + 1;
    std::smatch m;
    if (!std::regex_match(line, m, pattern)) continue;
    Diagnostic d;
    d.file = m[format.file];
    d.line = static_cast<unsigned>(std::stoul(m[format.line]));
    if (format.column) d.column = static_cast<unsigned>(std::stoul(m[format.column]));
    std::string severity = m[format.severity];
    d.severity = severity == "warning"                       ? Diagnostic::Severity::kWarning
                 : severity == "note" || severity == "remark" ? Diagnostic::Severity::kNote
                 : severity == "error"                        ? Diagnostic::Severity::kError
                                                              : Diagnostic::Severity::kFatal;
    d.message = m[format.message];
    out.push_back(std::move(d));
  }
  return out;
}

std::string spirv_helper_path() {
  if (const char* env = std::getenv("KILN_SPIRV_HELPER"); env && *env) return env;
  // Installed: <prefix>/lib/kiln/kiln-spirv beside the toolchain library, or from bin/kiln;
  // a build tree: bin/kiln-spirv beside lib/.
  std::string dir = own_object_dir();
  for (const std::string& candidate : {dir + "/kiln-spirv", dir + "/kiln/kiln-spirv", dir + "/../lib/kiln/kiln-spirv", dir + "/../bin/kiln-spirv"})
    if (::access(candidate.c_str(), X_OK) == 0) return absolute_path(candidate);
  return KILN_SPIRV_HELPER_BUILD_PATH;
}

}  // namespace kiln::jit
