// OpenSSL's libcrypto, loaded with dlopen on first use (cache/crypto_symbols.def lists every
// call): only a process that signs or checks a remote object maps it (4.5 MB, ~0.3 ms of
// relocations that a whole-process cache hit would otherwise pay), and a GPU node built
// without OpenSSL's headers still checks signatures where libcrypto.so.3 is installed.
#pragma once

#include <cstddef>

#include "support/status.h"

namespace kiln::cache {

struct Crypto {
#define KILN_CRYPTO(ret, name, params) ret(*name) params = nullptr;
#include "cache/crypto_symbols.def"
#undef KILN_CRYPTO
};

// The loaded library, or kUnavailable saying what is missing (then nothing can be signed or
// checked, and callers refuse rather than trust).
Result<const Crypto*> crypto();

inline constexpr int k_evp_pkey_ed25519 = 1087;  // NID_ED25519 in every OpenSSL since 1.1.1

}  // namespace kiln::cache
