#include "support/hash.h"

#include <array>

// Header-only XXH3 with the compiler's vector extensions: SSE2 in the x86-64 baseline build, and
// on x86-64 an AVX2 build of it (hash_avx2.cpp) for long inputs where the CPU has AVX2.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "support/cpu_features.h"

namespace kiln {

static Hash128 from_canonical(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  Hash128 out;
  static_assert(sizeof(c.digest) == 16);
  __builtin_memcpy(out.bytes.data(), c.digest, 16);
  return out;
}

#if KILN_HASH_AVX2
namespace hash_avx2 {  // support/hash_avx2.cpp, compiled with -mavx2
void xxh3_128(const void* data, size_t size, unsigned char out[16]);
void xxh3_128_update(void* state, const void* data, size_t size);
}  // namespace hash_avx2

// Inputs this long go to the AVX2 build where the CPU has it (xxHash's x86 dispatch); shorter
// ones (keys, small fields: XXH3 uses no vectors up to 240 bytes) stay inline here.
static constexpr size_t k_vector_min = 241;
static bool have_avx2() {
  // glibc's reading, not __builtin_cpu_supports (runtime/host_cpu.cpp says why).
  static const bool yes = CPU_FEATURE_ACTIVE(AVX2);
  return yes;
}
#endif

Hash128 xxh3_128(const void* data, size_t size) {
#if KILN_HASH_AVX2
  if (size >= k_vector_min && have_avx2()) {
    Hash128 out;
    hash_avx2::xxh3_128(data, size, out.bytes.data());
    return out;
  }
#endif
  return from_canonical(XXH3_128bits(data, size));
}

Hasher128::Hasher128() : m_state(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(m_state)); }
Hasher128::~Hasher128() { XXH3_freeState(static_cast<XXH3_state_t*>(m_state)); }
void Hasher128::update(const void* data, size_t size) {
#if KILN_HASH_AVX2
  if (size >= k_vector_min && have_avx2()) return hash_avx2::xxh3_128_update(m_state, data, size);
#endif
  XXH3_128bits_update(static_cast<XXH3_state_t*>(m_state), data, size);
}
Hash128 Hasher128::digest() const {
  return from_canonical(XXH3_128bits_digest(static_cast<XXH3_state_t*>(m_state)));
}

std::string to_hex(const void* data, size_t size) {
  static const char kDigits[] = "0123456789abcdef";
  auto* p = static_cast<const uint8_t*>(data);
  std::string s(2 * size, '0');
  for (size_t i = 0; i < size; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::string Hash128::hex() const { return to_hex(bytes.data(), bytes.size()); }

std::optional<Hash128> Hash128::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  // A table, not branches: a warm torch-extension hit parses ~10,000 of these (its manifest and
  // the memo's values), and the branchy version was 5% of it (perf, this machine).
  static constexpr auto k_nibble = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int c = 0; c < 10; ++c) t['0' + c] = static_cast<int8_t>(c);
    for (int c = 0; c < 6; ++c) t['a' + c] = t['A' + c] = static_cast<int8_t>(10 + c);
    return t;
  }();
  Hash128 h;
  int bad = 0;
  for (size_t i = 0; i < 16; ++i) {
    int hi = k_nibble[static_cast<uint8_t>(hex[2 * i])], lo = k_nibble[static_cast<uint8_t>(hex[2 * i + 1])];
    bad |= hi | lo;  // any -1 sets the sign bit
    h.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (bad < 0) return std::nullopt;
  return h;
}

}  // namespace kiln
