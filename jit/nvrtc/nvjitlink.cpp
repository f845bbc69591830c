#include "jit/nvrtc/nvjitlink.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "support/cpu_time.h"
#include "support/cuda_toolkit.h"
#include "support/elf_build_id.h"

namespace kiln::jit {
namespace {

struct Api {
  int (*create)(void**, uint32_t, const char**) = nullptr;
  int (*destroy)(void**) = nullptr;
  int (*add_data)(void*, int, const void*, size_t, const char*) = nullptr;
  int (*complete)(void*) = nullptr;
  int (*cubin_size)(void*, size_t*) = nullptr;
  int (*cubin)(void*, void*) = nullptr;
  int (*log_size)(void*, size_t*) = nullptr;
  int (*log)(void*, char*) = nullptr;
  int (*ptx_size)(void*, size_t*) = nullptr;
  int (*ptx)(void*, char*) = nullptr;
  // The info log (ptxas -v): optional, link_cubin does without it.
  int (*info_log_size)(void*, size_t*) = nullptr;
  int (*info_log)(void*, char*) = nullptr;
};
constexpr int k_input_ptx = 2;    // NVJITLINK_INPUT_PTX
// PTX from which link_cubin lets ptxas split its work across threads.
constexpr size_t k_split_ptx_bytes = size_t(4) << 20;
constexpr int k_input_ltoir = 3;  // NVJITLINK_INPUT_LTOIR

// Where nvJitLink is looked for, in order: each toolkit folder, then the loader's path.
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  for (auto& root : cuda_toolkit_roots())
    for (const char* name : {"libnvJitLink.so.13", "libnvJitLink.so.12"}) out.push_back(root + "/lib64/" + name);
  out.push_back("libnvJitLink.so.13");
  return out;
}

std::once_flag g_once;
Api g_api;
bool g_ok = false;
int g_major = 0;

void load() {
  void* h = nullptr;
  for (auto& path : candidates())
    if (!h && (h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) g_major = std::atoi(path.substr(path.rfind(".so.") + 4).c_str());
  if (!h) return;
  // CUDA 13's header calls versioned entry points; older libraries have only the plain ones.
  auto sym = [&](const char* versioned, const char* plain) {
    void* p = ::dlsym(h, versioned);
    return p ? p : ::dlsym(h, plain);
  };
  Api& l = g_api;
  l.create = reinterpret_cast<decltype(l.create)>(sym("__nvJitLinkCreate_13_0", "nvJitLinkCreate"));
  l.destroy = reinterpret_cast<decltype(l.destroy)>(sym("__nvJitLinkDestroy_13_0", "nvJitLinkDestroy"));
  l.add_data = reinterpret_cast<decltype(l.add_data)>(sym("__nvJitLinkAddData_13_0", "nvJitLinkAddData"));
  l.complete = reinterpret_cast<decltype(l.complete)>(sym("__nvJitLinkComplete_13_0", "nvJitLinkComplete"));
  l.cubin_size = reinterpret_cast<decltype(l.cubin_size)>(sym("__nvJitLinkGetLinkedCubinSize_13_0", "nvJitLinkGetLinkedCubinSize"));
  l.cubin = reinterpret_cast<decltype(l.cubin)>(sym("__nvJitLinkGetLinkedCubin_13_0", "nvJitLinkGetLinkedCubin"));
  l.log_size = reinterpret_cast<decltype(l.log_size)>(sym("__nvJitLinkGetErrorLogSize_13_0", "nvJitLinkGetErrorLogSize"));
  l.log = reinterpret_cast<decltype(l.log)>(sym("__nvJitLinkGetErrorLog_13_0", "nvJitLinkGetErrorLog"));
  l.ptx_size = reinterpret_cast<decltype(l.ptx_size)>(sym("__nvJitLinkGetLinkedPtxSize_13_0", "nvJitLinkGetLinkedPtxSize"));
  l.ptx = reinterpret_cast<decltype(l.ptx)>(sym("__nvJitLinkGetLinkedPtx_13_0", "nvJitLinkGetLinkedPtx"));
  l.info_log_size = reinterpret_cast<decltype(l.info_log_size)>(sym("__nvJitLinkGetInfoLogSize_13_0", "nvJitLinkGetInfoLogSize"));
  l.info_log = reinterpret_cast<decltype(l.info_log)>(sym("__nvJitLinkGetInfoLog_13_0", "nvJitLinkGetInfoLog"));
  g_ok = l.create && l.destroy && l.add_data && l.complete && l.cubin_size && l.cubin && l.log_size && l.log && l.ptx_size &&
         l.ptx;
}

}  // namespace

bool nvjitlink_available() {
  std::call_once(g_once, load);
  return g_ok;
}

int nvjitlink_major() { return nvjitlink_available() ? g_major : 0; }

std::string nvjitlink_identity() {
  static const std::string id = [] {
    for (auto& path : candidates()) {
      std::error_code ec;
      auto real = std::filesystem::canonical(path, ec);  // a bare name (the loader's path) has no file here
      if (ec) continue;
      auto build = memo_elf_build_id(real.string());
      return ";" + real.filename().string() + "=" + (build.ok() ? build.value() : "no-build-id");
    }
    return std::string();
  }();
  return id;
}

namespace {
constexpr int k_input_cubin = 1;  // NVJITLINK_INPUT_CUBIN
Result<std::string> link_inputs(const std::vector<std::string_view>& ptx, int kind, int sm);
}  // namespace

Result<std::string> link_cubin(std::string_view ptx, int sm) { return link_inputs({ptx}, k_input_ptx, sm); }

Result<std::string> link_cubin_parts(const std::vector<std::string_view>& ptx, int sm) { return link_inputs(ptx, k_input_ptx, sm); }

Result<std::string> link_relocatable_cubins(const std::vector<std::string_view>& cubins, int sm) {
  return link_inputs(cubins, k_input_cubin, sm);
}

namespace {

Result<std::string> link_inputs(const std::vector<std::string_view>& ptx, int kind, int sm) {
  if (!nvjitlink_available()) return unavailable("nvJitLink (libnvJitLink.so.13) was not found");
  const Api& l = g_api;
  std::string arch = "-arch=sm_" + std::to_string(sm);
  std::vector<const char*> options = {arch.c_str()};
  // ptxas compiles a large module's functions on several threads (its --split-compile; that of
  // nvJitLink itself splits only LTO input): DeepSpeed's quant_reduce.cu, 16 MB of PTX, took 29.1 s
  // to link and 20.8 s split in 4 (this machine, 2 cores). A fixed count, so the cubin's bytes do
  // not depend on the machine (they do on the count); small modules are not split.
  size_t bytes = 0;
  for (auto& p : ptx) bytes += p.size();
  if (kind == k_input_ptx && bytes >= k_split_ptx_bytes) options.push_back("-Xptxas=--split-compile=4");
  void* h = nullptr;
  if (l.create(&h, static_cast<uint32_t>(options.size()), options.data()) != 0)
    return internal_error("nvJitLinkCreate failed for sm_" + std::to_string(sm));
  std::string out;
  bool ok = true;
  for (size_t i = 0; i < ptx.size() && ok; ++i) {
    std::string name = "kernel" + (ptx.size() > 1 ? "." + std::to_string(i) : std::string()) + (kind == k_input_ptx ? ".ptx" : ".cubin");
    ok = l.add_data(h, kind, ptx[i].data(), ptx[i].size(), name.c_str()) == 0;
  }
  ok = ok && l.complete(h) == 0;
  Status st;
  if (ok) {
    size_t n = 0;
    ok = l.cubin_size(h, &n) == 0;
    out.assign(n, '\0');
    ok = ok && l.cubin(h, out.data()) == 0;
    if (!ok) st = internal_error("nvJitLink could not return the cubin for sm_" + std::to_string(sm));
  } else {
    size_t n = 0;
    l.log_size(h, &n);
    std::string log(n, '\0');
    if (n) l.log(h, log.data());
    st = Status(StatusCode::kCompileError, "nvJitLink for sm_" + std::to_string(sm) + ": " + log);
  }
  l.destroy(&h);
  if (!st.ok()) return st;
  return out;
}

}  // namespace

Result<std::vector<KernelResources>> ptxas_resources(std::string_view ptx, int sm) {
  if (!nvjitlink_available()) return unavailable("nvJitLink (libnvJitLink.so.13) was not found");
  const Api& l = g_api;
  if (!l.info_log_size || !l.info_log) return unavailable("this nvJitLink has no info log (nvJitLinkGetInfoLog)");
  std::string arch = "-arch=sm_" + std::to_string(sm);
  std::vector<const char*> options = {arch.c_str(), "-Xptxas=-v"};
  void* h = nullptr;
  if (l.create(&h, static_cast<uint32_t>(options.size()), options.data()) != 0)
    return internal_error("nvJitLinkCreate failed for sm_" + std::to_string(sm));
  bool ok = l.add_data(h, k_input_ptx, ptx.data(), ptx.size(), "kernel.ptx") == 0 && l.complete(h) == 0;
  auto read_log = [&](int (*size_of)(void*, size_t*), int (*read)(void*, char*)) {
    size_t n = 0;
    size_of(h, &n);
    std::string log(n, '\0');
    if (n) read(h, log.data());
    while (!log.empty() && log.back() == '\0') log.pop_back();
    return log;
  };
  std::string info = read_log(l.info_log_size, l.info_log);
  std::string errors = ok ? std::string() : read_log(l.log_size, l.log);
  l.destroy(&h);
  if (!ok) return Status(StatusCode::kCompileError, "nvJitLink for sm_" + std::to_string(sm) + ": " + errors);
  return parse_ptxas_report(info);
}

std::vector<KernelResources> parse_ptxas_report(std::string_view log) {
  std::vector<KernelResources> out;
  // The number just before `unit` in `line` ("110 registers" -> 110), or -1.
  auto number_before = [](std::string_view line, std::string_view unit) -> int64_t {
    size_t at = line.find(unit);
    if (at == std::string_view::npos) return -1;
    size_t end = at;
    while (end > 0 && line[end - 1] == ' ') --end;
    size_t begin = end;
    while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
    return begin == end ? -1 : std::stoll(std::string(line.substr(begin, end - begin)));
  };
  auto quoted = [](std::string_view line, size_t from) {
    size_t a = line.find('\'', from), b = a == std::string_view::npos ? a : line.find('\'', a + 1);
    return b == std::string_view::npos ? std::string() : std::string(line.substr(a + 1, b - a - 1));
  };
  bool in_entry = false;  // the lines since the last "Function properties for" are about an entry
  size_t pos = 0;
  while (pos < log.size()) {
    size_t nl = log.find('\n', pos);
    std::string_view line = log.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? log.size() : nl + 1;
    if (size_t at = line.find("Compiling entry function "); at != std::string_view::npos) {
      out.push_back({});
      out.back().entry = quoted(line, at);
      in_entry = true;
    } else if (size_t at = line.find("Function properties for "); at != std::string_view::npos) {
      std::string_view name = line.substr(at + 24);
      in_entry = !out.empty() && name == out.back().entry;
    } else if (in_entry && line.find("bytes stack frame") != std::string_view::npos) {
      out.back().stack_frame = std::max<int64_t>(0, number_before(line, "bytes stack frame"));
      out.back().spill_stores = std::max<int64_t>(0, number_before(line, "bytes spill stores"));
      out.back().spill_loads = std::max<int64_t>(0, number_before(line, "bytes spill loads"));
    } else if (!out.empty() && line.find("Used ") != std::string_view::npos && line.find(" registers") != std::string_view::npos) {
      // The "Used" line follows its entry's properties (a device function's come before it).
      out.back().registers = static_cast<int>(std::max<int64_t>(0, number_before(line, " registers")));
      out.back().barriers = static_cast<int>(std::max<int64_t>(0, number_before(line, " barriers")));
      out.back().shared_bytes = std::max<int64_t>(0, number_before(line, " bytes smem"));
    }
  }
  return out;
}

namespace {

// One nvJitLink run over LTO-IR inputs: a cubin for -arch=sm_XX, or PTX with -ptx.
Result<std::string> link_lto_once(const std::vector<std::string>& irs, int sm, bool ptx) {
  const Api& l = g_api;
  std::string arch = "-arch=sm_" + std::to_string(sm);
  std::vector<const char*> options = {arch.c_str(), "-lto"};
  if (ptx) options.push_back("-ptx");
  void* h = nullptr;
  if (l.create(&h, static_cast<uint32_t>(options.size()), options.data()) != 0)
    return internal_error("nvJitLinkCreate failed for sm_" + std::to_string(sm));
  bool ok = true;
  for (size_t i = 0; ok && i < irs.size(); ++i) {
    std::string name = "source" + std::to_string(i) + ".ltoir";
    ok = l.add_data(h, k_input_ltoir, irs[i].data(), irs[i].size(), name.c_str()) == 0;
  }
  ok = ok && l.complete(h) == 0;
  std::string out;
  Status st;
  if (ok) {
    size_t n = 0;
    ok = (ptx ? l.ptx_size(h, &n) : l.cubin_size(h, &n)) == 0;
    out.assign(n, '\0');
    ok = ok && (ptx ? l.ptx(h, out.data()) : l.cubin(h, out.data())) == 0;
    if (ptx) while (!out.empty() && out.back() == '\0') out.pop_back();
    if (!ok) st = internal_error("nvJitLink could not return its output for sm_" + std::to_string(sm));
  } else {
    size_t n = 0;
    l.log_size(h, &n);
    std::string log(n, '\0');
    if (n) l.log(h, log.data());
    st = Status(StatusCode::kCompileError, "linking the op's CUDA sources for sm_" + std::to_string(sm) + ": " + log);
  }
  l.destroy(&h);
  if (!st.ok()) return st;
  return out;
}

}  // namespace

Result<LinkedModule> link_lto(const std::vector<std::string>& irs, const std::vector<int>& archs, bool ptx_only) {
  if (!nvjitlink_available()) return unavailable("nvJitLink (libnvJitLink.so.13) was not found");
  if (archs.empty()) return invalid_argument("no architecture to link for");
  LinkedModule out;
  KILN_ASSIGN_OR_RETURN(out.ptx, link_lto_once(irs, archs.front(), /*ptx=*/true));
  if (ptx_only) return out;
  // As for single sources: the architectures' links share nothing, so they run at once.
  std::vector<Result<std::string>> linked(archs.size(), Result<std::string>(std::string()));
  HelperThreads helpers;  // support/cpu_time.h
  for (size_t i = 1; i < archs.size(); ++i) helpers.start([&, i] { linked[i] = link_lto_once(irs, archs[i], false); });
  linked[0] = link_lto_once(irs, archs[0], false);
  helpers.join();
  for (size_t i = 0; i < archs.size(); ++i) {
    if (!linked[i].ok()) return linked[i].status();
    out.cubins[archs[i]] = std::move(linked[i]).value();
  }
  return out;
}

Result<std::map<int, std::string>> cubins_for_target(std::string_view ptx, const std::string& target) {
  if (cuda_ptx_only(target)) return std::map<int, std::string>();  // the driver compiles the PTX at load
  return link_cubins(ptx, cuda_archs_in(target));
}

Result<std::map<int, std::string>> link_cubins(std::string_view ptx, const std::vector<int>& archs) {
  std::vector<Result<std::string>> linked(archs.size(), Result<std::string>(std::string()));
  HelperThreads helpers;  // support/cpu_time.h
  for (size_t i = 1; i < archs.size(); ++i) helpers.start([&, i] { linked[i] = link_cubin(ptx, archs[i]); });
  if (!archs.empty()) linked[0] = link_cubin(ptx, archs[0]);
  helpers.join();
  std::map<int, std::string> out;
  for (size_t i = 0; i < archs.size(); ++i) {
    if (!linked[i].ok()) return linked[i].status();
    out[archs[i]] = std::move(linked[i]).value();
  }
  return out;
}

}  // namespace kiln::jit
