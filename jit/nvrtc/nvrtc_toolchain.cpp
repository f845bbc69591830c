#include "jit/nvrtc/nvrtc_toolchain.h"

#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <regex>

#include "jit/nvrtc/nvjitlink.h"
#include "jit/toolchain_loader.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "support/elf_build_id.h"
#include "support/file_util.h"

namespace kiln::jit {
namespace {

// Options kiln passes to every NVRTC compile; they enter the identity (and so every key).
constexpr const char* k_default_options[] = {"-std=c++17", "-default-device"};
// NVRTC's automatic precompiled header covers a program's first #include, is made on the
// first compile that includes it and reused by later ones in the process. For a toolkit
// header it pays: four kernels including <cuda_fp16.h>, in one process, 13 ms each after the
// first instead of 17.5 (first 30-34 ms instead of 23). For a small header of the op's own it
// only costs: the four bundled ops in a fresh process took 64-66 ms without it, 76-91 with
// it (one-off ctypes timings, this machine, CUDA 13.0). So -pch is passed when the first
// #include names a header in <...>, and the NVRTC has PCH support (12.8+). PCH changes no
// output.
constexpr const char* k_pch_option = "-pch";
// --minimal leaves out what few kernels use (textures, surfaces, device-side runtime calls)
// and so a third of NVRTC's fixed cost: row_softmax to PTX in 19 ms instead of 23, a
// one-line kernel in 10.5 instead of 15 (this machine, CUDA 13.0). A program it omits
// something for fails to compile, and is compiled again without it; a program that compiles
// either way yields byte-identical PTX (checked on every bundled op), so the artifact does
// not depend on which attempt made it. It is not tried for a source that includes a header in
// <...>: the toolkit's headers cost 20 ms (cuda_fp16.h) to 900 ms (CUB) to parse, which dwarfs
// what it saves, and CUB needs what it leaves out (cudaError_t), so that first attempt would
// fail after the whole parse.
constexpr const char* k_minimal_option = "--minimal";

// The identity of the NVRTC toolchain whose library is the file `real_path`: its ELF build id,
// nvJitLink's (it makes the cubins when present), the options kiln adds, and the toolkit's
// headers it compiles against (their version and digest: NVRTC does not say which it read).
Result<std::string> identity_for(const std::string& real_path) {
  auto id = memo_elf_build_id(real_path);
  std::string out = "nvrtc;" + real_path.substr(real_path.find_last_of('/') + 1) + "=" + (id.ok() ? id.value() : "no-build-id");
  out += nvjitlink_identity() + ";options=";
  for (const char* o : k_default_options) out += std::string(o) + " ";
  out += std::string(k_pch_option) + "(first include <...>) " + k_minimal_option + "(no include <...>; else without) ";
  if (auto headers = cuda_headers_near(real_path)) {
    auto headers_id = cuda_headers_identity(*headers);
    if (!headers_id.ok())
      return unavailable("cannot fingerprint the CUDA headers in " + headers->include_dir + ": " + headers_id.status().message());
    out += ";" + headers_id.value();
  } else {
    out += ";cuda-headers=none";
  }
  return out;
}


// True when the first #include of `text` names its header in <...>.
bool first_include_is_angled(std::string_view text) {
  for (size_t pos = 0; (pos = text.find("#include", pos)) != std::string_view::npos; pos += 8) {
    size_t line = text.rfind('\n', pos);
    line = line == std::string_view::npos ? 0 : line + 1;
    if (text.find_first_not_of(" \t", line) != pos) continue;  // not the first thing on its line
    size_t open = text.find_first_not_of(" \t", pos + 8);
    return open != std::string_view::npos && text[open] == '<';
  }
  return false;
}

struct NvrtcApi {
#define KILN_NVRTC(name, ret, params) ret(*name) params = nullptr;
#define KILN_NVRTC_OPTIONAL(name, ret, params) ret(*name) params = nullptr;
#include "jit/nvrtc/nvrtc_symbols.def"
#undef KILN_NVRTC_OPTIONAL
#undef KILN_NVRTC
  std::string path;     // the file that was loaded
  int major = 0, minor = 0;
  std::vector<std::string> header_dirs;  // the toolkit's include folders (-I), after the op's own
};

// "kernel.cu(12): error: identifier "x" is undefined" -> a Diagnostic.
std::vector<Diagnostic> parse_log(const std::string& log) {
  return parse_log_lines(log, {R"(^(.*)\((\d+)\): (error|warning|catastrophic error|remark): (.*)$)", 1, 2, 0, 3, 4});
}

class NvrtcToolchain final : public Toolchain {
 public:
  explicit NvrtcToolchain(NvrtcApi api) : m_api(std::move(api)) {}

  std::string version() const override {
    return "nvrtc " + std::to_string(m_api.major) + "." + std::to_string(m_api.minor) + " (" + m_api.path + ")";
  }

  CompileResult compile(const CompileRequest& request) override {
    auto start = std::chrono::steady_clock::now();
    CompileResult result;
    result.kind = "cuda-module";
    auto fail = [&](const std::string& message) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, message});
      result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return result;
    };
    if (request.language != "cuda") return fail("NVRTC compiles language 'cuda', not '" + request.language + "'");
    if (request.output != CompileRequest::Output::kArtifact)
      return fail("NVRTC makes no precompiled header kiln can keep: its PCH is tied to the process that made it");
    if (request.sources.empty()) return fail(request.label + " has no CUDA source");
    std::vector<int> archs = cuda_archs_in(request.target);  // ascending: builders normalise targets
    if (archs.empty()) return fail("no architecture in target " + request.target);
    CudaModuleImage image;
    image.ptx_sm = archs.front();
    std::string compute = "-arch=compute_" + std::to_string(archs.front());
    if (request.sources.size() > 1) {
      // Relocatable device code: each source to LTO-IR, then nvJitLink links them (optimising
      // across them) into one PTX for the oldest architecture and a cubin for each.
      if (!nvjitlink_available())
        return fail(request.label + " has " + std::to_string(request.sources.size()) +
                    " CUDA sources, which kiln links with nvJitLink (libnvJitLink.so.13 beside NVRTC), and it was not found");
      std::vector<std::string> irs(request.sources.size());
      for (size_t i = 0; i < request.sources.size(); ++i)
        if (!run(request, i, compute, Output::kLtoIr, irs[i], result)) return finish(result, start);
      auto linked = link_lto(irs, archs, cuda_ptx_only(request.target));
      if (!linked.ok()) {
        result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, linked.status().message()});
        return finish(result, start);
      }
      image.ptx = std::move(linked->ptx);
      image.cubins = std::move(linked->cubins);
      result.artifact = encode_cuda_module(image);
      result.success = true;
      add_include_dependencies(request, result);
      return finish(result, start);
    }
    // PTX once, for the oldest architecture (newer GPUs JIT it); then a cubin per listed
    // architecture: linked from that PTX by nvJitLink when it is there (~8 ms each), else
    // compiled again by NVRTC.
    if (!run(request, 0, compute, Output::kPtx, image.ptx, result)) return finish(result, start);
    if (cuda_ptx_only(request.target) || nvjitlink_available()) {
      auto cubins = cubins_for_target(image.ptx, request.target);
      if (!cubins.ok()) {
        result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, cubins.status().message()});
        return finish(result, start);
      }
      image.cubins = std::move(cubins).value();
    } else {
      for (int sm : archs)
        if (!run(request, 0, "-arch=sm_" + std::to_string(sm), Output::kCubin, image.cubins[sm], result))
          return finish(result, start);
    }
    result.artifact = encode_cuda_module(image);
    result.success = true;
    add_include_dependencies(request, result);
    return finish(result, start);
  }

 private:
  enum class Output { kPtx, kCubin, kLtoIr };

  // NVRTC does not report the headers it read: every file under the op's include folders enters
  // the key instead (an over-approximation that never misses a change; the toolkit's headers
  // are in the identity).
  static void add_include_dependencies(const CompileRequest& request, CompileResult& result) {
    for (auto& dir : request.include_dirs) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it); it.increment(ec))
        if (it->is_regular_file()) result.dependencies.push_back(it->path().string());
    }
  }

  static CompileResult finish(CompileResult& r, std::chrono::steady_clock::time_point start) {
    r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return std::move(r);
  }

  // One compile of sources[source], first with --minimal; if that fails, again without it,
  // reporting only what the second attempt said.
  bool run(const CompileRequest& request, size_t source, const std::string& arch_flag, Output output, std::string& out,
           CompileResult& result) {
    size_t diagnostics = result.diagnostics.size(), log = result.log.size();
    if (!has_angled_include(request.sources[source].text)) {
      if (run_once(request, source, arch_flag, output, /*minimal=*/true, out, result)) return true;
      result.diagnostics.resize(diagnostics);
      result.log.resize(log);
    }
    return run_once(request, source, arch_flag, output, /*minimal=*/false, out, result);
  }

  bool run_once(const CompileRequest& request, size_t source, const std::string& arch_flag, Output output, bool minimal,
                std::string& out, CompileResult& result) {
    const SourceFile& src = request.sources[source];
    // Templated entries are instantiated from the first source (as on the CPU).
    const bool names = source == 0;
    void* prog = nullptr;
    if (int rc = m_api.nvrtcCreateProgram(&prog, src.text.c_str(), src.path.c_str(), 0, nullptr, nullptr); rc != 0) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, std::string("nvrtcCreateProgram: ") + m_api.nvrtcGetErrorString(rc)});
      return false;
    }
    std::vector<std::string> options = {arch_flag};
    if (output == Output::kLtoIr) options.push_back("-dlto");  // implies -rdc=true
    options.insert(options.end(), std::begin(k_default_options), std::end(k_default_options));
    if (minimal) options.push_back(k_minimal_option);
    // Only where NVRTC has precompiled headers: an older one fails the compile on the option.
    if (m_api.nvrtcGetPCHHeapSize && first_include_is_angled(src.text)) options.push_back(k_pch_option);
    for (auto& dir : request.include_dirs) options.push_back("-I" + dir);
    for (auto& dir : m_api.header_dirs) options.push_back("-I" + dir);
    for (auto& def : request.defines) options.push_back("-D" + def);
    for (auto& flag : request.flags) options.push_back(flag);
    std::vector<const char*> argv;
    for (auto& o : options) argv.push_back(o.c_str());
    if (names)
      for (auto& expr : request.name_expressions) m_api.nvrtcAddNameExpression(prog, expr.c_str());
    int rc = m_api.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    if (rc == 0 && names && output != Output::kCubin) {
      result.lowered_names.clear();
      for (auto& expr : request.name_expressions) {
        const char* lowered = nullptr;
        if (m_api.nvrtcGetLoweredName(prog, expr.c_str(), &lowered) == 0 && lowered)
          result.lowered_names.emplace_back(expr, lowered);
        else
          result.diagnostics.push_back({Diagnostic::Severity::kError, src.path, 0, 0, "name expression '" + expr + "' names no kernel"});
      }
    }
    size_t log_size = 0;
    m_api.nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size) m_api.nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    if (!log.empty()) {
      result.log += log + "\n";
      for (auto& d : parse_log(log)) {
        // 'could not open source file "x.h"': not cached, since x.h may appear later.
        if (d.message.find("open source file \"") != std::string::npos) {
          size_t q = d.message.find('"');
          result.missing_files.push_back(d.message.substr(q + 1, d.message.find('"', q + 1) - q - 1));
        }
        result.diagnostics.push_back(std::move(d));
      }
    }
    bool ok = rc == 0;
    if (ok) {
      size_t size = 0;
      auto get_size = output == Output::kCubin ? m_api.nvrtcGetCUBINSize
                      : output == Output::kLtoIr ? m_api.nvrtcGetLTOIRSize
                                                 : m_api.nvrtcGetPTXSize;
      auto get = output == Output::kCubin ? m_api.nvrtcGetCUBIN : output == Output::kLtoIr ? m_api.nvrtcGetLTOIR : m_api.nvrtcGetPTX;
      ok = get_size(prog, &size) == 0;
      out.assign(size, '\0');
      ok = ok && get(prog, out.data()) == 0;
      // PTX comes NUL-terminated; the artifact keeps the text.
      if (ok && output == Output::kPtx) while (!out.empty() && out.back() == '\0') out.pop_back();
    } else if (result.diagnostics.empty()) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, src.path, 0, 0, m_api.nvrtcGetErrorString(rc)});
    }
    m_api.nvrtcDestroyProgram(&prog);
    return ok;
  }

  NvrtcApi m_api;
};

std::once_flag g_once;
Toolchain* g_toolchain = nullptr;
Status g_status;
std::string g_identity;

void load() {
  std::vector<std::string> tried;
  void* handle = nullptr;
  std::string loaded;
  const char* explicit_lib = std::getenv("KILN_NVRTC_LIBRARY");
  for (auto& dir : nvrtc_search_paths()) {
    for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      std::string path = explicit_lib && *explicit_lib ? dir : dir.empty() ? name : dir + "/" + name;
      tried.push_back(path);
      handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        loaded = path;
        break;
      }
    }
    if (handle) break;
  }
  // In a process running with LD_PRELOAD=$(kiln nvrtc --preload), asking for libnvrtc.so.13 by
  // name answers with kiln's own NVRTC library: kiln's ops then use the real NVRTC behind it
  // (their compiles are kiln's artifacts already; caching them twice would only cost).
  if (handle) {
    using RealPath = const char* (*)();
    if (auto real_path = reinterpret_cast<RealPath>(::dlsym(handle, "kiln_nvrtc_preload_real_library"))) {
      const char* path = real_path();
      void* real = path ? ::dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
      if (real) {
        handle = real;
        loaded = path;
      }
    }
  }
  if (!handle) {
    std::string where;
    for (auto& t : tried) where += (where.empty() ? "" : ", ") + t;
    g_status = unavailable("CUDA targets need NVRTC (libnvrtc.so.13 or .12), and none was found; kiln looked at " + where +
                           " (set CUDA_HOME to the CUDA toolkit)");
    return;
  }
  NvrtcApi api;
#define KILN_NVRTC(name, ret, params)                                                                      \
  api.name = reinterpret_cast<ret(*) params>(::dlsym(handle, #name));                                       \
  if (!api.name) {                                                                                          \
    g_status = unavailable(loaded + " has no " #name ": an NVRTC older than kiln supports (CUDA 12 or 13)"); \
    return;                                                                                                 \
  }
#define KILN_NVRTC_OPTIONAL(name, ret, params) api.name = reinterpret_cast<ret(*) params>(::dlsym(handle, #name));
#include "jit/nvrtc/nvrtc_symbols.def"
#undef KILN_NVRTC_OPTIONAL
#undef KILN_NVRTC
  api.nvrtcVersion(&api.major, &api.minor);
  // The file dlopen actually mapped (a symlink's target), for its build id.
  struct link_map* map = nullptr;
  std::string real = loaded;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) real = map->l_name;
  api.path = real;
  if (auto headers = cuda_headers_near(real)) api.header_dirs = headers->dirs;
  auto identity = identity_for(real);
  if (!identity.ok()) {
    g_status = identity.status();
    return;
  }
  g_identity = identity.value();
  g_toolchain = new NvrtcToolchain(std::move(api));
}

}  // namespace

std::vector<std::string> nvrtc_search_paths() {
  std::vector<std::string> out;
  // KILN_NVRTC_LIBRARY names the library file itself, and then it is the only place looked.
  if (const char* lib = std::getenv("KILN_NVRTC_LIBRARY"); lib && *lib) return {std::string(lib)};
  for (auto& root : cuda_toolkit_roots()) out.push_back(root + "/lib64");
  out.push_back("");  // the dynamic loader's own search path
  return out;
}

Result<Toolchain*> load_nvrtc_toolchain() {
  std::call_once(g_once, load);
  if (!g_toolchain) return g_status;
  return g_toolchain;
}

Result<std::string> nvrtc_toolchain_identity() {
  // Read, not loaded: the hit path must not map a compiler. The file the loader would pick
  // (its real name carries the full version, libnvrtc.so.13.0.48) and its ELF build id.
  static std::once_flag once;
  static Result<std::string> identity = not_found("");
  std::call_once(once, [] {
    const char* explicit_lib = std::getenv("KILN_NVRTC_LIBRARY");
    for (auto& dir : nvrtc_search_paths()) {
      if (dir.empty()) continue;
      for (const char* name : {"libnvrtc.so.13", "libnvrtc.so.12"}) {
        std::error_code ec;
        auto real = std::filesystem::canonical(explicit_lib && *explicit_lib ? dir : dir + "/" + name, ec);
        if (ec) continue;
        identity = identity_for(real.string());
        return;
      }
    }
    // Not in a known folder: load it to learn what the loader finds.
    auto t = load_nvrtc_toolchain();
    identity = t.ok() ? Result<std::string>(g_identity) : Result<std::string>(t.status());
  });
  return identity;
}

}  // namespace kiln::jit
