#include "cache/crypto.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace kiln::cache {

Result<const Crypto*> crypto() {
  static Crypto c;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = nullptr;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"})
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      const char* err = ::dlerror();
      error = std::string("cannot load OpenSSL's libcrypto (") + (err ? err : "not found") + "): install libssl3";
      return;
    }
#define KILN_CRYPTO(ret, name, params)                                              \
  c.name = reinterpret_cast<decltype(c.name)>(::dlsym(h, #name));                   \
  if (!c.name && error.empty()) error = "OpenSSL's libcrypto lacks " #name " (OpenSSL 1.1.1 or newer is needed)";
#include "cache/crypto_symbols.def"
#undef KILN_CRYPTO
  });
  if (!error.empty()) return unavailable(error);
  return &c;
}

}  // namespace kiln::cache
