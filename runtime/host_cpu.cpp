#include "runtime/host_cpu.h"

#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::runtime {

static int detect_level() {
#if defined(__x86_64__)
  // Feature lists from the x86-64 psABI micro-architecture levels. libgcc's checks include
  // the OS's support for the AVX/AVX-512 register state (XCR0).
  __builtin_cpu_init();
  bool v2 = __builtin_cpu_supports("sse3") && __builtin_cpu_supports("ssse3") &&
            __builtin_cpu_supports("sse4.1") && __builtin_cpu_supports("sse4.2") &&
            __builtin_cpu_supports("popcnt");
  bool v3 = v2 && __builtin_cpu_supports("avx") && __builtin_cpu_supports("avx2") &&
            __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
            __builtin_cpu_supports("fma") && __builtin_cpu_supports("movbe") &&
            __builtin_cpu_supports("f16c") && __builtin_cpu_supports("lzcnt");
  bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vl");
  return v4 ? 4 : v3 ? 3 : v2 ? 2 : 1;
#else
  return 0;
#endif
}

int host_x86_level() {
  // KILN_CPU_LEVEL caps the detected level: build portable artifacts for a mixed cluster,
  // or test on a v4 machine what a v3 machine does.
  static const int level = [] {
    int detected = detect_level();
    if (const char* cap = std::getenv("KILN_CPU_LEVEL"); cap && *cap) {
      if (auto l = parse_x86_level(cap); l && *l < detected) return *l;
    }
    return detected;
  }();
  return level;
}

std::string x86_level_name(int level) {
  if (level <= 1) return "x86-64";
  return "x86-64-v" + std::to_string(level);
}

std::optional<int> parse_x86_level(std::string_view name) {
  if (name == "x86-64") return 1;
  if (name == "x86-64-v2") return 2;
  if (name == "x86-64-v3") return 3;
  if (name == "x86-64-v4") return 4;
  return std::nullopt;
}

uint64_t host_available_memory() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kib = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
    std::fclose(f);
    if (found) return uint64_t{kib} * 1024;
  }
  struct sysinfo info{};
  if (::sysinfo(&info) == 0) return (uint64_t{info.freeram} + info.bufferram) * info.mem_unit;
  return 0;
}

}  // namespace kiln::runtime
