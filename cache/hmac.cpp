#include "cache/hmac.h"

#include "cache/crypto.h"

namespace kiln::cache {

Result<HmacTag> hmac_sha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  void* ctx = c->HMAC_CTX_new();
  if (!ctx) return internal_error("HMAC_CTX_new failed");
  HmacTag tag{};
  unsigned int len = 0;
  bool ok = c->HMAC_Init_ex(ctx, key.data(), static_cast<int>(key.size()), c->EVP_sha256(), nullptr) == 1;
  for (auto part : parts) ok = ok && c->HMAC_Update(ctx, reinterpret_cast<const unsigned char*>(part.data()), part.size()) == 1;
  ok = ok && c->HMAC_Final(ctx, tag.data(), &len) == 1 && len == tag.size();
  c->HMAC_CTX_free(ctx);
  if (!ok) return internal_error("HMAC-SHA256 failed in libcrypto");
  return tag;
}

bool tags_equal(const HmacTag& a, const HmacTag& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace kiln::cache
