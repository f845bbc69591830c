#include "runtime/host_cpu.h"

#include "support/cpu_features.h"

#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::runtime {

static int detect_level() {
#if defined(__x86_64__)
  // Feature lists from the x86-64 psABI micro-architecture levels, read from what glibc found
  // when it started the process (CPU_FEATURE_ACTIVE: the CPU has it and the OS saves its
  // register state, XCR0 included). Not libgcc's __builtin_cpu_supports: linking it adds a
  // constructor that runs CPUID a dozen times in every kiln process, and CPUID traps to the
  // hypervisor in a VM (11 us each on this project's machines), a tenth of a millisecond on
  // every cache hit of a process that lives a few. glibc reads the feature leaves only for the
  // vendors it knows (Intel, AMD, Hygon, Centaur, Zhaoxin) and lets GLIBC_TUNABLES switch
  // features off: elsewhere the level read is lower than the CPU's, so kiln builds for less than
  // the CPU has (slower code, never code it cannot run).
  bool v2 = CPU_FEATURE_ACTIVE(SSE3) && CPU_FEATURE_ACTIVE(SSSE3) && CPU_FEATURE_ACTIVE(SSE4_1) &&
            CPU_FEATURE_ACTIVE(SSE4_2) && CPU_FEATURE_ACTIVE(POPCNT);
  bool v3 = v2 && CPU_FEATURE_ACTIVE(AVX) && CPU_FEATURE_ACTIVE(AVX2) && CPU_FEATURE_ACTIVE(BMI1) &&
            CPU_FEATURE_ACTIVE(BMI2) && CPU_FEATURE_ACTIVE(FMA) && CPU_FEATURE_ACTIVE(MOVBE) &&
            CPU_FEATURE_ACTIVE(F16C) && CPU_FEATURE_ACTIVE(LZCNT);
  bool v4 = v3 && CPU_FEATURE_ACTIVE(AVX512F) && CPU_FEATURE_ACTIVE(AVX512BW) && CPU_FEATURE_ACTIVE(AVX512CD) &&
            CPU_FEATURE_ACTIVE(AVX512DQ) && CPU_FEATURE_ACTIVE(AVX512VL);
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
