// XXH3 built for AVX2 (this file alone is compiled with -mavx2), which hash.cpp calls where the
// CPU has AVX2: the baseline build is x86-64 (SSE2), and XXH3 picks its vector code at compile
// time. This is what xxHash's own x86 dispatcher (xxh_x86dispatch.c) does; Debian's
// libxxhash-dev ships its header but not its source, and its dispatching functions only in the
// shared libxxhash. TOOLCHAIN-FACTS.md: 11.8 GB/s scalar/SSE2 against 40 GB/s with AVX2 on 1 MiB.
//
// Only xxhash.h is included here, with XXH_INLINE_ALL (every function static): nothing compiled
// for AVX2 can be merged by the linker into code that runs on a CPU without it.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstddef>
#include <cstring>

#if !defined(__AVX2__)
#error "support/hash_avx2.cpp must be compiled with -mavx2 (support/CMakeLists.txt)"
#endif

namespace kiln::hash_avx2 {

void xxh3_128(const void* data, size_t size, unsigned char out[16]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, size));
  std::memcpy(out, c.digest, 16);
}

void xxh3_128_update(void* state, const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

}  // namespace kiln::hash_avx2
