// Who may publish what a node loads (docs/SECURITY.md): Ed25519 publisher keys apart from the
// readers' trust, in Nix's model. A publisher holds a private key (`kiln key generate NAME`);
// every node lists the public halves it trusts (`NAME:BASE64`, rotated by adding `NAME-2`
// before dropping `NAME-1`) and the keys it revokes. A reader holds no private key, so it
// cannot publish whatever the server would let it do.
//
// The signature covers a fixed fingerprint (sign_fingerprint): the key's name, the tier's
// namespace, the object's type and cache key, the SHA-256 of its bytes and the time it was
// signed, so an object replayed under another key, type or tenant's namespace is refused.
//
// The cryptography is OpenSSL 3's libcrypto (EVP: Ed25519, SHA-256, HMAC, RAND), loaded with
// dlopen on first use like cache/hmac.cpp: a hit that touches no remote maps none of it, and
// a node without libcrypto refuses every signed object rather than trust it.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::cache {

class Settings;

using Sha256 = std::array<uint8_t, 32>;
using Ed25519Signature = std::array<uint8_t, 64>;

// SHA-256 of the parts joined; kUnavailable without libcrypto.
Result<Sha256> sha256(std::initializer_list<std::string_view> parts);
std::string sha256_hex(const Sha256& h);

struct PublicKey {
  std::string name;                 // "ci-1": what a node lists, revokes and logs
  std::array<uint8_t, 32> bytes{};  // the raw Ed25519 public key
  std::string str() const;          // "NAME:BASE64", as `kiln key generate` prints it
};

struct SigningKey {
  std::string name;
  std::array<uint8_t, 32> seed{};  // the raw Ed25519 private key
  PublicKey public_key;
};

// A key name: 1-64 of [A-Za-z0-9._-]; said with what is wrong.
Status check_key_name(std::string_view name);

// A new key from the system's random source.
Result<SigningKey> generate_signing_key(const std::string& name);
// A private key file's text: "NAME:BASE64(seed | public key)\n" (Nix's secret-key format).
std::string format_signing_key(const SigningKey& key);
Result<SigningKey> parse_signing_key(std::string_view text);
// Read as a secret (cache/settings.h read_secret_file: owner-only), then parsed.
Result<SigningKey> read_signing_key_file(const std::string& path);
// Public keys, comma or whitespace separated, each NAME:BASE64 (32 bytes); `what` names the
// setting in errors.
Result<std::vector<PublicKey>> parse_public_keys(std::string_view text, const std::string& what);

Result<Ed25519Signature> ed25519_sign(const SigningKey& key, std::string_view message);
// False on a bad signature; kUnavailable when libcrypto cannot be had.
Result<bool> ed25519_verify(const PublicKey& key, std::string_view message, const Ed25519Signature& signature);

// What a node trusts and publishes with, from its settings.
struct TrustConfig {
  std::optional<SigningKey> signing_key;  // publishes signed with it; none: a reader when keys are trusted
  std::vector<PublicKey> trusted;         // loads only what these signed (its own key is always among them)
  std::vector<std::string> revoked_names; // refused even when trusted
  std::vector<PublicKey> revoked_keys;
  std::string secret;                     // the older HMAC secret, used only when no key is set
  // Publisher keys are in force: only objects signed by a trusted, unrevoked key load.
  bool keys() const { return !trusted.empty(); }
  // Whether this node may publish at all: with keys, only when it holds a signing key.
  bool can_publish() const { return !keys() || signing_key.has_value(); }
  bool is_revoked(const PublicKey& k) const;
  // The trusted key of that name that is not revoked, or null.
  const PublicKey* trusted_key(std::string_view name) const;
  // "Ed25519 (publishing as ci-1; trusting ci-1, ci-2)", "HMAC-SHA256 (any node that reads can
  // publish)", "unsigned (anyone who can write to a tier can publish)".
  std::string describe() const;
  // The warning a process says once when its tiers are not under publisher keys, or "".
  std::string weakness() const;
};

// remote.signing_key_file, remote.trusted_keys, remote.revoked_keys and remote.secret_file.
Result<TrustConfig> trust_from_settings(const Settings& settings);

}  // namespace kiln::cache
