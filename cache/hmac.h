// HMAC-SHA256 (RFC 2104) through OpenSSL's libcrypto, loaded with dlopen on first use: only a
// process that signs or checks a remote artifact maps it (4.5 MB, ~0.3 ms of relocations that
// a whole-process cache hit would otherwise pay).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "support/status.h"

namespace kiln::cache {

using HmacTag = std::array<uint8_t, 32>;

// The tag of the concatenation of `parts` under `key`; kUnavailable when libcrypto.so.3 cannot
// be loaded (then nothing can be signed or checked, and callers refuse rather than trust).
Result<HmacTag> hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts);

// Compares in time independent of where the tags differ.
bool tags_equal(const HmacTag& a, const HmacTag& b);

}  // namespace kiln::cache
