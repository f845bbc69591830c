#include "jit/toolchain.h"

#include <unistd.h>

#include <cstdlib>
#include <regex>
#include <set>

#include "support/file_util.h"
#include "support/install_paths.h"

namespace kiln::jit {

std::vector<std::string_view> angled_includes(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; (pos = text.find("#include", pos)) != std::string_view::npos; pos += 8) {
    size_t open = text.find_first_not_of(" \t", pos + 8);
    if (open == std::string_view::npos || text[open] != '<') continue;
    size_t close = text.find_first_of(">\n", open);
    if (close == std::string_view::npos || text[close] != '>') continue;
    out.push_back(text.substr(open + 1, close - open - 1));
  }
  return out;
}

bool has_angled_include(std::string_view text) { return !angled_includes(text).empty(); }

bool is_cuda_source(std::string_view path) {
  return (path.size() > 3 && path.substr(path.size() - 3) == ".cu") || (path.size() > 4 && path.substr(path.size() - 4) == ".cuh");
}

bool has_cuda_sources(const CompileRequest& request) {
  if (!request.host_library) return false;
  for (auto& s : request.sources)
    if (is_cuda_source(s.path)) return true;
  return false;
}

int cuda_arch_code(std::string_view arch) {
  bool ptx = arch.rfind("compute_", 0) == 0;
  if (!ptx && arch.rfind("sm_", 0) != 0) return 0;
  std::string digits(arch.substr(ptx ? 8 : 3));
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  int sm = std::atoi(digits.c_str());
  return ptx ? -sm : sm;
}

std::vector<int> cuda_device_sms(const CompileRequest& request) {
  std::set<int> sms;
  for (auto& arch : request.cuda_archs)
    if (int code = cuda_arch_code(arch)) sms.insert(code < 0 ? -code : code);
  return {sms.begin(), sms.end()};
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

std::string spirv_helper_path() { return find_kiln_file("kiln-spirv", "KILN_SPIRV_HELPER", KILN_SPIRV_HELPER_BUILD_PATH); }

const std::string& clang_driver_path() {
  // Once: every compile's driver is made from it. A bundled prefix counts only when it holds
  // Clang's resource folder, so an empty or partial one falls back to the system's LLVM.
  static const std::string path = [] {
    std::string bundled = find_kiln_file("llvm", "KILN_LLVM_DIR", "");
    if (!bundled.empty() && ::access((bundled + "/lib/clang/" KILN_LLVM_VERSION_MAJOR "/include").c_str(), R_OK) == 0)
      return bundled + "/bin/clang++";
    return std::string(KILN_CLANG_EXECUTABLE);
  }();
  return path;
}

std::string clang_resource_dir() {
  const std::string& driver = clang_driver_path();
  if (driver.empty()) return "";
  return dirname_of(dirname_of(driver)) + "/lib/clang/" KILN_LLVM_VERSION_MAJOR;
}

std::string clang_builtins_path() {
  std::string resource = clang_resource_dir();
  return resource.empty() ? "" : resource + "/lib/linux/libclang_rt.builtins-x86_64.a";
}

}  // namespace kiln::jit
