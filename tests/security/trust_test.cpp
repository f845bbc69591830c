// Publisher keys against an attacker (docs/SECURITY.md): one with write access to the tier and
// a reader's whole configuration, one with a key pair of its own. Envelopes are made and opened
// for real (libcrypto's Ed25519 and SHA-256), and the tiers are a real redis-server on 127.0.0.1.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "cache/remote.h"
#include "cache/remote_chunks.h"
#include "cache/settings.h"
#include "cache/trust.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"

namespace kiln::cache {
namespace {

using kiln::testing::RedisServer;
using kiln::testing::TempDir;

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"

SigningKey key_named(const std::string& name) { return generate_signing_key(name).value(); }

TrustConfig publisher(const SigningKey& k, std::vector<PublicKey> also = {}) {
  TrustConfig t;
  t.signing_key = k;
  t.trusted = std::move(also);
  t.trusted.push_back(k.public_key);
  return t;
}

TrustConfig reader(std::vector<PublicKey> trusted) {
  TrustConfig t;
  t.trusted = std::move(trusted);
  return t;
}

std::string why(const Result<std::string_view>& r) { return r.ok() ? "accepted" : r.status().message(); }

TEST(Keys, AGeneratedKeyRoundTripsThroughItsFileFormAndPublicForm) {
  SigningKey k = key_named("ci-1");
  std::string text = format_signing_key(k);
  EXPECT_EQ(text.rfind("ci-1:", 0), 0u);
  auto back = parse_signing_key(text);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->seed, k.seed);
  EXPECT_EQ(back->public_key.bytes, k.public_key.bytes);
  auto pubs = parse_public_keys(k.public_key.str() + ", " + key_named("ci-2").public_key.str(), "KILN_TRUSTED_KEYS");
  ASSERT_TRUE(pubs.ok());
  ASSERT_EQ(pubs->size(), 2u);
  EXPECT_EQ((*pubs)[0].bytes, k.public_key.bytes);
  EXPECT_EQ((*pubs)[1].name, "ci-2");
  // Two keys never come out alike.
  EXPECT_NE(key_named("ci-1").seed, k.seed);
}

TEST(Keys, MalformedKeysAreRefusedSayingWhy) {
  for (auto [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"no-colon", "NAME:BASE64"}, {"ci-1:AAAA", "32 bytes"}, {"bad/name:AAAA", "letters, digits"}, {":AAAA", "1 to 64"}}) {
    auto r = parse_public_keys(text, "KILN_TRUSTED_KEYS");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
  }
  // A private key whose public half was altered is damaged, not another key.
  std::string text = format_signing_key(key_named("ci-1"));
  text[text.size() - 6] = text[text.size() - 6] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(parse_signing_key(text).ok());
}

TEST(Keys, SignaturesVerifyOnlyUnderTheirKeyAndMessage) {
  SigningKey a = key_named("a"), b = key_named("b");
  auto sig = ed25519_sign(a, "message").value();
  EXPECT_TRUE(ed25519_verify(a.public_key, "message", sig).value());
  EXPECT_FALSE(ed25519_verify(a.public_key, "messagE", sig).value());
  EXPECT_FALSE(ed25519_verify(b.public_key, "message", sig).value());
}

class Envelopes : public ::testing::Test {
 protected:
  Hash128 key = xxh3_128("artifact");
  std::string payload = noise(4000, 1);
  std::string ns = "redis:kiln:";
  SigningKey a = key_named("ci-1"), b = key_named("attacker");
};

TEST_F(Envelopes, ATrustedKeysObjectLoadsAndNamesItsSigner) {
  auto sealed = seal_object(RemoteObject::kArtifact, key, payload, publisher(a), ns).value();
  std::string signer;
  auto opened = open_object(RemoteObject::kArtifact, key, sealed, reader({a.public_key}), ns, &signer);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(*opened, payload);
  EXPECT_EQ(signer, "ci-1");
}

TEST_F(Envelopes, AnUntrustedKeysObjectIsRefused) {
  auto sealed = seal_object(RemoteObject::kArtifact, key, payload, publisher(b), ns).value();
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, sealed, reader({a.public_key}), ns)).find("does not trust"), std::string::npos);
  // The attacker names its key after a trusted one: the signature then fails under the real key.
  SigningKey forged = b;
  forged.name = "ci-1";
  forged.public_key.name = "ci-1";
  auto named = seal_object(RemoteObject::kArtifact, key, payload, publisher(forged), ns).value();
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, named, reader({a.public_key}), ns)).find("does not match"), std::string::npos);
}

TEST_F(Envelopes, UnsignedAndSecretSignedObjectsAreRefusedUnderKeys) {
  TrustConfig hmac;
  hmac.secret = "the cluster secret every reader holds";
  auto by_secret = seal_object(RemoteObject::kArtifact, key, payload, hmac, ns).value();
  auto by_none = seal_object(RemoteObject::kArtifact, key, payload, TrustConfig{}, ns).value();
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, by_secret, reader({a.public_key}), ns)).find("cluster secret"), std::string::npos);
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, by_none, reader({a.public_key}), ns)).find("not signed"), std::string::npos);
}

TEST_F(Envelopes, ARevokedKeyIsRefusedWhileAnotherTrustedKeyStillLoads) {
  SigningKey c = key_named("ci-2");
  TrustConfig t = reader({a.public_key, c.public_key});
  t.revoked_names.push_back("ci-1");
  auto old_one = seal_object(RemoteObject::kArtifact, key, payload, publisher(a), ns).value();
  auto new_one = seal_object(RemoteObject::kArtifact, key, payload, publisher(c), ns).value();
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, old_one, t, ns)).find("revoked"), std::string::npos);
  EXPECT_TRUE(open_object(RemoteObject::kArtifact, key, new_one, t, ns).ok());
  // Revoked by its public key, under whatever name it is listed.
  TrustConfig by_key = reader({a.public_key});
  by_key.revoked_keys.push_back(a.public_key);
  EXPECT_FALSE(open_object(RemoteObject::kArtifact, key, old_one, by_key, ns).ok());
}

TEST_F(Envelopes, AnObjectReplayedUnderAnotherNamespaceKeyOrTypeIsRefused) {
  auto sealed = seal_object(RemoteObject::kArtifact, key, payload, publisher(a), "redis:tenant-b:").value();
  TrustConfig t = reader({a.public_key});
  EXPECT_TRUE(open_object(RemoteObject::kArtifact, key, sealed, t, "redis:tenant-b:").ok());
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, sealed, t, "redis:tenant-a:")).find("does not match"), std::string::npos);
  // The key and type sit in the envelope's header too; rewritten there, the signature fails.
  std::string moved = sealed;
  Hash128 other = xxh3_128("another artifact");
  std::memcpy(moved.data() + 16, other.bytes.data(), 16);
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, other, moved, t, "redis:tenant-b:")).find("does not match"), std::string::npos);
  std::string retyped = sealed;
  retyped[8] = static_cast<char>(RemoteObject::kManifest);
  EXPECT_NE(why(open_object(RemoteObject::kManifest, key, retyped, t, "redis:tenant-b:")).find("does not match"), std::string::npos);
}

TEST_F(Envelopes, AlteredBytesOrSignatureAreRefused) {
  auto sealed = seal_object(RemoteObject::kArtifact, key, payload, publisher(a), ns).value();
  TrustConfig t = reader({a.public_key});
  std::string body = sealed;
  body[body.size() - 1] ^= 1;
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, body, t, ns)).find("SHA-256"), std::string::npos);
  std::string sig = sealed;
  sig[80] ^= 1;
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, sig, t, ns)).find("does not match"), std::string::npos);
  std::string hash = sealed;
  hash[45] ^= 1;  // the signed hash itself
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, hash, t, ns)).find("does not match"), std::string::npos);
  // Every truncation is refused, none crashes.
  for (size_t n = 0; n < 200; n += 7) EXPECT_FALSE(open_object(RemoteObject::kArtifact, key, sealed.substr(0, n), t, ns).ok());
}

TEST_F(Envelopes, AReaderCannotSeal) {
  auto r = seal_object(RemoteObject::kArtifact, key, payload, reader({a.public_key}), ns);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
}

TEST(TrustSettings, KeysComeFromTheEnvironmentAndAPublisherTrustsItsOwnKey) {
  TempDir dir;
  SigningKey a = generate_signing_key("ci-1").value();
  dir.write("ci-1.key", format_signing_key(a));
  ASSERT_EQ(::chmod((dir / "ci-1.key").c_str(), 0600), 0);
  SigningKey c = generate_signing_key("ci-2").value();
  ::setenv("KILN_SIGNING_KEY_FILE", (dir / "ci-1.key").c_str(), 1);
  ::setenv("KILN_TRUSTED_KEYS", c.public_key.str().c_str(), 1);
  ::setenv("KILN_REVOKED_KEYS", "ci-0", 1);
  auto t = trust_from_settings(Settings::load().value());
  ::unsetenv("KILN_SIGNING_KEY_FILE");
  ::unsetenv("KILN_TRUSTED_KEYS");
  ::unsetenv("KILN_REVOKED_KEYS");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->keys());
  EXPECT_TRUE(t->can_publish());
  ASSERT_EQ(t->trusted.size(), 2u);
  EXPECT_NE(t->trusted_key("ci-1"), nullptr);
  EXPECT_NE(t->trusted_key("ci-2"), nullptr);
  EXPECT_EQ(t->revoked_names, std::vector<std::string>{"ci-0"});
  EXPECT_EQ(t->weakness(), "");
  // A key file others can read is refused, as ssh refuses one.
  ASSERT_EQ(::chmod((dir / "ci-1.key").c_str(), 0644), 0);
  ::setenv("KILN_SIGNING_KEY_FILE", (dir / "ci-1.key").c_str(), 1);
  auto loose = trust_from_settings(Settings::load().value());
  ::unsetenv("KILN_SIGNING_KEY_FILE");
  EXPECT_FALSE(loose.ok());
}

// Two nodes and an attacker over one real redis-server.
class TrustedTiers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
    m_redis = std::make_unique<RedisServer>(m_dir.path());
  }
  RemoteOptions options(TrustConfig trust, std::vector<std::string>* said = nullptr, const std::string& attrs = "") {
    RemoteOptions o;
    o.tiers = parse_tiers(m_redis->url() + attrs).value();
    o.connect_timeout = std::chrono::milliseconds(300);
    o.io_timeout = std::chrono::milliseconds(1000);
    o.chunk_threshold = 64 << 10;
    o.chunk_bytes = 8 << 10;
    o.trust = std::move(trust);
    if (said) o.report = [said](const std::string& kind, const std::string& m) { said->push_back(kind + ": " + m); };
    return o;
  }
  std::unique_ptr<RemoteTiers> tiers(RemoteOptions o) { return RemoteTiers::create(std::move(o)).value(); }
  void publish(RemoteTiers& t, const Hash128& key, const std::string& payload) {
    t.publish({{RemoteObject::kArtifact, key, payload}});
    t.drain();
  }
  TempDir m_dir;
  std::unique_ptr<RedisServer> m_redis;
  SigningKey a = key_named("ci-1"), b = key_named("attacker"), c = key_named("ci-2");
};

TEST_F(TrustedTiers, ANodeTrustingAOnlyNeverLoadsWhatBPublishedAndSaysWhyOnce) {
  Hash128 key = xxh3_128("vector_add for cpu");
  auto attacker = tiers(options(publisher(b)));
  publish(*attacker, key, "the attacker's shared object");
  std::vector<std::string> said;
  auto node = tiers(options(reader({a.public_key}), &said));
  EXPECT_EQ(fetch_whole(*node, key), "");
  EXPECT_EQ(fetch_whole(*node, key), "");  // asked again: not fetched again, not said again
  EXPECT_EQ(counters_of(*node)[TierCounter::kRejected], 1);
  int refusals = 0;
  for (auto& s : said) refusals += s.find("does not trust") != std::string::npos;
  EXPECT_EQ(refusals, 1);
  // A node that trusts B loads it.
  EXPECT_EQ(fetch_whole(*tiers(options(reader({b.public_key}))), key), "the attacker's shared object");
}

TEST_F(TrustedTiers, AReaderPublishesNothingWhateverTheServerAllows) {
  auto node = tiers(options(reader({a.public_key})));
  for (int i = 0; i < 5; ++i) node->publish({{RemoteObject::kArtifact, xxh3_128("r" + std::to_string(i)), "bytes"}});
  node->drain();
  EXPECT_EQ(counters_of(*node)[TierCounter::kPublished], 0);
  auto keys = kiln::testing::run_process({"redis-cli", "-u", m_redis->url(), "DBSIZE"});
  EXPECT_EQ(keys.out, "0\n");
}

TEST_F(TrustedTiers, RotationKeepsHitsWhileTheOldKeyIsRevoked) {
  Hash128 old_key = xxh3_128("signed by ci-1"), new_key = xxh3_128("signed by ci-2");
  publish(*tiers(options(publisher(a))), old_key, "old");
  publish(*tiers(options(publisher(c))), new_key, "new");
  TrustConfig fleet = reader({a.public_key, c.public_key});
  auto before = tiers(options(fleet));
  EXPECT_EQ(fetch_whole(*before, old_key), "old");
  EXPECT_EQ(fetch_whole(*before, new_key), "new");
  fleet.revoked_names.push_back("ci-1");
  auto after = tiers(options(fleet));
  EXPECT_EQ(fetch_whole(*after, old_key), "");
  EXPECT_EQ(fetch_whole(*after, new_key), "new");
}

TEST_F(TrustedTiers, AnObjectThatFailsItsChecksDoesNotBlockItsKey) {
  Hash128 key = xxh3_128("squatted");
  publish(*tiers(options(publisher(b))), key, "the squatter's bytes");
  auto node = tiers(options(reader({a.public_key})));
  EXPECT_EQ(fetch_whole(*node, key), "");
  // The trusted publisher compiles and publishes: its write replaces the squatter's.
  publish(*tiers(options(publisher(a))), key, "the publisher's bytes");
  EXPECT_EQ(fetch_whole(*tiers(options(reader({a.public_key}))), key), "the publisher's bytes");
}

TEST_F(TrustedTiers, TenantsPrefixesDoNotShareObjects) {
  Hash128 key = xxh3_128("shared op");
  publish(*tiers(options(publisher(b), nullptr, "|prefix=tenant-b:")), key, "tenant b's build");
  // An attacker copies tenant B's object, byte for byte, under tenant A's prefix.
  auto copied = kiln::testing::run_process(
      {"redis-cli", "-u", m_redis->url(), "COPY", "tenant-b:" + object_name(RemoteObject::kArtifact, key),
       "tenant-a:" + object_name(RemoteObject::kArtifact, key)});
  ASSERT_EQ(copied.out, "1\n") << copied.err;
  // Tenant A trusts B's key for something else, still: the namespace in the signature refuses it.
  auto tenant_a = tiers(options(reader({a.public_key, b.public_key}), nullptr, "|prefix=tenant-a:"));
  EXPECT_EQ(fetch_whole(*tenant_a, key), "");
  EXPECT_EQ(counters_of(*tenant_a)[TierCounter::kRejected], 1);
}

TEST_F(TrustedTiers, TenantsDatabasesDoNotShareObjects) {
  Hash128 key = xxh3_128("shared op");
  publish(*tiers(options(publisher(b), nullptr, "/2")), key, "tenant b's build");
  // Same prefix (the default), another database: copied across, the namespace refuses it.
  auto copied = kiln::testing::run_process({"redis-cli", "-u", m_redis->url() + "/2", "COPY",
                                            "kiln:" + object_name(RemoteObject::kArtifact, key),
                                            "kiln:" + object_name(RemoteObject::kArtifact, key), "DB", "1"});
  ASSERT_EQ(copied.out, "1\n") << copied.err;
  auto tenant_a = tiers(options(reader({a.public_key, b.public_key}), nullptr, "/1"));
  EXPECT_EQ(fetch_whole(*tenant_a, key), "");
  EXPECT_EQ(counters_of(*tenant_a)[TierCounter::kRejected], 1);
  // In its own database, under its own key, tenant B's object loads.
  EXPECT_EQ(fetch_whole(*tiers(options(reader({b.public_key}), nullptr, "/2")), key), "tenant b's build");
}

TEST_F(TrustedTiers, ALargeArtifactInChunksIsRefusedWhenSignedByAnUntrustedKey) {
  Hash128 key = xxh3_128("a large pch");
  std::string payload = noise(200 << 10, 5);
  publish(*tiers(options(publisher(a))), key, payload);
  EXPECT_EQ(fetch_whole(*tiers(options(reader({a.public_key}))), key), payload);
  Hash128 evil = xxh3_128("a large evil pch");
  publish(*tiers(options(publisher(b))), evil, payload);
  EXPECT_EQ(fetch_whole(*tiers(options(reader({a.public_key}))), evil), "");
}

// In a child with its address space capped: what an allocation of GiBs would need fails there.
int run_capped(size_t cap_bytes, const std::function<bool()>& body) {
  pid_t pid = ::fork();
  if (pid == 0) {
    struct rlimit r{cap_bytes, cap_bytes};
    ::setrlimit(RLIMIT_AS, &r);
    ::_exit(body() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

size_t mapped_now() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE));
}

TEST_F(TrustedTiers, AChunkListThatSaysGiBsCostsNoMemoryBeforeItsChunksArrive) {
  // 128 MiB over what the test process maps already (its threads' stacks and libraries).
  size_t cap = mapped_now() + (size_t{128} << 20);
  Hash128 key = xxh3_128("a 92-byte bomb");
  auto le = [](uint64_t v, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += static_cast<char>(v >> (8 * i));
    return out;
  };
  Sha256 h = sha256({"x"}).value();
  std::string hash(reinterpret_cast<const char*>(h.data()), 32);
  // 2 GiB - 1 in 32 chunks of 64 MiB, none of which exists on the tier.
  std::string entries;
  for (int i = 0; i < 32; ++i) entries += hash + le(i < 31 ? 64u << 20 : (64u << 20) - 1, 4);
  std::string list = "KILNCHK2" + le((uint64_t{2} << 30) - 1, 8) + le(32, 4) + le(0, 4) + hash + entries;
  ASSERT_TRUE(parse_chunk_list(list, size_t{2} << 30).ok());
  // Signed by a trusted key: what stops it is the bound, not the signature.
  publish(*tiers(options(publisher(a))), key, list);
  int rc = run_capped(cap, [&] {
    auto node = RemoteTiers::create(options(publisher(a))).value();
    return fetch_whole(*node, key).empty();
  });
  EXPECT_EQ(rc, 0) << "the fetch ran out of memory, or loaded something";
}

}  // namespace
}  // namespace kiln::cache
