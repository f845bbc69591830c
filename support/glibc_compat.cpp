// arc4random for code linked with -Wl,--wrap=arc4random (kiln_keep_glibc_2_35 in
// support/CMakeLists.txt). glibc added arc4random in 2.36 (Debian 12); libstdc++'s
// std::random_device and LLVM's Support library call it when built there, and that one symbol
// alone would make kiln's wheel need glibc 2.36, shutting out Ubuntu 22.04 (glibc 2.35), the base
// of most CUDA images. getrandom (glibc 2.25) gives the same kernel entropy.
#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

extern "C" uint32_t __wrap_arc4random(void) {
  uint32_t value;
  for (;;) {
    ssize_t got = ::getrandom(&value, sizeof value, 0);
    if (got == static_cast<ssize_t>(sizeof value)) return value;
    if (got < 0 && errno != EINTR) std::abort();  // as glibc's arc4random: it cannot fail
  }
}
