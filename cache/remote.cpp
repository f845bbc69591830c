#include "cache/remote.h"

#include <unistd.h>

#include <ctime>

#include <algorithm>
#include <cstring>

#include "cache/hmac.h"
#include "cache/trust.h"
#include "cache/settings.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_magic = "KILNREM2";
constexpr size_t k_envelope_header = 136;
constexpr size_t k_max_signer_name = 64;
enum Scheme : uint8_t { k_unsigned = 0, k_hmac = 1, k_ed25519 = 2 };

// What a signature covers (remote.h): every field a verifier must agree on, in a stated order.
std::string fingerprint(Scheme scheme, std::string_view signer, std::string_view ns, RemoteObject type, const Hash128& key,
                        const Sha256& payload_hash, int64_t signed_at) {
  std::string out = "kiln-remote-v2\n";
  out += scheme == k_ed25519 ? "ed25519" : "hmac-sha256";
  out += '\n';
  out.append(signer).append("\n").append(ns).append("\n");
  out += static_cast<char>(type);
  out += '\n';
  out += key.hex() + "\n" + sha256_hex(payload_hash) + "\n" + std::to_string(signed_at);
  return out;
}

void put_le64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t get_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string base64(std::string_view in) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += k[(v >> s) & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | (i + 1 < in.size() ? uint32_t(uint8_t(in[i + 1])) << 8 : 0);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += i + 1 < in.size() ? k[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}


}  // namespace

const char* tier_counter_name(TierCounter c) {
  switch (c) {
    case TierCounter::kHits: return "hits";
    case TierCounter::kMisses: return "misses";
    case TierCounter::kErrors: return "errors";
    case TierCounter::kRejected: return "rejected";
    case TierCounter::kSkipped: return "skipped";
    case TierCounter::kBytesIn: return "bytes_in";
    case TierCounter::kBytesOut: return "bytes_out";
    case TierCounter::kPublished: return "published";
    case TierCounter::kMicroseconds: return "us";
    case TierCounter::kCount: break;
  }
  return "?";
}

std::string TierConfig::str() const {
  std::string out = label;
  if (read_only) out += "|read-only";
  if (prefix != "kiln:") out += "|prefix=" + prefix;
  if (layout != "flat") out += "|layout=" + layout;
  if (!token_file.empty()) out += "|token-file=" + token_file;
  if (!basic_auth_file.empty()) out += "|basic-auth-file=" + basic_auth_file;
  if (!password_file.empty()) out += "|password-file=" + password_file;
  if (!s3_endpoint.empty()) out += "|endpoint=" + s3_endpoint;
  if (!s3_region.empty()) out += "|region=" + s3_region;
  if (!s3_style.empty()) out += "|style=" + s3_style;
  return out;
}

Result<std::vector<TierConfig>> parse_tiers(std::string_view text) {
  std::vector<TierConfig> tiers;
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos >= text.size()) break;
    size_t end = pos;
    while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))) ++end;
    std::string_view word = text.substr(pos, end - pos);
    pos = end;
    TierConfig tier;
    size_t bar = word.find('|');
    std::string_view urls = word.substr(0, bar);
    tier.label = std::string(urls);
    auto bad = [&](const std::string& why) { return invalid_argument("remote tier '" + std::string(word) + "': " + why); };
    size_t start = 0;
    while (start <= urls.size()) {
      size_t comma = urls.find(',', start);
      std::string_view one = urls.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      if (one.empty()) return bad("an empty endpoint");
      KILN_ASSIGN_OR_RETURN(EndpointUrl url, parse_endpoint_url(one));
      if (!tier.endpoints.empty() && url.scheme != tier.endpoints.front().scheme)
        return bad("the endpoints of one tier share a scheme (make two tiers)");
      tier.endpoints.push_back(std::move(url));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    while (bar != std::string_view::npos) {
      size_t next = word.find('|', bar + 1);
      std::string_view attr = word.substr(bar + 1, next == std::string_view::npos ? std::string_view::npos : next - bar - 1);
      bar = next;
      size_t eq = attr.find('=');
      std::string_view name = attr.substr(0, eq), value = eq == std::string_view::npos ? std::string_view() : attr.substr(eq + 1);
      if (name == "read-only" && eq == std::string_view::npos) {
        tier.read_only = true;
      } else if (name == "read-write" && eq == std::string_view::npos) {
        tier.read_only = false;
      } else if (name == "prefix" && eq != std::string_view::npos) {
        tier.prefix = std::string(value);
      } else if (name == "layout" && (value == "flat" || value == "subdirs" || value == "bazel")) {
        tier.layout = std::string(value);
      } else if ((name == "token-file" || name == "basic-auth-file" || name == "password-file") && !value.empty()) {
        (name == "token-file" ? tier.token_file : name == "basic-auth-file" ? tier.basic_auth_file : tier.password_file) = std::string(value);
      } else if (name == "endpoint" && !value.empty()) {
        KILN_ASSIGN_OR_RETURN(EndpointUrl server, parse_endpoint_url(value));
        if (server.scheme != "http" && server.scheme != "https") return bad("endpoint= is the S3 server's http:// or https:// URL");
        if (server.path != "/") return bad("endpoint= is a server (scheme://host:port); the bucket and prefix go in s3://BUCKET/PREFIX");
        tier.s3_endpoint = std::string(value);
      } else if (name == "region" && !value.empty()) {
        tier.s3_region = std::string(value);
      } else if (name == "style" && (value == "path" || value == "virtual")) {
        tier.s3_style = std::string(value);
      } else {
        return bad("unknown attribute '" + std::string(attr) +
                   "' (known: read-only, read-write, prefix=P, layout=flat|subdirs|bazel, token-file=F, basic-auth-file=F, "
                   "password-file=F, endpoint=URL, region=R, style=path|virtual)");
      }
    }
    bool s3 = tier.endpoints.front().scheme == "s3";
    if (!s3 && (!tier.s3_endpoint.empty() || !tier.s3_region.empty() || !tier.s3_style.empty()))
      return bad("endpoint=, region= and style= are for s3:// tiers");
    if (s3 && (!tier.token_file.empty() || !tier.basic_auth_file.empty()))
      return bad("s3:// tiers sign with AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/credentials, or "
                 "AWS_WEB_IDENTITY_TOKEN_FILE), not a token-file or basic-auth-file");
    if (s3 && tier.layout != "flat") return bad("s3:// tiers name objects PREFIX/NAME (no layout=)");
    bool http = tier.endpoints.front().scheme != "redis";
    if (http && !tier.password_file.empty()) return bad("password-file is for redis:// tiers (http uses token-file or basic-auth-file)");
    if (!http && (!tier.token_file.empty() || !tier.basic_auth_file.empty()))
      return bad("token-file and basic-auth-file are for http:// and https:// tiers (redis uses password-file)");
    if (!tier.token_file.empty() && !tier.basic_auth_file.empty()) return bad("give token-file or basic-auth-file, not both");
    tiers.push_back(std::move(tier));
  }
  return tiers;
}

std::string object_name(RemoteObject type, const Hash128& key) {
  return key.hex() + std::string(31, '0') + (type == RemoteObject::kArtifact ? '0' : type == RemoteObject::kManifest ? '1' : '2');
}

std::string chunk_object_name(const Sha256& hash) {
  // Where to look, not what is trusted: the signed list names each chunk's whole SHA-256, which
  // is checked on arrival, so a chunk planted under a name (of 128 bits) is a miss, never loaded.
  Hash128 name;
  std::memcpy(name.bytes.data(), hash.data(), 16);
  return object_name(RemoteObject::kChunk, name);
}

std::string tier_namespace(const TierConfig& tier) {
  const EndpointUrl& url = tier.endpoints.front();
  // The database and the prefix: tenants on databases 1 and 2 with the default prefix differ.
  if (url.scheme == "redis") return "redis:" + std::to_string(url.db) + "/" + tier.prefix;
  if (url.scheme == "s3") return "s3:" + url.host + url.path;
  return "http:" + url.path;  // the folder, not the host: a tier's endpoints share it
}

Result<std::string> seal_object(RemoteObject type, const Hash128& key, std::string_view payload, const TrustConfig& trust,
                                std::string_view ns, int64_t signed_at) {
  if (trust.keys() && !trust.signing_key)
    return permission_denied("this node trusts publisher keys but holds no signing key (remote.signing_key_file): a reader publishes nothing");
  Scheme scheme = trust.signing_key ? k_ed25519 : !trust.secret.empty() ? k_hmac : k_unsigned;
  std::string signer = scheme == k_ed25519 ? trust.signing_key->name : "";
  std::string out(k_envelope_header, '\0');
  std::memcpy(out.data(), k_magic.data(), k_magic.size());
  out[8] = static_cast<char>(type);
  out[9] = static_cast<char>(scheme);
  out[10] = static_cast<char>(signer.size());
  std::memcpy(out.data() + 16, key.bytes.data(), 16);
  if (scheme != k_unsigned) {
    if (signed_at == 0) signed_at = static_cast<int64_t>(::time(nullptr));
    put_le64(out.data() + 32, static_cast<uint64_t>(signed_at));
    KILN_ASSIGN_OR_RETURN(Sha256 hash, sha256({payload}));
    std::memcpy(out.data() + 40, hash.data(), hash.size());
    std::string fp = fingerprint(scheme, signer, ns, type, key, hash, signed_at);
    if (scheme == k_ed25519) {
      KILN_ASSIGN_OR_RETURN(Ed25519Signature sig, ed25519_sign(*trust.signing_key, fp));
      std::memcpy(out.data() + 72, sig.data(), sig.size());
    } else {
      KILN_ASSIGN_OR_RETURN(HmacTag tag, hmac_sha256(trust.secret, {fp}));
      std::memcpy(out.data() + 72, tag.data(), tag.size());
    }
  }
  out += signer;
  out.append(payload);
  return out;
}

Result<std::string_view> open_object(RemoteObject type, const Hash128& key, std::string_view envelope, const TrustConfig& trust,
                                     std::string_view ns, std::string* signer_out) {
  auto bad = [](const std::string& why) { return Status(StatusCode::kDataLoss, why); };
  if (envelope.size() < k_envelope_header || envelope.substr(0, k_magic.size()) != k_magic)
    return bad("not a kiln object (" + std::to_string(envelope.size()) + " bytes, no KILNREM2 header)");
  if (envelope[8] != static_cast<char>(type) || std::memcmp(envelope.data() + 16, key.bytes.data(), 16) != 0)
    return bad("it holds another object than the one asked for (swapped or misfiled)");
  auto scheme = static_cast<uint8_t>(envelope[9]);
  size_t name_size = static_cast<uint8_t>(envelope[10]);
  if (scheme > k_ed25519) return bad("an unknown signature scheme " + std::to_string(scheme));
  if (name_size > k_max_signer_name || (name_size != 0) != (scheme == k_ed25519) || envelope.size() < k_envelope_header + name_size)
    return bad("a malformed signer name (" + std::to_string(name_size) + " bytes)");
  std::string signer(envelope.substr(k_envelope_header, name_size));
  std::string_view payload = envelope.substr(k_envelope_header + name_size);
  if (signer_out) *signer_out = signer;
  if (!trust.keys() && trust.secret.empty()) return payload;  // unsigned: the blob's own checks follow
  int64_t signed_at = static_cast<int64_t>(get_le64(envelope.data() + 32));
  Sha256 said{};
  std::memcpy(said.data(), envelope.data() + 40, said.size());
  if (trust.keys()) {
    if (scheme != k_ed25519)
      return bad(std::string("it is ") + (scheme == k_hmac ? "signed with a cluster secret" : "not signed") +
                 ", and this node loads only what a trusted publisher key signed");
    KILN_RETURN_IF_ERROR(check_key_name(signer).ok() ? Status() : bad("a malformed signer name"));
    const PublicKey* pub = trust.trusted_key(signer);
    if (!pub) {
      bool listed = false, revoked = false;
      for (auto& k : trust.trusted) listed = listed || k.name == signer;
      for (auto& n : trust.revoked_names) revoked = revoked || n == signer;
      for (auto& k : trust.revoked_keys) revoked = revoked || k.name == signer;
      return bad("it is signed by key '" + signer + "', which " +
                 (revoked || listed ? std::string("is revoked here (remote.revoked_keys)") : "this node does not trust (remote.trusted_keys)"));
    }
    Ed25519Signature sig{};
    std::memcpy(sig.data(), envelope.data() + 72, sig.size());
    KILN_ASSIGN_OR_RETURN(bool good, ed25519_verify(*pub, fingerprint(k_ed25519, signer, ns, type, key, said, signed_at), sig));
    if (!good)
      return bad("its signature by key '" + signer + "' does not match (altered, or signed for another namespace than " + std::string(ns) + ")");
  } else {
    if (scheme != k_hmac) return bad("it is not signed with the cluster secret, and this node requires it (remote.secret_file)");
    KILN_ASSIGN_OR_RETURN(HmacTag expected, hmac_sha256(trust.secret, {fingerprint(k_hmac, "", ns, type, key, said, signed_at)}));
    HmacTag got;
    std::memcpy(got.data(), envelope.data() + 72, got.size());
    if (!tags_equal(expected, got))
      return bad("its signature does not match (signed with another secret, for another namespace than " + std::string(ns) + ", or altered since)");
  }
  // The signature covers the hash: the bytes must be the ones hashed.
  KILN_ASSIGN_OR_RETURN(Sha256 actual, sha256({payload}));
  if (actual != said) return bad("its bytes do not match the SHA-256 its signer signed (altered on the way or in the store)");
  return payload;
}

namespace {

// A PEM file named by a setting, read to check it holds what it should: a mistake is heard
// about with the file's name when the tiers are made, not as a TLS error on the first miss.
Status check_pem_file(const std::string& path, const char* setting, const char* what) {
  auto text = read_file(path);
  if (!text.ok()) return invalid_argument(std::string(setting) + ": cannot read " + path + " (" + text.status().message() + ")");
  if (text->find("-----BEGIN CERTIFICATE-----") == std::string::npos)
    return invalid_argument(std::string(setting) + ": " + path + " is not " + what +
                            " (no '-----BEGIN CERTIFICATE-----' line): give a PEM file");
  return {};
}

// The client certificate's key, read as a secret (owner-only, as ssh insists for keys): from
// key_file, else from the certificate's file when the key is in it (that file is then a
// secret too).
Result<std::string> client_key(const RemoteOptions& o) {
  if (o.key_file.empty()) {
    auto cert = read_file(o.cert_file);
    if (!cert.ok() || cert->find("PRIVATE KEY-----") == std::string::npos)
      return invalid_argument("remote.cert_file " + o.cert_file + " holds no private key: name the key's file in remote.key_file");
  }
  const char* setting = o.key_file.empty() ? "remote.cert_file (it holds the key)" : "remote.key_file";
  auto text = read_secret_file(o.key_file.empty() ? o.cert_file : o.key_file);
  if (!text.ok()) return invalid_argument(std::string(setting) + ": " + text.status().message());
  if (text->find("PRIVATE KEY-----") == std::string::npos)
    return invalid_argument("remote.key_file: " + o.key_file + " is not a PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)");
  return text;
}

// Whether a host name is this machine: credentials sent there in clear cross no network.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

}  // namespace

Result<std::unique_ptr<RemoteTiers>> RemoteTiers::create(RemoteOptions options) {
  std::unique_ptr<RemoteTiers> self(new RemoteTiers(std::move(options)));
  const RemoteOptions& o = self->m_options;
  bool any_https = false;
  for (auto& config : o.tiers) {
    for (auto& url : config.endpoints) any_https = any_https || url.scheme == "https";
    any_https = any_https || (config.endpoints.front().scheme == "s3" && config.s3_endpoint.rfind("http://", 0) != 0);
  }
  std::string key_pem;
  if (any_https) {
    if (!o.ca_file.empty()) KILN_RETURN_IF_ERROR(check_pem_file(o.ca_file, "remote.ca_file", "a PEM bundle of CA certificates"));
    if (!o.cert_file.empty()) {
      KILN_RETURN_IF_ERROR(check_pem_file(o.cert_file, "remote.cert_file", "a PEM certificate"));
      KILN_ASSIGN_OR_RETURN(key_pem, client_key(o));
    } else if (!o.key_file.empty()) {
      return invalid_argument("remote.key_file is set without remote.cert_file: a key alone identifies no one; set both");
    }
  }
  for (auto& config : self->m_options.tiers) {
    auto tier = std::make_unique<Tier>();
    tier->config = config;
    tier->ns = tier_namespace(config);
    EndpointOptions eo;
    eo.connect_timeout = self->m_options.connect_timeout;
    eo.io_timeout = self->m_options.io_timeout;
    eo.prefix = config.prefix;
    eo.layout = config.layout;
    eo.ca_file = o.ca_file;
    eo.cert_file = o.cert_file;
    eo.key_pem = key_pem;
    eo.has_client_certificate = !o.cert_file.empty();
    eo.s3_endpoint = config.s3_endpoint;
    eo.s3_region = config.s3_region;
    eo.s3_style = config.s3_style;
    eo.max_object_bytes = o.max_object_bytes + k_envelope_header + k_max_signer_name;
    if (!config.token_file.empty()) {
      KILN_ASSIGN_OR_RETURN(std::string token, read_secret_file(config.token_file));
      eo.authorization = "Bearer " + token;
    }
    if (!config.basic_auth_file.empty()) {
      KILN_ASSIGN_OR_RETURN(std::string user_password, read_secret_file(config.basic_auth_file));
      if (user_password.find(':') == std::string::npos)
        return invalid_argument("the basic-auth file " + config.basic_auth_file + " must hold user:password");
      eo.authorization = "Basic " + base64(user_password);
      eo.http_user = user_password.substr(0, user_password.find(':'));
    }
    if (!config.password_file.empty()) {
      KILN_ASSIGN_OR_RETURN(eo.password, read_secret_file(config.password_file));
    }
    // A token, a user's password or Redis's AUTH password sent over plain http:// or redis://
    // to another machine can be read by anyone on the path: allowed (a private network may be
    // trusted), but said once, with the way out.
    const char* credential = !config.token_file.empty()        ? "token-file"
                             : !config.basic_auth_file.empty() ? "basic-auth-file"
                             : !config.password_file.empty()   ? "password-file"
                                                               : nullptr;
    for (auto& url : config.endpoints)
      if (credential && url.scheme != "https" && !is_loopback(url.host) && o.report)
        o.report("credentials in clear " + url.text,
                 std::string("the ") + credential + " of tier " + url.text + " is sent in clear over " + url.scheme +
                     ":// to another machine: anyone on the path can read it; use https:// (for Redis, a local TLS "
                     "tunnel: docs/CACHE.md, 'The shared cluster cache')");
    for (auto& url : config.endpoints) {
      auto endpoint = std::make_unique<Endpoint>();
      KILN_ASSIGN_OR_RETURN(endpoint->remote, make_endpoint(url, eo));
      tier->endpoints.push_back(std::move(endpoint));
    }
    self->m_tiers.push_back(std::move(tier));
  }
  return self;
}

RemoteTiers::~RemoteTiers() {
  {
    std::lock_guard lock(m_queue_mutex);
    m_stop = true;
  }
  m_queue_changed.notify_all();
  if (m_worker.joinable()) m_worker.join();
}

std::vector<RemoteTiers::Endpoint*> RemoteTiers::ranked(Tier& tier, const std::string& name) {
  std::vector<Endpoint*> out;
  if (tier.endpoints.size() == 1) return {tier.endpoints.front().get()};
  // Rendezvous: endpoints by descending hash of (endpoint, name). Adding or losing one moves
  // only the names it wins or held.
  std::vector<std::pair<Hash128, Endpoint*>> scored;
  for (auto& e : tier.endpoints) scored.push_back({xxh3_128(e->remote->label() + '\n' + name), e.get()});
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return b.first < a.first; });
  for (auto& [score, e] : scored) out.push_back(e);
  return out;
}

bool RemoteTiers::is_down(const Endpoint& e) const { return e.down_until_ms.load() > now_ms(); }

RemoteTiers::Endpoint& RemoteTiers::owner(Tier& tier, const std::string& name) {
  auto order = ranked(tier, name);
  for (Endpoint* e : order)
    if (!is_down(*e)) return *e;
  return *order.front();
}

template <typename F>
auto RemoteTiers::guarded(Tier& tier, Endpoint& endpoint, F&& call) -> decltype(call(*endpoint.remote)) {
  if (endpoint.down_until_ms.load() > now_ms()) {
    tier.add(TierCounter::kSkipped, 1);
    return unavailable(endpoint.remote->label() + " is skipped after a recent failure");
  }
  auto start = std::chrono::steady_clock::now();
  auto result = call(*endpoint.remote);
  tier.add(TierCounter::kMicroseconds,
           std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
  if (!result.ok() && result.status().code() == StatusCode::kPermissionDenied) {
    // The server answered: it refused these credentials this call (a reader's write). Not a
    // failure of the endpoint, so reads go on (RemoteTiers::deny says it once).
    return result;
  }
  if (!result.ok()) {
    tier.add(TierCounter::kErrors, 1);
    endpoint.down_until_ms.store(now_ms() + m_options.breaker.count());
    KILN_LOG_AT(kWarn, "remote", result.status().message());
    if (m_options.report && !endpoint.reported.exchange(true))
      m_options.report("failed " + endpoint.remote->label(), "remote cache " + result.status().message() + "; skipping it for " +
                       std::to_string(m_options.breaker.count() / 1000) + " s (ops still compile here)");
  }
  return result;
}

Result<bool> RemoteTiers::with_failover(Tier& tier, const std::string& name, const std::function<Result<bool>(RemoteEndpoint&)>& call,
                                        Endpoint** used) {
  return with_failover(tier, ranked(tier, name), call, used);
}

std::vector<RemoteTiers::Endpoint*> RemoteTiers::chunk_order(Tier& tier, const Hash128& key, size_t index) {
  auto order = ranked(tier, object_name(RemoteObject::kArtifact, key));
  std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(index % order.size()), order.end());
  return order;
}

Result<bool> RemoteTiers::with_failover(Tier& tier, const std::vector<Endpoint*>& order,
                                        const std::function<Result<bool>(RemoteEndpoint&)>& call, Endpoint** used) {
  Result<bool> result = unavailable("no endpoint");
  for (size_t r = 0; r < order.size() && r < 2; ++r) {
    if (used) *used = order[r];
    result = guarded(tier, *order[r], call);
    if (result.ok() || result.status().code() == StatusCode::kPermissionDenied) return result;
  }
  return result;
}

bool RemoteTiers::fetch(RemoteObject type, const Hash128& key, const std::function<Status(std::string_view)>& accept) {
  std::string name = object_name(type, key);
  for (size_t i = 0; i < m_tiers.size(); ++i) {
    Tier& tier = *m_tiers[i];
    {
      // What a tier sent and was refused is not asked for again by this process: it would be
      // refused again (a node re-looks after taking a lease).
      std::lock_guard lock(m_refused_mutex);
      if (m_refused.count({i, name})) continue;
    }
    Endpoint* from = nullptr;
    std::optional<std::string> got;
    // What this answer may hold at most, refused as it arrives: an envelope around a manifest
    // (16 MiB) or an artifact (or its chunk list) under the cap.
    size_t limit = (type == RemoteObject::kManifest ? k_max_manifest_bytes : m_options.max_object_bytes) + k_envelope_header +
                   k_max_signer_name;
    auto asked = with_failover(tier, name, [&](RemoteEndpoint& e) -> Result<bool> {
      KILN_ASSIGN_OR_RETURN(got, e.get(name, limit));
      return true;
    }, &from);
    if (!asked.ok()) continue;
    Endpoint& endpoint = *from;
    if (!got) {
      tier.add(TierCounter::kMisses, 1);
      KILN_LOG_AT(kDebug, "remote", endpoint.remote->label() + ": no " + name);
      continue;
    }
    tier.add(TierCounter::kBytesIn, static_cast<int64_t>(got->size()));
    auto payload = open_object(type, key, *got, m_options.trust, tier.ns);
    std::string whole;  // a chunked artifact, put together
    Status verdict;
    if (payload.ok() && type == RemoteObject::kArtifact && is_chunk_list(*payload)) {
      auto assembled = assemble(tier, key, *payload);
      if (!assembled.ok() && assembled.status().code() != StatusCode::kDataLoss) {
        // A chunk that cannot be had (its endpoint down, it missing or damaged twice): a miss,
        // so the artifact is compiled again and its chunks written anew; never loaded in part.
        tier.add(TierCounter::kMisses, 1);
        KILN_LOG_AT(kWarn, "remote", endpoint.remote->label() + ": " + name + " is not whole: " + assembled.status().message());
        continue;
      }
      if (assembled.ok()) whole = std::move(assembled).value();
      verdict = assembled.ok() ? accept(whole) : assembled.status();
    } else {
      verdict = payload.ok() ? accept(*payload) : payload.status();
    }
    if (!verdict.ok()) {
      tier.add(TierCounter::kRejected, 1);
      {
        std::lock_guard lock(m_refused_mutex);
        m_refused.insert({i, name});
      }
      KILN_LOG_AT(kWarn, "remote", endpoint.remote->label() + ": refused " + name + ": " + verdict.message());
      if (m_options.report)
        m_options.report("refused " + endpoint.remote->label(),
                         "refused an object from remote cache " + endpoint.remote->label() + ": " + verdict.message());
      continue;
    }
    tier.add(TierCounter::kHits, 1);
    KILN_LOG_AT(kDebug, "remote", endpoint.remote->label() + ": hit " + name);
    if (i > 0)  // copied into the faster tiers that can be written
      enqueue(Job{{Publication{type, key, whole.empty() ? std::string(*payload) : std::move(whole)}}, {}, i});
    return true;
  }
  return false;
}

void RemoteTiers::publish(std::vector<Publication> objects, std::function<void()> after) {
  enqueue(Job{std::move(objects), std::move(after), m_tiers.size()});
}

void RemoteTiers::enqueue(Job job) {
  {
    std::lock_guard lock(m_queue_mutex);
    m_queue.push_back(std::move(job));
    if (!m_worker.joinable()) m_worker = std::thread([this] { worker(); });
  }
  m_queue_changed.notify_all();
}

void RemoteTiers::put_everywhere(const Publication& p, size_t below_tier) {
  // A reader (keys trusted, none held) publishes nothing, whatever the server would allow.
  if (!m_options.trust.can_publish()) return;
  std::string name = object_name(p.type, p.key);
  bool chunked = p.type == RemoteObject::kArtifact && p.payload.size() > m_options.chunk_threshold;
  for (size_t i = 0; i < below_tier && i < m_tiers.size(); ++i) {
    Tier& tier = *m_tiers[i];
    if (tier.config.read_only || tier.denied.load()) continue;
    std::string_view payload = p.payload;
    std::string list;
    if (chunked) {
      // The chunks first, then the list that names them: a reader never finds a list whose
      // chunks are not all up.
      auto made = put_chunks(tier, p.key, p.payload);
      if (!made.ok()) {
        if (made.status().code() == StatusCode::kPermissionDenied) deny(tier, made.status());
        KILN_LOG_AT(kWarn, "remote", tier.config.label + ": " + name + " not published: " + made.status().message());
        continue;
      }
      list = std::move(made).value();
      payload = list;
    }
    // Sealed per tier: the signature covers the tier's namespace.
    auto sealed = seal_object(p.type, p.key, payload, m_options.trust, tier.ns);
    if (!sealed.ok()) {
      if (m_options.report) m_options.report("sign", "cannot sign for the remote cache: " + sealed.status().message());
      return;
    }
    auto st = with_failover(tier, name, [&](RemoteEndpoint& e) -> Result<bool> {
      KILN_RETURN_IF_ERROR(e.put(name, sealed.value()));
      return true;
    });
    if (st.ok()) {
      tier.add(TierCounter::kPublished, 1);
      tier.add(TierCounter::kBytesOut, static_cast<int64_t>(sealed->size()));
    } else if (st.status().code() == StatusCode::kPermissionDenied) {
      deny(tier, st.status());
    }
  }
}

void RemoteTiers::deny(Tier& tier, const Status& why) {
  if (tier.denied.exchange(true)) return;
  KILN_LOG_AT(kWarn, "remote", tier.config.label + ": writes refused: " + why.message());
  if (m_options.report)
    m_options.report("read-only " + tier.config.label, "remote cache " + tier.config.label + " refused this node's write (" + why.message() +
                                                           "): these are a reader's credentials; publishing nothing to it for the rest "
                                                           "of this process (reads go on)");
}

void RemoteTiers::worker() {
  std::unique_lock lock(m_queue_mutex);
  for (;;) {
    m_queue_changed.wait(lock, [&] { return m_stop || !m_queue.empty(); });
    if (m_queue.empty()) return;  // stopping, and nothing left
    Job job = std::move(m_queue.front());
    m_queue.pop_front();
    m_busy = true;
    lock.unlock();
    for (auto& p : job.objects) put_everywhere(p, job.below_tier);
    if (job.after) job.after();
    lock.lock();
    m_busy = false;
    m_queue_changed.notify_all();
  }
}

void RemoteTiers::drain() {
  std::unique_lock lock(m_queue_mutex);
  m_queue_changed.wait(lock, [&] { return m_queue.empty() && !m_busy; });
}

std::vector<RemoteTiers::EndpointReport> RemoteTiers::ping_all() {
  std::vector<EndpointReport> out;
  for (auto& tier : m_tiers) {
    for (auto& e : tier->endpoints) {
      EndpointReport r;
      r.tier = tier->config.label;
      r.endpoint = e->remote->label();
      r.read_only = tier->config.read_only;
      auto start = std::chrono::steady_clock::now();
      r.status = e->remote->ping();
      r.rtt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<RemoteTiers::CounterValue> RemoteTiers::take_counters() {
  std::vector<CounterValue> out;
  for (auto& tier : m_tiers)
    for (size_t i = 0; i < tier->counters.size(); ++i)
      if (int64_t v = tier->counters[i].exchange(0)) out.push_back({tier->config.label, static_cast<TierCounter>(i), v});
  return out;
}

}  // namespace kiln::cache
