#include "jit/hiprtc/hiprtc_toolchain.h"

#include <string.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "jit/hiprtc/hiprtc_wire.h"
#include "support/elf_build_id.h"
#include "support/file_util.h"
#include "support/install_paths.h"
#include "support/subprocess.h"

namespace kiln::jit {
namespace {

bool readable(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// Runs the helper on `request`: the reply's bytes, or why there are none (it could not start,
// it was killed by a signal, it exited non-zero).
Result<std::string> run_helper(const std::string& helper, const std::string& request, const std::string& arch) {
  KILN_ASSIGN_OR_RETURN(SubprocessResult r, run_subprocess({helper}, request));
  if (r.signal)
    return Status(StatusCode::kCompileError,
                  "hiprtc crashed (" + std::string(strsignal(r.signal)) + (r.err.empty() ? "" : ": " + r.err) + ") compiling for " + arch +
                      ": this hiprtc does not handle that architecture (Debian's is built on LLVM 15 and aborts for gfx942). "
                      "kiln ran it in a helper process, so only this compile failed; the in-process Clang toolchain "
                      "(the default: unset KILN_HIP_TOOLCHAIN) builds " + arch);
  if (r.exit_code != 0) return Status(StatusCode::kInternal, "hiprtc: the helper " + helper + " " + r.how_it_ended() + ": " + r.err);
  return std::move(r.out);
}

// "kernel.cu:12:3: error: message" (Clang's form, which hiprtc's log uses) -> diagnostics.
std::vector<Diagnostic> parse_log(const std::string& log) {
  return parse_log_lines(log, {R"(^(.*):(\d+):(\d+): (error|warning|fatal error|note): (.*)$)", 1, 2, 3, 4, 5});
}

class HiprtcToolchain final : public Toolchain {
 public:
  HiprtcToolchain(std::string library, std::string helper) : m_library(std::move(library)), m_helper(std::move(helper)) {}
  std::string version() const override { return "hiprtc (" + m_library + ", in the helper " + m_helper + ")"; }

  CompileResult compile(const CompileRequest& request) override {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "hsaco";
    auto done = [&]() {
      result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return result;
    };
    auto fail = [&](const std::string& message) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, message});
      return done();
    };
    if (request.language != "hip") return fail("the hiprtc toolchain compiles hip targets, not " + request.target);
    if (request.sources.size() != 1) return fail("hiprtc compiles one source per program; the Clang toolchain (the default) links several");
    HiprtcRequest q;
    q.library = m_library;
    q.arch = request.target.substr(request.target.find(':') + 1);
    q.options = {"-O3", "-std=c++17"};
    for (auto& d : request.defines) q.options.push_back("-D" + d);
    q.options.insert(q.options.end(), request.flags.begin(), request.flags.end());
    const SourceFile& source = request.sources.front();
    q.source_name = source.path;
    q.source = "#include \"kiln/hiprtc_prelude.h\"\n#line 1 \"" + source.path + "\"\n" + source.text;
    // hiprtc reads no file itself here: every file of the include folders is handed over by its
    // name relative to its folder, and enters the key (as for NVRTC, which reports none either).
    for (auto& dir : request.include_dirs) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it); it.increment(ec)) {
        if (!it->is_regular_file()) continue;
        auto text = read_file(it->path().string());
        if (!text.ok()) continue;
        q.headers.emplace_back(std::filesystem::relative(it->path(), dir).string(), std::move(text).value());
        result.dependencies.push_back(it->path().string());
      }
    }
    q.name_expressions = request.name_expressions;
    auto bytes = run_helper(m_helper, encode_hiprtc_request(q), q.arch);
    if (!bytes.ok()) return fail(bytes.status().message());
    auto reply = decode_hiprtc_reply(*bytes);
    if (!reply.ok()) return fail("hiprtc: the helper's reply is unreadable: " + reply.status().message());
    result.log = reply->log;
    result.diagnostics = parse_log(reply->log);
    if (!reply->success) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, reply->error});
      return done();
    }
    result.artifact = std::move(reply->code);
    result.lowered_names = std::move(reply->lowered_names);
    result.success = true;
    return done();
  }

 private:
  std::string m_library, m_helper;
};

}  // namespace

Result<std::string> hiprtc_library_path() {
  if (const char* env = std::getenv("KILN_HIPRTC_LIBRARY"); env && *env) {
    if (readable(env)) return std::string(env);
    return unavailable("KILN_HIPRTC_LIBRARY=" + std::string(env) + " is not a readable file");
  }
  std::string looked;
  for (const char* dir : {"/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"})
    for (const char* name : {"libhiprtc.so.6", "libamdhip64.so.5"}) {
      std::string path = std::string(dir) + "/" + name;
      if (readable(path)) return path;
      looked += (looked.empty() ? "" : ", ") + path;
    }
  return unavailable("no hiprtc: looked for " + looked + " (install ROCm or Debian's libamdhip64-5, or set KILN_HIPRTC_LIBRARY)");
}

std::string hiprtc_helper_path() { return find_kiln_file("kiln-hiprtc", "KILN_HIPRTC_HELPER", KILN_HIPRTC_HELPER_BUILD_PATH); }

Result<std::string> hiprtc_toolchain_identity() {
  // Once per process, as the other identities: a hit asks for it on every first use of an op.
  static std::once_flag once;
  static Result<std::string> identity = not_found("");
  std::call_once(once, [] {
    auto library = hiprtc_library_path();
    if (!library.ok()) {
      identity = library.status();
      return;
    }
    std::string helper = hiprtc_helper_path();
    std::string real = std::filesystem::weakly_canonical(*library).string();
    auto lib_id = memo_elf_build_id(real);
    auto helper_id = memo_elf_build_id(helper);
    if (!lib_id.ok()) identity = unavailable("hiprtc: cannot read " + real + ": " + lib_id.status().message());
    else if (!helper_id.ok()) identity = unavailable("hiprtc: no helper at " + helper + " (" + helper_id.status().message() + ")");
    else identity = "hiprtc;" + std::filesystem::path(real).filename().string() + "=" + *lib_id + ";kiln-hiprtc=" + *helper_id;
  });
  return identity;
}

Result<Toolchain*> load_hiprtc_toolchain() {
  static std::once_flag once;
  static Result<Toolchain*> loaded = unavailable("");
  std::call_once(once, [] {
    auto library = hiprtc_library_path();
    if (!library.ok()) {
      loaded = library.status();
      return;
    }
    std::string helper = hiprtc_helper_path();
    if (::access(helper.c_str(), X_OK) != 0) {
      loaded = unavailable("hiprtc: the helper kiln-hiprtc is not at " + helper + " (set KILN_HIPRTC_HELPER)");
      return;
    }
    loaded = static_cast<Toolchain*>(new HiprtcToolchain(*library, helper));
  });
  return loaded;
}

}  // namespace kiln::jit
