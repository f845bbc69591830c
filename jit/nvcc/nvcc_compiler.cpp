#include "jit/nvcc/nvcc_compiler.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "support/cuda_toolkit.h"
#include "support/file_memo.h"
#include "support/file_util.h"
#include "support/subprocess.h"

namespace kiln::jit {
namespace {

bool executable(const std::string& path) { return ::access(path.c_str(), X_OK) == 0; }

// The host compiler nvcc runs (the first g++ on $PATH, as nvcc finds it without -ccbin), its
// symlinks resolved: its version changes the host code of the object.
std::string host_compiler() {
  const char* path = std::getenv("PATH");
  std::string dirs = path && *path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string candidate = dirs.substr(start, end - start) + "/g++";
    if (end > start && executable(candidate)) {
      std::error_code ec;
      auto real = std::filesystem::canonical(candidate, ec);
      return ec ? candidate : real.string();
    }
    start = end + 1;
  }
  return "";
}

std::string hash_or_none(const std::string& path) {
  auto hash = memo_file_hash(path);
  return hash.ok() ? hash->hex() : std::string("none");
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// nvcc's make-style dependency list ("obj: a.cu b.h \\\n c.h"), escaped spaces kept.
std::vector<std::string> parse_depfile(const std::string& text) {
  std::vector<std::string> out;
  size_t colon = text.find(": ");
  if (colon == std::string::npos) return out;
  std::string current;
  auto flush = [&] {
    if (!current.empty()) out.push_back(absolute_path(current));
    current.clear();
  };
  for (size_t i = colon + 2; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      flush();
      ++i;
    } else if (c == '\\' && i + 1 < text.size() && text[i + 1] == ' ') {
      current += ' ';
      ++i;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      flush();
    } else {
      current += c;
    }
  }
  flush();
  return out;
}

}  // namespace

std::optional<Nvcc> find_nvcc() {
  // The toolkit Clang's CUDA path uses (its headers, libdevice): never another release's nvcc.
  {
    const std::string root = cuda_toolkit_root();
    std::string path = root + "/bin/nvcc";
    if (!executable(path)) return std::nullopt;
    Nvcc n;
    n.path = path;
    auto headers = cuda_headers_at(root);
    n.version = headers ? headers->version : "unknown";
    std::string host = host_compiler();
    n.identity = "nvcc " + n.version + " (" + path + ");nvcc=" + hash_or_none(path) + ";cicc=" + hash_or_none(root + "/nvvm/bin/cicc") +
                 ";ptxas=" + hash_or_none(root + "/bin/ptxas") + ";cudafe=" + hash_or_none(root + "/bin/cudafe++") +
                 ";host=" + (host.empty() ? std::string("none") : host + "=" + hash_or_none(host));
    return n;
  }
  return std::nullopt;
}

std::string nvcc_search_text() {
  const char* home = std::getenv("CUDA_HOME");
  const char* path = std::getenv("CUDA_PATH");
  std::string from = home && *home ? "$CUDA_HOME" : path && *path ? "$CUDA_PATH" : "$CUDA_HOME and $CUDA_PATH unset";
  return cuda_toolkit_root() + "/bin/nvcc, in the toolkit kiln uses: " + from;
}

std::vector<std::string> nvcc_arguments(const Nvcc& nvcc, const CompileRequest& request, size_t index, const std::string& output,
                                        const std::string& depfile) {
  std::vector<std::string> a = {nvcc.path, "-c", request.sources[index].path, "-o", output, "-MD", "-MF", depfile};
  for (auto& dir : request.include_dirs) a.push_back("-I" + dir);
  for (auto& def : request.defines) a.push_back("-D" + def);
  const auto& flags = request.cuda_flags;
  for (size_t i = 0; i < flags.size(); ++i) {
    const std::string& f = flags[i];
    // Options with their value in the next word.
    if ((f == "-isystem" || f == "-I" || f == "-D" || f == "-U" || f == "-include") && i + 1 < flags.size()) {
      a.insert(a.end(), {f, flags[++i]});
    } else if (f == "-fgpu-flush-denormals-to-zero") {
      a.push_back("--ftz=true");
    } else if (f == "-fgpu-approx-transcendentals") {
      a.insert(a.end(), {"--prec-div=false", "--prec-sqrt=false"});
    } else if (f == "-ffp-contract=fast") {
      a.push_back("--fmad=true");
    } else if (f == "-ffp-contract=off") {
      a.push_back("--fmad=false");
    } else if (starts_with(f, "-D") || starts_with(f, "-U") || starts_with(f, "-I") || starts_with(f, "-std=") || starts_with(f, "-O") ||
               f == "-g") {
      a.push_back(f);  // nvcc takes these as they are (-O and -g are for the host code, as nvcc's own)
    } else {
      a.insert(a.end(), {"-Xcompiler", f});  // -f..., -W..., -m...: the host compiler's
    }
  }
  for (auto& def : request.unit_defines) a.push_back("-D" + def);
  for (auto& arch : request.cuda_archs) {
    bool ptx = starts_with(arch, "compute_");
    std::string number = arch.substr(ptx ? 8 : 3);
    a.push_back("-gencode=arch=compute_" + number + ",code=" + (ptx ? "compute_" : "sm_") + number);
  }
  a.insert(a.end(), {"--expt-relaxed-constexpr", "-Xcompiler", "-fPIC"});
  return a;
}

CompileResult compile_with_nvcc(const Nvcc& nvcc, const CompileRequest& request, size_t index) {
  auto start = std::chrono::steady_clock::now();
  CompileResult result;
  result.kind = "host-object";
  auto done = [&] {
    result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return result;
  };
  const std::string& source = request.sources[index].path;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-nvcc-XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    result.diagnostics.push_back({Diagnostic::Severity::kError, source, 0, 0, "cannot make a folder for nvcc's output in " + pattern});
    return done();
  }
  const std::string dir = pattern, object = dir + "/unit.o", depfile = dir + "/unit.d";
  auto args = nvcc_arguments(nvcc, request, index, object, depfile);
  auto ran = run_subprocess(args, "");
  if (!ran.ok()) {
    result.diagnostics.push_back({Diagnostic::Severity::kError, source, 0, 0, "nvcc did not start: " + ran.status().message()});
  } else {
    result.log = ran->out + ran->err;
    if (!result.log.empty() && result.log.back() != '\n') result.log += '\n';
    // EDG's "file(line): error: ..." and the host compiler's "file:line:col: error: ...".
    result.diagnostics = parse_log_lines(result.log, {R"(^(.*)\((\d+)\): (error|warning|catastrophic error|remark)( #[0-9]+-D)?: (.*)$)", 1, 2, 0, 3, 5});
    for (auto& d : parse_log_lines(result.log, {R"(^(.*):(\d+):(\d+): (error|warning|fatal error|note): (.*)$)", 1, 2, 3, 4, 5}))
      result.diagnostics.push_back(std::move(d));
    auto bytes = read_file(object);
    result.success = ran->exit_code == 0 && ran->signal == 0 && bytes.ok();
    if (result.success) {
      result.artifact = std::move(bytes).value();
      if (auto deps = read_file(depfile); deps.ok())
        for (auto& d : parse_depfile(deps.value()))
          if (d != absolute_path(source)) result.dependencies.push_back(std::move(d));
    } else if (result.diagnostics.empty()) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, source, 0, 0, "nvcc " + ran->how_it_ended()});
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return done();
}

}  // namespace kiln::jit
