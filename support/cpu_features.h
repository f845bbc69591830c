// glibc's reading of the CPU's features (CPU_FEATURE_ACTIVE), for C++ built by g++ or clang++.
// <sys/platform/x86.h> (glibc 2.33+) is a C header: its inline functions return _Bool, which
// g++ accepts in C++ and clang++ does not (the fuzz build is clang++), so _Bool is spelled bool
// while it is read. Why kiln reads glibc's features and not __builtin_cpu_supports:
// runtime/host_cpu.cpp.
#pragma once

#if defined(__x86_64__)
#define _Bool bool
#include <sys/platform/x86.h>
#undef _Bool
#endif
