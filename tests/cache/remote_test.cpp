// Remote tiers against real servers on 127.0.0.1: Debian's redis-server and nginx with WebDAV,
// started here; faults come from a proxy between them and kiln. Nothing here is mocked.
#include "cache/remote.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "cache/hmac.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::FaultProxy;
using kiln::testing::NginxServer;
using kiln::testing::RedisServer;
using kiln::testing::TempDir;
using Clock = std::chrono::steady_clock;

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"
#define REQUIRE_NGINX() \
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx with WebDAV is not installed (scripts/setup installs it)"

std::string hex(const HmacTag& t) { return to_hex(t.data(), t.size()); }

Hash128 key_of(const std::string& s) { return xxh3_128(s); }

std::string bytes(size_t n, uint32_t seed) { return noise(n, seed); }

// The Redis server as the tiers reach it: keys under `prefix` (theirs by default).
std::unique_ptr<RemoteEndpoint> raw_redis(const std::string& url, const std::string& prefix = "kiln:") {
  EndpointOptions o;
  o.prefix = prefix;
  return make_endpoint(parse_endpoint_url(url).value(), o).value();
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

TEST(Hmac, MatchesRfc4231) {
  // RFC 4231 test case 2, and case 6 (a key longer than SHA-256's block).
  EXPECT_EQ(hex(hmac_sha256("Jefe", {"what do ya want ", "for nothing?"}).value()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(std::string(131, '\xaa'), {"Test Using Larger Than Block-Size Key - Hash Key First"}).value()),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(TierParsing, ReadsEndpointsAndAttributes) {
  auto tiers = parse_tiers("  redis://a:7000/2,redis://[::1]  http://h/kiln/|read-only|layout=subdirs|token-file=/t ");
  ASSERT_TRUE(tiers.ok()) << tiers.status().message();
  ASSERT_EQ(tiers->size(), 2u);
  auto& r = (*tiers)[0];
  ASSERT_EQ(r.endpoints.size(), 2u);
  EXPECT_EQ(r.endpoints[0].host, "a");
  EXPECT_EQ(r.endpoints[0].port, 7000);
  EXPECT_EQ(r.endpoints[0].db, 2);
  EXPECT_EQ(r.endpoints[1].host, "::1");
  EXPECT_EQ(r.endpoints[1].port, 6379);
  EXPECT_FALSE(r.read_only);
  auto& h = (*tiers)[1];
  EXPECT_TRUE(h.read_only);
  EXPECT_EQ(h.layout, "subdirs");
  EXPECT_EQ(h.token_file, "/t");
  EXPECT_EQ(h.endpoints[0].path, "/kiln/");
  EXPECT_EQ(h.endpoints[0].port, 80);
  // What str() writes, parse_tiers reads back the same.
  EXPECT_EQ(parse_tiers(h.str())->front().str(), h.str());
  EXPECT_TRUE(parse_tiers("")->empty());
  auto tls = parse_tiers("https://cache.example/kiln|token-file=/t");
  ASSERT_TRUE(tls.ok()) << tls.status().message();
  EXPECT_EQ(tls->front().endpoints[0].scheme, "https");
  EXPECT_EQ(tls->front().endpoints[0].port, 443);
}

TEST(TierParsing, RefusesWhatItCannotDoAndSaysWhy) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"rediss://a:6380", "local TLS tunnel"},
                        Case{"redis://:pw@a:6379", "credentials in a URL"}, Case{"http://u:p@h/", "credentials in a URL"},
                        Case{"redis://a,http://b/", "share a scheme"}, Case{"redis://a|readonly", "unknown attribute 'readonly'"},
                        Case{"redis://a:99999", "bad port"}, Case{"memcached://a", "unknown scheme"},
                        Case{"http://h/|password-file=/p", "password-file is for redis"}, Case{"redis://a/x", "database number"},
                        Case{"redis://a,,redis://b", "an empty endpoint"}, Case{"h:6379", "not a URL"},
                        Case{"http://h/?q=1", "query"}}) {
    auto t = parse_tiers(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.says), std::string::npos) << c.text << ": " << t.status().message();
  }
}

TrustConfig secret_trust(const std::string& secret) {
  TrustConfig t;
  t.secret = secret;
  return t;
}

TEST(Envelope, RefusesSwappedUnsignedForgedAndTruncatedObjects) {
  Hash128 key = key_of("a"), other = key_of("b");
  std::string payload = bytes(1000, 1);
  const TrustConfig none, k = secret_trust("k");
  const std::string ns = "redis:kiln:";
  auto plain = seal_object(RemoteObject::kArtifact, key, payload, none, ns);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(open_object(RemoteObject::kArtifact, key, *plain, none, ns).value(), payload);
  auto why = [](const auto& r) { return r.ok() ? std::string("accepted") : r.status().message(); };
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, other, *plain, none, ns)).find("another object"), std::string::npos);
  EXPECT_NE(why(open_object(RemoteObject::kManifest, key, *plain, none, ns)).find("another object"), std::string::npos);
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, plain->substr(0, 40), none, ns)).find("not a kiln object"), std::string::npos);
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, *plain, k, ns)).find("not signed"), std::string::npos);

  auto is_signed = seal_object(RemoteObject::kArtifact, key, payload, k, ns);
  ASSERT_TRUE(is_signed.ok());
  EXPECT_EQ(open_object(RemoteObject::kArtifact, key, *is_signed, k, ns).value(), payload);
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, *is_signed, secret_trust("other"), ns)).find("signature does not match"),
            std::string::npos);
  // The namespace is signed: the same object replayed under another tenant's prefix is refused.
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, *is_signed, k, "redis:tenant-b:")).find("signature does not match"),
            std::string::npos);
  std::string altered = *is_signed;
  altered[altered.size() - 500] ^= 1;
  EXPECT_NE(why(open_object(RemoteObject::kArtifact, key, altered, k, ns)).find("SHA-256"), std::string::npos);
  // A node without the secret can still read signed objects (their content hashes still check).
  EXPECT_EQ(open_object(RemoteObject::kArtifact, key, *is_signed, none, ns).value(), payload);
}

class RemoteServersTest : public ::testing::Test {
 protected:
  RemoteOptions options(const std::string& tiers) {
    RemoteOptions o;
    o.tiers = parse_tiers(tiers).value();
    o.connect_timeout = std::chrono::milliseconds(200);
    o.io_timeout = std::chrono::milliseconds(300);
    o.lease = std::chrono::milliseconds(600);
    o.breaker = std::chrono::milliseconds(60000);
    o.report = [this](const std::string&, const std::string& m) { m_reports.push_back(m); };
    return o;
  }
  std::unique_ptr<RemoteTiers> tiers(const std::string& text, const std::string& secret = "") {
    auto o = options(text);
    o.trust.secret = secret;
    return RemoteTiers::create(std::move(o)).value();
  }
  // Fetches `key`'s artifact, accepting whatever opens; its payload or "".
  static std::string fetch(RemoteTiers& t, const Hash128& key) {
    std::string got;
    t.fetch(RemoteObject::kArtifact, key, [&](std::string_view p) {
      got = p;
      return Status();
    });
    return got;
  }
  static int64_t counter(RemoteTiers& t, TierCounter c) {
    int64_t sum = 0;
    for (auto& v : t.take_counters())
      if (v.counter == c) sum += v.value;
    return sum;
  }
  TempDir m_dir;
  std::vector<std::string> m_reports;
};

TEST_F(RemoteServersTest, RedisStoresFetchesAndMisses) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto t = tiers(redis.url(), "cluster secret");
  Hash128 key = key_of("x");
  EXPECT_EQ(fetch(*t, key), "");
  std::string big = bytes(1 << 20, 7);  // binary, NULs and all
  t->publish({{RemoteObject::kArtifact, key, big}});
  t->drain();
  EXPECT_EQ(fetch(*t, key), big);
  auto counters = t->take_counters();
  std::map<TierCounter, int64_t> by;
  for (auto& c : counters) by[c.counter] += c.value;
  EXPECT_EQ(by[TierCounter::kHits], 1);
  EXPECT_EQ(by[TierCounter::kMisses], 1);
  EXPECT_EQ(by[TierCounter::kPublished], 1);
  EXPECT_GT(by[TierCounter::kBytesIn], 1 << 20);
  EXPECT_EQ(by[TierCounter::kErrors], 0);
  // The key in Redis is the prefix and the object's name.
  auto raw = raw_redis(redis.url(), "");
  EXPECT_TRUE(raw->get("kiln:" + object_name(RemoteObject::kArtifact, key)).value().has_value());
}

TEST_F(RemoteServersTest, RedisLeasesHaveOneHolderUntilReleasedOrExpired) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto a = tiers(redis.url()), b = tiers(redis.url());
  Hash128 input = key_of("inputs");
  auto first = a->take_lease(input);
  ASSERT_EQ(first.state, RemoteTiers::LeaseState::kTaken);
  EXPECT_EQ(b->take_lease(input).state, RemoteTiers::LeaseState::kHeldElsewhere);
  // Renewed every third of its 600 ms life: still held well past it.
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(b->take_lease(input).state, RemoteTiers::LeaseState::kHeldElsewhere);
  first.lease.reset();  // released
  auto second = b->take_lease(input);
  EXPECT_EQ(second.state, RemoteTiers::LeaseState::kTaken);

  // A holder that dies stops renewing: its lease expires and another takes it over.
  auto raw = raw_redis(redis.url());
  ASSERT_TRUE(raw->take_lease("lease:dead", "dead-node", std::chrono::milliseconds(300)).value());
  EXPECT_FALSE(raw->take_lease("lease:dead", "me", std::chrono::milliseconds(300)).value());
  EXPECT_FALSE(raw->renew_lease("lease:dead", "me", std::chrono::milliseconds(300)).value()) << "only its holder renews it";
  ASSERT_TRUE(raw->release_lease("lease:dead", "me").ok());
  EXPECT_FALSE(raw->take_lease("lease:dead", "me", std::chrono::milliseconds(300)).value()) << "only its holder releases it";
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  EXPECT_TRUE(raw->take_lease("lease:dead", "me", std::chrono::milliseconds(300)).value());
}

TEST_F(RemoteServersTest, ARestartedRedisIsReconnectedTo) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  auto raw = raw_redis(redis.url());
  ASSERT_TRUE(raw->put("n", "v").ok());
  redis.kill();
  auto down = raw->get("n");
  ASSERT_FALSE(down.ok());
  redis.start();  // the same port, empty
  auto up = raw->get("n");
  ASSERT_TRUE(up.ok()) << up.status().message();
  EXPECT_FALSE(up->has_value());
}

TEST_F(RemoteServersTest, RedisValuesOfEverySizeArriveWholeOnOneKeptConnection) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  FaultProxy counting(redis.port());  // passes everything, counting connections
  auto raw = raw_redis(counting.url("redis"));
  // Around the reader's first read (16 KiB: the reply's first line and what comes with it),
  // empty, and larger than any socket buffer; binary, with CR LF inside.
  for (size_t size : {size_t{0}, size_t{1}, size_t{16376}, size_t{16377}, size_t{16384}, size_t{65536}, size_t{1} << 20,
                      size_t{10} << 20}) {
    std::string value = bytes(size, static_cast<uint32_t>(size)) + (size ? "\r\n" : "");
    std::string name = "v" + std::to_string(size);
    ASSERT_TRUE(raw->put(name, value).ok()) << size;
    auto got = raw->get(name);
    ASSERT_TRUE(got.ok()) << size << ": " << got.status().message();
    ASSERT_TRUE(got->has_value()) << size;
    EXPECT_EQ(**got, value) << size;
    auto none = raw->get(name + "-absent");
    ASSERT_TRUE(none.ok()) << none.status().message();
    EXPECT_FALSE(none->has_value());
  }
  EXPECT_EQ(counting.connections(), 1) << "every reply read whole, so the connection stays in step";
}

TEST_F(RemoteServersTest, RedisRepliesCutStalledOrGarbledAreErrorsNotData) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  Hash128 key = key_of("r");
  std::string payload = bytes(1 << 20, 5);
  {
    auto direct = tiers(redis.url());
    direct->publish({{RemoteObject::kArtifact, key, payload}});
    direct->drain();
  }
  // The reply is "$<length>\r\n", the envelope (a 136-byte header and the payload), "\r\n":
  // offsets into what the proxy passes.
  const size_t value_size = payload.size() + 136, header = std::to_string(value_size).size() + 3;
  struct Case {
    FaultProxy::Fault fault;
    size_t amount;
    const char* what;
    const char* says;
  };
  for (const Case& c :
       {Case{FaultProxy::Fault::kTruncate, 300000, "cut in the middle of the value", "closed the connection after"},
        Case{FaultProxy::Fault::kTruncate, 3, "cut in the length", "closed the connection before answering GET"},
        Case{FaultProxy::Fault::kStall, 300000, "silent in the middle of the value", "timed out"},
        Case{FaultProxy::Fault::kFlip, 1, "a length that is not a number", "malformed length"},
        Case{FaultProxy::Fault::kFlip, header + value_size, "a value longer than its length", "does not end"},
        Case{FaultProxy::Fault::kDelay, 700, "slower than remote.timeout", "timed out"},
        Case{FaultProxy::Fault::kRefuse, 0, "closed at once", "the connection before answering GET"}}) {
    FaultProxy proxy(redis.port());
    proxy.set(c.fault, c.amount);
    m_reports.clear();
    auto t = tiers(proxy.url("redis"));
    auto start = Clock::now();
    EXPECT_EQ(fetch(*t, key), "") << c.what;
    EXPECT_LT(ms_since(start), 3000) << c.what << ": one timeout (300 ms) at most";
    EXPECT_EQ(counter(*t, TierCounter::kErrors), 1) << c.what;
    ASSERT_EQ(m_reports.size(), 1u) << c.what;
    EXPECT_NE(m_reports[0].find(c.says), std::string::npos) << c.what << ": " << m_reports[0];
    // The breaker skips it now: no second wait.
    start = Clock::now();
    EXPECT_EQ(fetch(*t, key), "") << c.what;
    EXPECT_LT(ms_since(start), 100) << c.what;
  }
  // The same server, straight: the object was never harmed.
  EXPECT_EQ(fetch(*tiers(redis.url()), key), payload);
}

TEST_F(RemoteServersTest, HttpStoresInEachLayout) {
  REQUIRE_NGINX();
  NginxServer nginx(m_dir.path());
  Hash128 key = key_of("y");
  std::string name = object_name(RemoteObject::kArtifact, key);
  struct Case {
    const char* layout;
    std::string file;
  };
  for (const Case& c : {Case{"flat", "/kiln/" + name}, Case{"subdirs", "/kiln/" + name.substr(0, 2) + "/" + name.substr(2)},
                        Case{"bazel", "/kiln/ac/" + name}}) {
    auto t = tiers(nginx.url("/kiln") + "|layout=" + c.layout);
    EXPECT_EQ(fetch(*t, key), "") << c.layout;
    std::string payload = bytes(300000, 3) + c.layout;
    t->publish({{RemoteObject::kArtifact, key, payload}});
    t->drain();
    struct stat st{};
    EXPECT_EQ(::stat((nginx.store() + c.file).c_str(), &st), 0) << c.layout << ": " << c.file;
    EXPECT_EQ(fetch(*t, key), payload) << c.layout;
    EXPECT_EQ(counter(*t, TierCounter::kErrors), 0) << c.layout;
  }
}

TEST_F(RemoteServersTest, HttpSendsTheTokenOrUserFromOwnerOnlyFiles) {
  REQUIRE_NGINX();
  TempDir bearer_dir, basic_dir;
  NginxServer bearer(bearer_dir.path(), {.bearer_token = "t0ken"});
  NginxServer basic(basic_dir.path(), {.basic_user = "kiln", .basic_password = "pw"});
  m_dir.write("token", "t0ken\n");
  m_dir.write("wrong", "nope\n");
  m_dir.write("user", "kiln:pw\n");
  for (auto* f : {"token", "wrong", "user"}) ::chmod((m_dir / f).c_str(), 0600);
  Hash128 key = key_of("z");
  auto good = tiers(bearer.url() + "|token-file=" + m_dir / "token");
  good->publish({{RemoteObject::kArtifact, key, "with a token"}});
  good->drain();
  EXPECT_EQ(fetch(*good, key), "with a token");
  auto bad = tiers(bearer.url() + "|token-file=" + m_dir / "wrong");
  EXPECT_EQ(fetch(*bad, key), "");
  ASSERT_FALSE(m_reports.empty());
  EXPECT_NE(m_reports.back().find("HTTP 401"), std::string::npos) << m_reports.back();
  EXPECT_NE(m_reports.back().find("token-file"), std::string::npos) << m_reports.back();
  auto user = tiers(basic.url() + "|basic-auth-file=" + m_dir / "user");
  user->publish({{RemoteObject::kArtifact, key, "with a user"}});
  user->drain();
  EXPECT_EQ(fetch(*user, key), "with a user");
  // A token file others can read is refused before anything is sent.
  ::chmod((m_dir / "token").c_str(), 0644);
  auto o = options(bearer.url() + "|token-file=" + m_dir / "token");
  EXPECT_FALSE(RemoteTiers::create(std::move(o)).ok());
}

// Credentials over plain http:// or redis:// to another machine are one warning each (nothing
// is sent: making the tiers connects nowhere); to this machine, or over https://, none.
TEST_F(RemoteServersTest, CredentialsInClearToAnotherMachineAreWarnedOf) {
  m_dir.write("token", "t0ken\n");
  m_dir.write("password", "pw\n");
  for (auto* f : {"token", "password"}) ::chmod((m_dir / f).c_str(), 0600);
  auto quiet = tiers("http://127.0.0.1:9/kiln|token-file=" + m_dir / "token" + " http://localhost:9/kiln|token-file=" +
                     m_dir / "token" + " redis://[::1]:9|password-file=" + m_dir / "password" + " http://10.0.0.1:9/kiln");
  EXPECT_TRUE(m_reports.empty()) << m_reports.front();
  auto loud = tiers("http://10.0.0.1:9/kiln|token-file=" + m_dir / "token" + " redis://cache.example:9|password-file=" +
                    m_dir / "password");
  ASSERT_EQ(m_reports.size(), 2u);
  EXPECT_NE(m_reports[0].find("token-file of tier http://10.0.0.1:9/kiln is sent in clear"), std::string::npos) << m_reports[0];
  EXPECT_NE(m_reports[0].find("use https://"), std::string::npos) << m_reports[0];
  EXPECT_NE(m_reports[1].find("password-file of tier redis://cache.example:9 is sent in clear"), std::string::npos)
      << m_reports[1];
}

TEST_F(RemoteServersTest, ASilentRemoteCostsOneShortTimeoutThenIsSkipped) {
  REQUIRE_REDIS();
  RedisServer redis(m_dir.path());
  FaultProxy proxy(redis.port());
  proxy.set(FaultProxy::Fault::kSilent);
  auto t = tiers(proxy.url("redis"));
  auto start = Clock::now();
  EXPECT_EQ(fetch(*t, key_of("k")), "");
  double first = ms_since(start);
  EXPECT_GE(first, 250);   // the 300 ms silence it waited out
  EXPECT_LT(first, 3000);  // and not much more
  start = Clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(fetch(*t, key_of("k" + std::to_string(i))), "");
  EXPECT_LT(ms_since(start), 100) << "the breaker skips it";
  auto c = t->take_counters();
  std::map<TierCounter, int64_t> by;
  for (auto& v : c) by[v.counter] += v.value;
  EXPECT_EQ(by[TierCounter::kErrors], 1);
  EXPECT_EQ(by[TierCounter::kSkipped], 20);
  EXPECT_EQ(m_reports.size(), 1u) << "said once";
}

TEST_F(RemoteServersTest, TruncatedRefusedAndSlowAnswersAreErrorsNotData) {
  REQUIRE_NGINX();
  NginxServer nginx(m_dir.path());
  FaultProxy proxy(nginx.port());
  Hash128 key = key_of("t");
  std::string payload = bytes(200000, 9);
  {
    auto direct = tiers(nginx.url());
    direct->publish({{RemoteObject::kArtifact, key, payload}});
    direct->drain();
  }
  for (auto [fault, amount] : {std::pair{FaultProxy::Fault::kTruncate, size_t{5000}}, std::pair{FaultProxy::Fault::kRefuse, size_t{0}},
                               std::pair{FaultProxy::Fault::kDelay, size_t{700}}}) {
    proxy.set(fault, amount);
    auto t = tiers(proxy.url("http", "/kiln"));
    auto start = Clock::now();
    EXPECT_EQ(fetch(*t, key), "") << static_cast<int>(fault);
    EXPECT_LT(ms_since(start), 3000);
    EXPECT_EQ(counter(*t, TierCounter::kErrors), 1) << static_cast<int>(fault);
  }
  // Flipped bytes arrive as data: the envelope opens (no secret), so what catches them is the
  // caller's check of the payload (the blob's hashes; tests/integration/remote_cli_test.cpp).
  // With a secret, the tag refuses them here.
  {
    auto signer = tiers(nginx.url(), "s");
    signer->publish({{RemoteObject::kArtifact, key, payload}});
    signer->drain();
  }
  proxy.set(FaultProxy::Fault::kFlip, 100000);
  auto t = tiers(proxy.url("http", "/kiln"), "s");
  EXPECT_EQ(fetch(*t, key), "");
  EXPECT_EQ(counter(*t, TierCounter::kRejected), 1);
}

TEST_F(RemoteServersTest, EndpointsOfATierShareTheKeysAndLosingOneLosesOnlyItsShare) {
  REQUIRE_REDIS();
  TempDir d1, d2;
  RedisServer r1(d1.path()), r2(d2.path());
  auto t = tiers(r1.url() + "," + r2.url());
  std::vector<RemoteTiers::Publication> objects;
  for (int i = 0; i < 60; ++i) objects.push_back({RemoteObject::kArtifact, key_of("o" + std::to_string(i)), "v" + std::to_string(i)});
  t->publish(objects);
  t->drain();
  auto e1 = raw_redis(r1.url());
  int on_first = 0;
  for (auto& o : objects) on_first += e1->get(object_name(o.type, o.key)).value().has_value();
  EXPECT_GT(on_first, 10);
  EXPECT_LT(on_first, 50);
  r1.kill();
  auto after = tiers(r1.url() + "," + r2.url());
  int found = 0;
  for (auto& o : objects) found += fetch(*after, o.key) == o.payload;
  EXPECT_EQ(found, 60 - on_first) << "the share of the live endpoint is all still there";
}

TEST_F(RemoteServersTest, AHitFromASlowerTierIsCopiedIntoTheFasterOnesThatCanBeWritten) {
  REQUIRE_REDIS();
  REQUIRE_NGINX();
  RedisServer redis(m_dir.path());
  TempDir web;
  NginxServer nginx(web.path());
  Hash128 key = key_of("copied");
  {
    auto http_only = tiers(nginx.url());
    http_only->publish({{RemoteObject::kArtifact, key, "from http"}});
    http_only->drain();
  }
  auto both = tiers(redis.url() + " " + nginx.url());
  EXPECT_EQ(fetch(*both, key), "from http");
  both->drain();
  EXPECT_EQ(fetch(*tiers(redis.url()), key), "from http");
  // A read-only tier is never written.
  Hash128 other = key_of("never");
  auto read_only = tiers(redis.url() + "|read-only");
  read_only->publish({{RemoteObject::kArtifact, other, "x"}});
  read_only->drain();
  EXPECT_EQ(fetch(*tiers(redis.url()), other), "");
}

}  // namespace
}  // namespace kiln::cache
