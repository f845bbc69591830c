#include "cache/trust.h"

#include <algorithm>
#include <cstring>

#include "cache/crypto.h"
#include "cache/settings.h"

namespace kiln::cache {
namespace {

constexpr char k_base64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const uint8_t* data, size_t n) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = uint32_t(data[i]) << 16 | uint32_t(data[i + 1]) << 8 | data[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += k_base64[(v >> s) & 63];
  }
  if (i < n) {
    uint32_t v = uint32_t(data[i]) << 16 | (i + 1 < n ? uint32_t(data[i + 1]) << 8 : 0);
    out += k_base64[(v >> 18) & 63];
    out += k_base64[(v >> 12) & 63];
    out += i + 1 < n ? k_base64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// Standard base64 with padding; nullopt on any other character or a wrong length.
std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      char ch = in[i + j];
      const char* p = ch ? std::strchr(k_base64, ch) : nullptr;
      if (ch == '=' && i + 4 == in.size() && j >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (!p || pad) return std::nullopt;
      v = v << 6 | static_cast<uint32_t>(p - k_base64);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2) out += static_cast<char>(v >> 8);
    if (pad < 1) out += static_cast<char>(v);
  }
  return out;
}

// An EVP_PKEY freed on scope exit.
struct Pkey {
  const Crypto* c;
  void* p;
  ~Pkey() {
    if (p) c->EVP_PKEY_free(p);
  }
};
struct MdCtx {
  const Crypto* c;
  void* p;
  ~MdCtx() {
    if (p) c->EVP_MD_CTX_free(p);
  }
};

std::vector<std::string_view> split_keys(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i])))) ++i;
    size_t start = i;
    while (i < text.size() && text[i] != ',' && !std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

}  // namespace

Result<Sha256> sha256(std::initializer_list<std::string_view> parts) {
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  MdCtx ctx{c, c->EVP_MD_CTX_new()};
  if (!ctx.p) return internal_error("EVP_MD_CTX_new failed");
  Sha256 out{};
  unsigned int len = 0;
  bool ok = c->EVP_DigestInit_ex(ctx.p, c->EVP_sha256(), nullptr) == 1;
  for (auto part : parts) ok = ok && c->EVP_DigestUpdate(ctx.p, part.data(), part.size()) == 1;
  ok = ok && c->EVP_DigestFinal_ex(ctx.p, out.data(), &len) == 1 && len == out.size();
  if (!ok) return internal_error("SHA-256 failed in libcrypto");
  return out;
}

std::string sha256_hex(const Sha256& h) {
  static const char* k = "0123456789abcdef";
  std::string out;
  for (uint8_t b : h) {
    out += k[b >> 4];
    out += k[b & 15];
  }
  return out;
}

std::string PublicKey::str() const { return name + ":" + base64_encode(bytes.data(), bytes.size()); }

Status check_key_name(std::string_view name) {
  if (name.empty() || name.size() > 64)
    return invalid_argument("a key name has 1 to 64 characters ('" + std::string(name.substr(0, 80)) + "' has " + std::to_string(name.size()) + ")");
  for (char ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
      return invalid_argument("a key name holds only letters, digits, '.', '_' and '-' ('" + std::string(name) +
                              "'); name keys like ci-1, ci-2 so they rotate by adding");
  return {};
}

namespace {

Result<PublicKey> public_of(const Crypto* c, const std::string& name, const std::array<uint8_t, 32>& seed) {
  Pkey key{c, c->EVP_PKEY_new_raw_private_key(k_evp_pkey_ed25519, nullptr, seed.data(), seed.size())};
  if (!key.p) return internal_error("libcrypto refused an Ed25519 private key");
  PublicKey pub;
  pub.name = name;
  size_t len = pub.bytes.size();
  if (c->EVP_PKEY_get_raw_public_key(key.p, pub.bytes.data(), &len) != 1 || len != 32)
    return internal_error("libcrypto could not derive an Ed25519 public key");
  return pub;
}

}  // namespace

Result<SigningKey> generate_signing_key(const std::string& name) {
  KILN_RETURN_IF_ERROR(check_key_name(name));
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  SigningKey key;
  key.name = name;
  if (c->RAND_bytes(key.seed.data(), static_cast<int>(key.seed.size())) != 1)
    return unavailable("the system's random source gave no bytes (RAND_bytes failed)");
  KILN_ASSIGN_OR_RETURN(key.public_key, public_of(c, name, key.seed));
  return key;
}

std::string format_signing_key(const SigningKey& key) {
  uint8_t both[64];
  std::memcpy(both, key.seed.data(), 32);
  std::memcpy(both + 32, key.public_key.bytes.data(), 32);
  std::string out = key.name + ":" + base64_encode(both, 64) + "\n";
  std::memset(both, 0, sizeof both);
  return out;
}

Result<SigningKey> parse_signing_key(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    return invalid_argument("not a kiln signing key (NAME:BASE64, as `kiln key generate` writes)");
  SigningKey key;
  key.name = std::string(text.substr(0, colon));
  KILN_RETURN_IF_ERROR(check_key_name(key.name));
  auto raw = base64_decode(text.substr(colon + 1));
  if (!raw || raw->size() != 64)
    return invalid_argument("signing key " + key.name + ": not 64 bytes of base64 (a private key and its public key)");
  std::memcpy(key.seed.data(), raw->data(), 32);
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  KILN_ASSIGN_OR_RETURN(key.public_key, public_of(c, key.name, key.seed));
  if (std::memcmp(key.public_key.bytes.data(), raw->data() + 32, 32) != 0)
    return invalid_argument("signing key " + key.name + ": its public half does not match its private half (damaged)");
  return key;
}

Result<SigningKey> read_signing_key_file(const std::string& path) {
  auto text = read_secret_file(path);
  if (!text.ok()) return invalid_argument("remote.signing_key_file: " + text.status().message());
  auto key = parse_signing_key(*text);
  if (!key.ok()) return invalid_argument("remote.signing_key_file " + path + ": " + key.status().message());
  return key;
}

Result<std::vector<PublicKey>> parse_public_keys(std::string_view text, const std::string& what) {
  std::vector<PublicKey> out;
  for (std::string_view word : split_keys(text)) {
    size_t colon = word.find(':');
    if (colon == std::string_view::npos)
      return invalid_argument(what + ": '" + std::string(word) + "' is not NAME:BASE64 (what `kiln key generate` prints)");
    PublicKey key;
    key.name = std::string(word.substr(0, colon));
    auto bad_name = check_key_name(key.name);
    if (!bad_name.ok()) return invalid_argument(what + ": " + bad_name.message());
    auto raw = base64_decode(word.substr(colon + 1));
    if (!raw || raw->size() != 32)
      return invalid_argument(what + ": key " + key.name + " is not 32 bytes of base64 (an Ed25519 public key)");
    std::memcpy(key.bytes.data(), raw->data(), 32);
    out.push_back(std::move(key));
  }
  return out;
}

Result<Ed25519Signature> ed25519_sign(const SigningKey& key, std::string_view message) {
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  Pkey pkey{c, c->EVP_PKEY_new_raw_private_key(k_evp_pkey_ed25519, nullptr, key.seed.data(), key.seed.size())};
  MdCtx ctx{c, c->EVP_MD_CTX_new()};
  if (!pkey.p || !ctx.p) return internal_error("libcrypto could not make an Ed25519 signing context");
  Ed25519Signature sig{};
  size_t len = sig.size();
  if (c->EVP_DigestSignInit(ctx.p, nullptr, nullptr, nullptr, pkey.p) != 1 ||
      c->EVP_DigestSign(ctx.p, sig.data(), &len, reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1 ||
      len != sig.size())
    return internal_error("Ed25519 signing failed in libcrypto");
  return sig;
}

Result<bool> ed25519_verify(const PublicKey& key, std::string_view message, const Ed25519Signature& signature) {
  KILN_ASSIGN_OR_RETURN(const Crypto* c, crypto());
  Pkey pkey{c, c->EVP_PKEY_new_raw_public_key(k_evp_pkey_ed25519, nullptr, key.bytes.data(), key.bytes.size())};
  if (!pkey.p) return false;  // not a point on the curve: nothing it signs is valid
  MdCtx ctx{c, c->EVP_MD_CTX_new()};
  if (!ctx.p) return internal_error("EVP_MD_CTX_new failed");
  if (c->EVP_DigestVerifyInit(ctx.p, nullptr, nullptr, nullptr, pkey.p) != 1) return internal_error("EVP_DigestVerifyInit failed");
  return c->EVP_DigestVerify(ctx.p, signature.data(), signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                             message.size()) == 1;
}

bool TrustConfig::is_revoked(const PublicKey& k) const {
  if (std::find(revoked_names.begin(), revoked_names.end(), k.name) != revoked_names.end()) return true;
  for (auto& r : revoked_keys)
    if (r.bytes == k.bytes) return true;  // the same key under another name is the same key
  return false;
}

const PublicKey* TrustConfig::trusted_key(std::string_view name) const {
  for (auto& k : trusted)
    if (k.name == name) return is_revoked(k) ? nullptr : &k;
  return nullptr;
}

std::string TrustConfig::describe() const {
  if (keys()) {
    std::string names;
    for (auto& k : trusted) names += (names.empty() ? "" : ", ") + k.name + (is_revoked(k) ? " (revoked)" : "");
    return std::string("Ed25519 publisher keys (") +
           (signing_key ? "publishing as " + signing_key->name : std::string("a reader: publishes nothing")) + "; trusting " + names + ")";
  }
  if (!secret.empty()) return "HMAC-SHA256 cluster secret (any node that reads can publish)";
  return "unsigned (anyone who can write to a tier can publish what this node loads)";
}

std::string TrustConfig::weakness() const {
  if (keys()) return "";
  if (!secret.empty())
    return "remote tiers are signed with the HMAC cluster secret only: any node that reads can publish what every node loads; "
           "give publishers keys (`kiln key generate`, KILN_SIGNING_KEY_FILE) and readers KILN_TRUSTED_KEYS (docs/SECURITY.md)";
  return "remote tiers are unsigned: anyone who can write to them can make this node run their code; set KILN_TRUSTED_KEYS "
         "(docs/SECURITY.md)";
}

Result<TrustConfig> trust_from_settings(const Settings& settings) {
  TrustConfig t;
  const std::string& key_file = settings.get(SettingKey::kSigningKeyFile);
  if (!key_file.empty()) {
    KILN_ASSIGN_OR_RETURN(SigningKey key, read_signing_key_file(key_file));
    t.signing_key = std::move(key);
  }
  KILN_ASSIGN_OR_RETURN(t.trusted, parse_public_keys(settings.get(SettingKey::kTrustedKeys), "remote.trusted_keys"));
  for (std::string_view word : split_keys(settings.get(SettingKey::kRevokedKeys))) {
    if (word.find(':') == std::string_view::npos) {
      KILN_RETURN_IF_ERROR(check_key_name(word));
      t.revoked_names.emplace_back(word);
    } else {
      KILN_ASSIGN_OR_RETURN(auto keys, parse_public_keys(word, "remote.revoked_keys"));
      t.revoked_keys.insert(t.revoked_keys.end(), keys.begin(), keys.end());
    }
  }
  // A publisher trusts what it signs: its own key joins the trusted ones (and so turns keys on).
  if (t.signing_key) {
    bool listed = false;
    for (auto& k : t.trusted) {
      if (k.name == t.signing_key->name && k.bytes != t.signing_key->public_key.bytes)
        return invalid_argument("remote.trusted_keys lists a key named " + k.name +
                                " that is not the public half of remote.signing_key_file: name keys apart (ci-1, ci-2)");
      listed = listed || k.name == t.signing_key->name;
    }
    if (!listed) t.trusted.push_back(t.signing_key->public_key);
  }
  for (size_t i = 0; i < t.trusted.size(); ++i)
    for (size_t j = i + 1; j < t.trusted.size(); ++j)
      if (t.trusted[i].name == t.trusted[j].name && t.trusted[i].bytes != t.trusted[j].bytes)
        return invalid_argument("remote.trusted_keys names two different keys " + t.trusted[i].name + ": name keys apart (ci-1, ci-2)");
  const std::string& secret_file = settings.get(SettingKey::kSecretFile);
  if (!secret_file.empty()) {
    KILN_ASSIGN_OR_RETURN(t.secret, read_secret_file(secret_file));
  }
  return t;
}

}  // namespace kiln::cache
