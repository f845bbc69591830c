#include "builders/target.h"

#include "runtime/host_cpu.h"
#include "support/cuda_toolkit.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

namespace kiln::builders {

Result<Target> parse_target(std::string_view text) {
  std::string_view backend = text.substr(0, text.find(':'));
  std::string_view arch = backend.size() < text.size() ? text.substr(backend.size() + 1) : std::string_view();
  if (backend == "cpu") {
    if (arch.empty()) return Target{"cpu", runtime::x86_level_name(runtime::host_x86_level())};
    if (!runtime::parse_x86_level(arch))
      return invalid_argument("unknown cpu level '" + std::string(arch) + "' in target '" + std::string(text) +
                              "' (known: x86-64, x86-64-v2, x86-64-v3, x86-64-v4)");
    return Target{"cpu", std::string(arch)};
  }
  if (backend == "cuda") {
    // cuda:sm_90, or a list: cuda:sm_80,sm_90,sm_100 (sorted, duplicates dropped): a cubin
    // each and PTX for the oldest. cuda:compute_90 alone: PTX only, which the driver compiles
    // for whatever GPU loads it (the smallest artifact and the fastest compile).
    if (arch.substr(0, 8) == "compute_") {
      std::string_view digits = arch.substr(8);
      bool ok = digits.size() >= 2 && digits.size() <= 3;
      for (char c : digits) ok = ok && c >= '0' && c <= '9';
      int sm = ok ? std::atoi(std::string(digits).c_str()) : 0;
      if (sm < 10) return invalid_argument("CUDA target '" + std::string(text) + "': PTX-only targets read cuda:compute_90");
      return Target{"cuda", "compute_" + std::to_string(sm)};
    }
    std::vector<int> archs;
    std::string_view rest = arch;
    while (true) {
      std::string_view item = rest.substr(0, rest.find(','));
      if (item.substr(0, 5) == "cuda:") item.remove_prefix(5);
      bool ok = item.size() >= 5 && item.size() <= 6 && item.substr(0, 3) == "sm_";
      for (size_t i = 3; ok && i < item.size(); ++i) ok = item[i] >= '0' && item[i] <= '9';
      if (!ok)
        return invalid_argument("CUDA target '" + std::string(text) +
                                "' needs architectures such as cuda:sm_90, cuda:sm_80,sm_90,sm_100 or cuda:compute_90 "
                                "(PTX only)");
      int sm = ok ? std::atoi(std::string(item.substr(3)).c_str()) : 0;
      if (sm < 10)  // compute capabilities have a major and a minor digit: sm_00 is no GPU
        return invalid_argument("CUDA target '" + std::string(text) + "' names no GPU architecture: use e.g. cuda:sm_90");
      if (std::find(archs.begin(), archs.end(), sm) == archs.end()) archs.push_back(sm);
      if (item.size() == rest.size() || rest.find(',') == std::string_view::npos) break;
      rest.remove_prefix(rest.find(',') + 1);
    }
    std::sort(archs.begin(), archs.end());
    std::string normal;
    for (int sm : archs) normal += (normal.empty() ? "sm_" : ",sm_") + std::to_string(sm);
    return Target{"cuda", normal};
  }
  if (backend == "hip") {
    // One AMD GPU architecture: hip:gfx90a, hip:gfx942, hip:gfx1100 (a code object is for one).
    bool ok = arch.size() >= 6 && arch.size() <= 8 && arch.substr(0, 3) == "gfx";
    for (size_t i = 3; ok && i < arch.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(arch[i])) || (arch[i] >= 'a' && arch[i] <= 'f');
    if (!ok) return invalid_argument("HIP target '" + std::string(text) + "' needs one AMD GPU architecture, such as hip:gfx90a, hip:gfx942 or hip:gfx1100");
    return Target{"hip", std::string(arch)};
  }
  if (backend == "opencl") {
    // Portable: SPIR-V and preprocessed OpenCL C together; the device picks what it takes.
    if (!arch.empty() && arch != "generic") return invalid_argument("OpenCL target '" + std::string(text) + "': write opencl (or opencl:generic)");
    return Target{"opencl", "generic"};
  }
  if (backend == "spirv") {
    if (!arch.empty() && arch != "spirv64") return invalid_argument("SPIR-V target '" + std::string(text) + "': write spirv (or spirv:spirv64)");
    return Target{"spirv", "spirv64"};
  }
  return invalid_argument("unknown target '" + std::string(text) +
                          "' (this kiln builds for: cpu, cpu:x86-64-v2 .. cpu:x86-64-v4, cuda:sm_XX, cuda:compute_XX, hip:gfxNNN, "
                          "opencl, spirv)");
}

}  // namespace kiln::builders

namespace kiln::builders {

namespace {

// The instruction sets of each x86-64 micro-architecture level (the psABI's list), by the
// name Clang's -m<name> flag takes.
int level_of_feature(std::string_view f) {
  static const std::pair<std::string_view, int> k_features[] = {
      {"mmx", 1},    {"sse", 1},     {"sse2", 1},    {"fxsr", 1},    {"cx8", 1},      {"sse3", 2},     {"ssse3", 2},
      {"sse4.1", 2}, {"sse4.2", 2},  {"sse4", 2},    {"popcnt", 2},  {"cx16", 2},     {"sahf", 2},     {"avx", 3},
      {"avx2", 3},   {"bmi", 3},     {"bmi2", 3},    {"f16c", 3},    {"fma", 3},      {"lzcnt", 3},    {"movbe", 3},
      {"xsave", 3},  {"avx512f", 4}, {"avx512bw", 4}, {"avx512cd", 4}, {"avx512dq", 4}, {"avx512vl", 4}, {"evex512", 4},
  };
  for (auto& [name, level] : k_features)
    if (name == f) return level;
  return 0;
}

// -m flags that select no instruction set.
bool is_codegen_only(std::string_view f) {
  static const std::string_view k_prefixes[] = {"prefer-vector-width=", "fpmath=",   "recip",          "stackrealign",
                                                "red-zone",             "tls-dialect=", "omit-leaf-frame-pointer",
                                                "speculative-load-hardening", "align-double", "long-double-"};
  for (auto p : k_prefixes)
    if (f.substr(0, p.size()) == p) return true;
  return false;
}

}  // namespace

Result<int> cpu_level_for_flag(std::string_view flag) {
  if (flag.substr(0, 2) != "-m") return 0;
  std::string_view f = flag.substr(2);
  if (f.substr(0, 3) == "no-") return 0;  // takes an instruction set away: asks nothing more
  if (int level = level_of_feature(f)) return level;
  if (is_codegen_only(f)) return 0;
  return invalid_argument(
      "flag '" + std::string(flag) +
      "' enables what is not in the x86-64 levels kiln targets (v2: sse3 to sse4.2, popcnt, cx16; v3: avx, avx2, bmi, bmi2, "
      "f16c, fma, lzcnt, movbe; v4: avx512f, avx512bw, avx512cd, avx512dq, avx512vl), so an artifact built with it could "
      "not say which CPUs may load it; put __attribute__((target(\"" + std::string(f) +
      "\"))) on the functions that need it and choose them at run time with __builtin_cpu_supports(\"" + std::string(f) + "\")");
}

Target effective_target(const std::vector<std::string>& flags, const Target& asked) {
  if (asked.backend != "cpu") return asked;
  int level = runtime::parse_x86_level(asked.arch).value_or(1);
  for (auto& f : flags)
    if (auto needed = cpu_level_for_flag(f); needed.ok()) level = std::max(level, needed.value());
  return Target{"cpu", runtime::x86_level_name(level)};
}

std::vector<int> cuda_archs(const Target& target) { return cuda_archs_in(target.arch); }

}  // namespace kiln::builders
