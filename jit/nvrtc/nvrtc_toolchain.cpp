#include "jit/nvrtc/nvrtc_toolchain.h"

#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <filesystem>
#include <regex>

#include "jit/toolchain_loader.h"
#include "support/cuda_module_format.h"
#include "support/file_util.h"

namespace kiln::jit {
namespace {

// Options kiln passes to every NVRTC compile; they enter the identity (and so every key).
// -pch: NVRTC's own precompiled headers, kept in the process and reused by every compile
// that includes the same headers: a kernel including <cuda_fp16.h> compiles (PTX + cubin) in
// 27.5 ms instead of 34 ms once warm (this machine, CUDA 13.0, 2026-11-22).
constexpr const char* k_default_options[] = {"-std=c++17", "-default-device", "-pch"};

std::string default_options_identity() {
  std::string out = ";options=";
  for (const char* o : k_default_options) out += std::string(o) + " ";
  return out;
}

struct NvrtcApi {
#define KILN_NVRTC(name, ret, params) ret(*name) params = nullptr;
#include "jit/nvrtc/nvrtc_symbols.def"
#undef KILN_NVRTC
  std::string path;     // the file that was loaded
  int major = 0, minor = 0;
};

// "kernel.cu(12): error: identifier "x" is undefined" -> a Diagnostic.
std::vector<Diagnostic> parse_log(const std::string& log) {
  static const std::regex k_line(R"(^(.*)\((\d+)\): (error|warning|catastrophic error|remark): (.*)$)");
  std::vector<Diagnostic> out;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    std::string line = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? log.size() : end + 1;
    std::smatch m;
    if (!std::regex_match(line, m, k_line)) continue;
    Diagnostic d;
    d.file = m[1];
    d.line = static_cast<unsigned>(std::stoul(m[2]));
    d.severity = m[3] == "warning" ? Diagnostic::Severity::kWarning
                 : m[3] == "remark" ? Diagnostic::Severity::kNote
                 : m[3] == "error"  ? Diagnostic::Severity::kError
                                    : Diagnostic::Severity::kFatal;
    d.message = m[4];
    out.push_back(std::move(d));
  }
  return out;
}

// nvJitLink, for PTX -> cubin without a second front-end pass. Optional.
struct JitLinkApi {
  int (*create)(void**, uint32_t, const char**) = nullptr;
  int (*destroy)(void**) = nullptr;
  int (*add_data)(void*, int, const void*, size_t, const char*) = nullptr;
  int (*complete)(void*) = nullptr;
  int (*cubin_size)(void*, size_t*) = nullptr;
  int (*cubin)(void*, void*) = nullptr;
  int (*log_size)(void*, size_t*) = nullptr;
  int (*log)(void*, char*) = nullptr;
};
constexpr int k_jitlink_input_ptx = 2;  // NVJITLINK_INPUT_PTX

class NvrtcToolchain final : public Toolchain {
 public:
  NvrtcToolchain(NvrtcApi api, std::optional<JitLinkApi> link) : m_api(std::move(api)), m_link(std::move(link)) {}

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
    if (request.sources.size() != 1)
      return fail("NVRTC compiles one translation unit; " + request.label + " has " + std::to_string(request.sources.size()));
    // "cuda:sm_80,sm_90" -> {80, 90} (sorted by builders).
    std::vector<int> archs;
    for (size_t pos = 0; (pos = request.target.find("sm_", pos)) != std::string::npos; pos += 3)
      archs.push_back(std::atoi(request.target.c_str() + pos + 3));
    if (archs.empty()) return fail("no architecture in target " + request.target);
    CudaModuleImage image;
    // PTX once, for the oldest architecture (newer GPUs JIT it); then a cubin per listed
    // architecture: linked from that PTX by nvJitLink when it is there (~8 ms each), else
    // compiled again by NVRTC.
    image.ptx_sm = archs.front();
    if (!run(request, "-arch=compute_" + std::to_string(archs.front()), /*cubin=*/false, image.ptx, result))
      return finish(result, start);
    for (int sm : archs) {
      std::string& cubin = image.cubins[sm];
      if (m_link) {
        if (!link_cubin(image.ptx, sm, cubin, result)) return finish(result, start);
      } else if (!run(request, "-arch=sm_" + std::to_string(sm), /*cubin=*/true, cubin, result)) {
        return finish(result, start);
      }
    }
    result.artifact = encode_cuda_module(image);
    result.success = true;
    // NVRTC does not report the headers it read: every file under the include folders enters
    // the key instead (an over-approximation that never misses a change).
    for (auto& dir : request.include_dirs) {
      std::error_code ec;
      for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != std::filesystem::end(it); it.increment(ec))
        if (it->is_regular_file()) result.dependencies.push_back(it->path().string());
    }
    return finish(result, start);
  }

 private:
  static CompileResult finish(CompileResult& r, std::chrono::steady_clock::time_point start) {
    r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return std::move(r);
  }

  bool run(const CompileRequest& request, const std::string& arch_flag, bool cubin, std::string& out, CompileResult& result) {
    const SourceFile& src = request.sources.front();
    void* prog = nullptr;
    if (int rc = m_api.nvrtcCreateProgram(&prog, src.text.c_str(), src.path.c_str(), 0, nullptr, nullptr); rc != 0) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, std::string("nvrtcCreateProgram: ") + m_api.nvrtcGetErrorString(rc)});
      return false;
    }
    std::vector<std::string> options = {arch_flag};
    options.insert(options.end(), std::begin(k_default_options), std::end(k_default_options));
    for (auto& dir : request.include_dirs) options.push_back("-I" + dir);
    for (auto& def : request.defines) options.push_back("-D" + def);
    for (auto& flag : request.flags) options.push_back(flag);
    std::vector<const char*> argv;
    for (auto& o : options) argv.push_back(o.c_str());
    int rc = m_api.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
    size_t log_size = 0;
    m_api.nvrtcGetProgramLogSize(prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size) m_api.nvrtcGetProgramLog(prog, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    if (!log.empty()) {
      result.log += log + "\n";
      for (auto& d : parse_log(log)) result.diagnostics.push_back(std::move(d));
    }
    bool ok = rc == 0;
    if (ok) {
      size_t size = 0;
      ok = (cubin ? m_api.nvrtcGetCUBINSize(prog, &size) : m_api.nvrtcGetPTXSize(prog, &size)) == 0;
      out.assign(size, '\0');
      ok = ok && (cubin ? m_api.nvrtcGetCUBIN(prog, out.data()) : m_api.nvrtcGetPTX(prog, out.data())) == 0;
    } else if (result.diagnostics.empty()) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, src.path, 0, 0, m_api.nvrtcGetErrorString(rc)});
    }
    m_api.nvrtcDestroyProgram(&prog);
    return ok;
  }

  bool link_cubin(const std::string& ptx, int sm, std::string& out, CompileResult& result) {
    const JitLinkApi& l = *m_link;
    std::string arch = "-arch=sm_" + std::to_string(sm);
    const char* options[] = {arch.c_str()};
    void* h = nullptr;
    if (l.create(&h, 1, options) != 0) {
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "nvJitLinkCreate failed for sm_" + std::to_string(sm)});
      return false;
    }
    bool ok = l.add_data(h, k_jitlink_input_ptx, ptx.data(), ptx.size(), "kernel.ptx") == 0 && l.complete(h) == 0;
    if (ok) {
      size_t n = 0;
      ok = l.cubin_size(h, &n) == 0;
      out.assign(n, '\0');
      ok = ok && l.cubin(h, out.data()) == 0;
    } else {
      size_t n = 0;
      l.log_size(h, &n);
      std::string log(n, '\0');
      if (n) l.log(h, log.data());
      result.diagnostics.push_back({Diagnostic::Severity::kError, "", 0, 0, "nvJitLink for sm_" + std::to_string(sm) + ": " + log});
    }
    l.destroy(&h);
    return ok;
  }

  NvrtcApi m_api;
  std::optional<JitLinkApi> m_link;
};

// libnvJitLink beside libnvrtc; its 13.0 entry points carry a version suffix.
std::optional<JitLinkApi> load_jitlink(const std::string& nvrtc_path, std::string& identity) {
  std::string dir = nvrtc_path.substr(0, nvrtc_path.find_last_of('/') + 1);
  void* h = nullptr;
  std::string loaded;
  for (std::string name : {dir + "libnvJitLink.so.13", dir + "libnvJitLink.so.12", std::string("libnvJitLink.so.13")}) {
    if ((h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      loaded = name;
      break;
    }
  }
  if (!h) return std::nullopt;
  auto sym = [&](const char* versioned, const char* plain) {
    void* p = ::dlsym(h, versioned);
    return p ? p : ::dlsym(h, plain);
  };
  JitLinkApi l;
  l.create = reinterpret_cast<decltype(l.create)>(sym("__nvJitLinkCreate_13_0", "nvJitLinkCreate"));
  l.destroy = reinterpret_cast<decltype(l.destroy)>(sym("__nvJitLinkDestroy_13_0", "nvJitLinkDestroy"));
  l.add_data = reinterpret_cast<decltype(l.add_data)>(sym("__nvJitLinkAddData_13_0", "nvJitLinkAddData"));
  l.complete = reinterpret_cast<decltype(l.complete)>(sym("__nvJitLinkComplete_13_0", "nvJitLinkComplete"));
  l.cubin_size = reinterpret_cast<decltype(l.cubin_size)>(sym("__nvJitLinkGetLinkedCubinSize_13_0", "nvJitLinkGetLinkedCubinSize"));
  l.cubin = reinterpret_cast<decltype(l.cubin)>(sym("__nvJitLinkGetLinkedCubin_13_0", "nvJitLinkGetLinkedCubin"));
  l.log_size = reinterpret_cast<decltype(l.log_size)>(sym("__nvJitLinkGetErrorLogSize_13_0", "nvJitLinkGetErrorLogSize"));
  l.log = reinterpret_cast<decltype(l.log)>(sym("__nvJitLinkGetErrorLog_13_0", "nvJitLinkGetErrorLog"));
  if (!l.create || !l.destroy || !l.add_data || !l.complete || !l.cubin_size || !l.cubin || !l.log_size || !l.log)
    return std::nullopt;
  struct link_map* map = nullptr;
  std::string real = loaded;
  if (::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) real = map->l_name;
  auto id = elf_build_id(real);
  identity = ";" + real.substr(real.find_last_of('/') + 1) + "=" + (id.ok() ? id.value() : "no-build-id");
  return l;
}

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
#include "jit/nvrtc/nvrtc_symbols.def"
#undef KILN_NVRTC
  api.nvrtcVersion(&api.major, &api.minor);
  // The file dlopen actually mapped (a symlink's target), for its build id.
  struct link_map* map = nullptr;
  std::string real = loaded;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) real = map->l_name;
  auto id = elf_build_id(real);
  api.path = real;
  g_identity = "nvrtc;" + real.substr(real.find_last_of('/') + 1) + "=" + (id.ok() ? id.value() : "no-build-id");
  std::string link_identity;
  auto link = load_jitlink(real, link_identity);
  g_identity += link_identity + default_options_identity();
  g_toolchain = new NvrtcToolchain(std::move(api), std::move(link));
}

}  // namespace

std::vector<std::string> nvrtc_search_paths() {
  std::vector<std::string> out;
  // KILN_NVRTC_LIBRARY names the library file itself, and then it is the only place looked.
  if (const char* lib = std::getenv("KILN_NVRTC_LIBRARY"); lib && *lib) return {std::string(lib)};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(var); v && *v) out.push_back(std::string(v) + "/lib64");
  out.push_back("/usr/local/cuda/lib64");
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
        auto id = elf_build_id(real.string());
        identity = "nvrtc;" + real.filename().string() + "=" + (id.ok() ? id.value() : "no-build-id");
        // nvJitLink makes the cubins when it is beside NVRTC: its build enters the key too.
        for (const char* link : {"libnvJitLink.so.13", "libnvJitLink.so.12"}) {
          auto link_real = std::filesystem::canonical(real.parent_path() / link, ec);
          if (ec) continue;
          auto link_id = elf_build_id(link_real.string());
          identity.value() += ";" + link_real.filename().string() + "=" + (link_id.ok() ? link_id.value() : "no-build-id");
          break;
        }
        identity.value() += default_options_identity();
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
