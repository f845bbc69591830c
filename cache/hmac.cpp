#include "cache/hmac.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace kiln::cache {
namespace {

// The libcrypto functions used, declared here rather than through <openssl/hmac.h>: a GPU node
// builds kiln without OpenSSL's headers and still checks tags when libcrypto.so.3 is there.
// These are exported by every OpenSSL 1.1 and 3.x (deprecated in 3.0 for EVP_MAC, unchanged).
struct Crypto {
  const void* (*sha256)() = nullptr;
  void* (*ctx_new)() = nullptr;
  int (*init)(void*, const void*, int, const void*, void*) = nullptr;
  int (*update)(void*, const unsigned char*, size_t) = nullptr;
  int (*final)(void*, unsigned char*, unsigned int*) = nullptr;
  void (*ctx_free)(void*) = nullptr;
  std::string error;
};

const Crypto& crypto() {
  static Crypto c;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"})
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      const char* err = ::dlerror();
      c.error = std::string("cannot load OpenSSL's libcrypto (") + (err ? err : "not found") + "): install libssl3";
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      if (!fn && c.error.empty()) c.error = std::string("libcrypto lacks ") + name;
    };
    sym(c.sha256, "EVP_sha256");
    sym(c.ctx_new, "HMAC_CTX_new");
    sym(c.init, "HMAC_Init_ex");
    sym(c.update, "HMAC_Update");
    sym(c.final, "HMAC_Final");
    sym(c.ctx_free, "HMAC_CTX_free");
  });
  return c;
}

}  // namespace

Result<HmacTag> hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  const Crypto& c = crypto();
  if (!c.error.empty()) return unavailable(c.error);
  void* ctx = c.ctx_new();
  if (!ctx) return internal_error("HMAC_CTX_new failed");
  HmacTag tag{};
  unsigned int len = 0;
  bool ok = c.init(ctx, key.data(), static_cast<int>(key.size()), c.sha256(), nullptr) == 1;
  for (auto part : parts) ok = ok && c.update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  ok = ok && c.final(ctx, tag.data(), &len) == 1 && len == tag.size();
  c.ctx_free(ctx);
  if (!ok) return internal_error("HMAC-SHA256 failed in libcrypto");
  return tag;
}

bool tags_equal(const HmacTag& a, const HmacTag& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace kiln::cache
