// HTTPS tiers against a real nginx on 127.0.0.1 serving TLS (offering HTTP/2) with certificates
// that openssl makes for each test: a CA this node is told to trust, another it is not, an
// expired certificate, one issued for another name, client certificates. Faults come from the
// TCP proxy of tests/servers.h between kiln and nginx. Nothing here is mocked.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "cache/remote.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::FaultProxy;
using kiln::testing::NginxServer;
using kiln::testing::TempDir;
using kiln::testing::TestCa;
using Clock = std::chrono::steady_clock;

#define REQUIRE_TLS_NGINX()                                                                                            \
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx with WebDAV is not installed (scripts/setup installs it)"; \
  if (kiln::testing::openssl_binary().empty()) GTEST_SKIP() << "openssl is not installed (scripts/setup installs it)"

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string bytes(size_t n, uint32_t seed) { return noise(n, seed); }

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= line.size();) {
    size_t end = line.find(' ', start);
    out.push_back(line.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

class RemoteTlsTest : public ::testing::Test {
 protected:
  RemoteTlsTest() : m_ca(m_ca_dir.path()) {}

  // nginx serving TLS with a certificate `m_ca` issued for 127.0.0.1, unless `adjust` sets
  // another (a lambda rather than designated initializers, which draw GCC 12's
  // -Wmissing-field-initializers).
  std::unique_ptr<NginxServer> https_server(const std::function<void(testing::NginxOptions&)>& adjust = {}) {
    testing::NginxOptions o;
    if (adjust) adjust(o);
    if (o.tls_cert.empty()) {
      auto cert = m_ca.issue("server", "IP:127.0.0.1,DNS:localhost");
      o.tls_cert = cert.cert;
      o.tls_key = cert.key;
    }
    m_server_dirs.push_back(std::make_unique<TempDir>());
    return std::make_unique<NginxServer>(m_server_dirs.back()->path(), o);
  }
  RemoteOptions options(const std::string& tiers) {
    RemoteOptions o;
    o.tiers = parse_tiers(tiers).value();
    o.ca_file = m_ca.ca_pem();
    o.connect_timeout = std::chrono::milliseconds(200);
    o.io_timeout = std::chrono::milliseconds(300);
    o.breaker = std::chrono::milliseconds(60000);
    o.report = [this](const std::string&, const std::string& m) { m_reports.push_back(m); };
    return o;
  }
  std::unique_ptr<RemoteTiers> tiers(RemoteOptions o) { return RemoteTiers::create(std::move(o)).value(); }
  static std::string fetch(RemoteTiers& t, const Hash128& key) {
    std::string got;
    t.fetch(RemoteObject::kArtifact, key, [&](std::string_view p) {
      got = p;
      return Status();
    });
    return got;
  }
  static std::map<TierCounter, int64_t> counters(RemoteTiers& t) {
    std::map<TierCounter, int64_t> by;
    for (auto& v : t.take_counters()) by[v.counter] += v.value;
    return by;
  }
  TempDir m_ca_dir, m_dir;
  TestCa m_ca;
  std::vector<std::unique_ptr<TempDir>> m_server_dirs;
  std::vector<std::string> m_reports;
};

TEST_F(RemoteTlsTest, HttpsPublishesAndFetchesOnKeptConnections) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server();
  FaultProxy counting(nginx->port());  // passes TLS through, counting connections
  auto t = tiers(options(counting.url("https", "/kiln")));
  Hash128 key = xxh3_128("over tls");
  std::string payload = bytes(1 << 20, 5);
  EXPECT_EQ(fetch(*t, key), "");
  t->publish({{RemoteObject::kArtifact, key, payload}});
  t->drain();
  for (int i = 0; i < 20; ++i) ASSERT_EQ(fetch(*t, key), payload) << i;
  auto c = counters(*t);
  EXPECT_EQ(c[TierCounter::kHits], 20);
  EXPECT_EQ(c[TierCounter::kErrors], 0);
  EXPECT_TRUE(m_reports.empty()) << m_reports.front();
  // 22 requests: the fetching thread's connection and the publishing thread's, no more.
  EXPECT_LE(counting.connections(), 2);
  auto served = nginx->requests();
  ASSERT_EQ(served.size(), 22u);
  std::set<std::string> connections;
  for (auto& line : served) {
    auto f = fields(line);  // method, uri, status, connection, protocol
    ASSERT_EQ(f.size(), 5u) << line;
    EXPECT_EQ(f[4], "HTTP/1.1") << line;  // chosen over HTTP/2 (cache/remote_http.cpp's tuning)
    connections.insert(f[3]);
  }
  EXPECT_LE(connections.size(), 2u);
  // The object is where a plain-HTTP node of the same layout would find it.
  struct stat st {};
  EXPECT_EQ(::stat((nginx->store() + "/kiln/" + object_name(RemoteObject::kArtifact, key)).c_str(), &st), 0);
}

TEST_F(RemoteTlsTest, AnUntrustedAnExpiredOrAMisnamedCertificateIsRefusedWithTheReason) {
  REQUIRE_TLS_NGINX();
  TempDir other_dir;
  for (const auto& c : testing::bad_certificates(m_ca, other_dir.path())) {
    m_reports.clear();
    auto nginx = https_server([&](testing::NginxOptions& o) {
      o.tls_cert = c.cert.cert;
      o.tls_key = c.cert.key;
    });
    auto t = tiers(options(nginx->url()));
    EXPECT_EQ(fetch(*t, xxh3_128("k")), "") << c.what;
    t->publish({{RemoteObject::kArtifact, xxh3_128("k"), "never sent"}});
    t->drain();
    auto by = counters(*t);
    EXPECT_EQ(by[TierCounter::kErrors], 1) << c.what;
    EXPECT_EQ(by[TierCounter::kSkipped], 1) << c.what << ": the publication is skipped by the breaker";
    ASSERT_EQ(m_reports.size(), 1u) << c.what;
    EXPECT_NE(m_reports[0].find(c.says), std::string::npos) << c.what << ": " << m_reports[0];
    EXPECT_TRUE(nginx->requests().empty()) << c.what << ": a request crossed an unverified connection";
  }
  // Without remote.ca_file the system's CAs are trusted, and they did not sign the test CA.
  auto nginx = https_server();
  auto o = options(nginx->url());
  o.ca_file.clear();
  m_reports.clear();
  EXPECT_EQ(fetch(*tiers(std::move(o)), xxh3_128("k")), "");
  ASSERT_EQ(m_reports.size(), 1u);
  EXPECT_NE(m_reports[0].find("remote.ca_file"), std::string::npos) << m_reports[0];
}

TEST_F(RemoteTlsTest, AClientCertificateIsShownWhenTheServerAsksForOne) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server([&](testing::NginxOptions& o) { o.client_ca = m_ca.ca_pem(); });
  auto client = m_ca.issue("node-1", "DNS:node-1", 2, /*client=*/true);
  Hash128 key = xxh3_128("mutual");
  auto without = tiers(options(nginx->url()));
  EXPECT_EQ(fetch(*without, key), "");
  ASSERT_EQ(m_reports.size(), 1u);
  EXPECT_NE(m_reports[0].find("remote.cert_file"), std::string::npos) << m_reports[0];

  auto o = options(nginx->url());
  o.cert_file = client.cert;
  o.key_file = client.key;
  auto with = tiers(o);
  with->publish({{RemoteObject::kArtifact, key, "shown"}});
  with->drain();
  EXPECT_EQ(fetch(*with, key), "shown");
  EXPECT_EQ(counters(*with)[TierCounter::kErrors], 0);

  // The key is a secret: a file others can read is refused before anything is sent.
  ::chmod(client.key.c_str(), 0644);
  auto loose = RemoteTiers::create(o);
  ASSERT_FALSE(loose.ok());
  EXPECT_NE(loose.status().message().find("chmod 600 " + client.key), std::string::npos) << loose.status().message();
}

TEST_F(RemoteTlsTest, BadTlsSettingsNameTheFileAndWhatIsWrong) {
  REQUIRE_TLS_NGINX();
  auto client = m_ca.issue("node", "DNS:node", 2, true);
  m_dir.write("not-pem", "hello\n");
  struct Case {
    std::string ca, cert, key;
    std::string says;
  };
  for (const Case& c :
       {Case{m_dir / "missing.pem", "", "", "remote.ca_file: cannot read " + m_dir / "missing.pem"},
        Case{m_dir / "not-pem", "", "", "remote.ca_file: " + m_dir / "not-pem" + " is not a PEM bundle"},
        Case{m_ca.ca_pem(), client.cert, "", "holds no private key: name the key's file in remote.key_file"},
        Case{m_ca.ca_pem(), client.cert, client.cert, "is not a PEM private key"},
        Case{m_ca.ca_pem(), "", client.key, "without remote.cert_file"}}) {
    auto o = options("https://127.0.0.1:1/kiln");
    o.ca_file = c.ca;
    o.cert_file = c.cert;
    o.key_file = c.key;
    if (!c.key.empty()) ::chmod(c.key.c_str(), 0600);
    auto t = RemoteTiers::create(o);
    ASSERT_FALSE(t.ok()) << c.says;
    EXPECT_NE(t.status().message().find(c.says), std::string::npos) << t.status().message();
  }
  // A redis-only cluster never reads them.
  auto o = options("redis://127.0.0.1:1");
  o.ca_file = m_dir / "missing.pem";
  EXPECT_TRUE(RemoteTiers::create(o).ok());
}

TEST_F(RemoteTlsTest, ARejectedTokenIsOneRequestAndOneWarningNotARetryStorm) {
  REQUIRE_TLS_NGINX();
  auto cert = m_ca.issue("server", "IP:127.0.0.1");
  auto nginx = https_server([&](testing::NginxOptions& o) {
    o.bearer_token = "right";
    o.tls_cert = cert.cert;
    o.tls_key = cert.key;
  });
  m_dir.write("token", "wrong\n");
  ::chmod((m_dir / "token").c_str(), 0600);
  auto t = tiers(options(nginx->url() + "|token-file=" + m_dir / "token"));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(fetch(*t, xxh3_128("k" + std::to_string(i))), "");
  for (int i = 0; i < 5; ++i) t->publish({{RemoteObject::kArtifact, xxh3_128("p" + std::to_string(i)), "x"}});
  t->drain();
  auto served = nginx->requests();
  ASSERT_EQ(served.size(), 1u) << "the breaker must stop a refused node from asking again";
  EXPECT_NE(served[0].find(" 401 "), std::string::npos) << served[0];
  ASSERT_EQ(m_reports.size(), 1u);
  EXPECT_NE(m_reports[0].find("HTTP 401"), std::string::npos) << m_reports[0];
  EXPECT_NE(m_reports[0].find("token-file"), std::string::npos) << m_reports[0];
  auto by = counters(*t);
  EXPECT_EQ(by[TierCounter::kErrors], 1);
  EXPECT_EQ(by[TierCounter::kSkipped], 24);
}

TEST_F(RemoteTlsTest, RedirectsAreFollowedButNeverFromHttpsDownToHttp) {
  REQUIRE_TLS_NGINX();
  auto target = https_server();
  auto moved = https_server([&](testing::NginxOptions& o) { o.redirect_to = "https://127.0.0.1:" + std::to_string(target->port()); });
  Hash128 key = xxh3_128("moved");
  auto t = tiers(options(moved->url()));
  t->publish({{RemoteObject::kArtifact, key, "followed"}});  // a 308 keeps the PUT and its body
  t->drain();
  EXPECT_EQ(fetch(*t, key), "followed");
  EXPECT_EQ(counters(*t)[TierCounter::kErrors], 0);
  struct stat st{};
  EXPECT_EQ(::stat((target->store() + "/kiln/" + object_name(RemoteObject::kArtifact, key)).c_str(), &st), 0);

  TempDir plain_dir;
  NginxServer plain(plain_dir.path());
  auto down = https_server([&](testing::NginxOptions& o) { o.redirect_to = "http://127.0.0.1:" + std::to_string(plain.port()); });
  m_reports.clear();
  auto refused = tiers(options(down->url()));
  EXPECT_EQ(fetch(*refused, key), "");
  ASSERT_EQ(m_reports.size(), 1u);
  EXPECT_NE(m_reports[0].find("never follows a redirect out of TLS"), std::string::npos) << m_reports[0];
  EXPECT_TRUE(plain.requests().empty()) << "a request left TLS";
}

TEST_F(RemoteTlsTest, AHangingTlsServerCostsOneBoundedTimeoutThenTheBreaker) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server();
  // Hanging in the handshake: a TCP peer that never answers. Hanging after it: nginx finishes
  // the handshake, then waits on an upstream that never answers.
  FaultProxy in_handshake(nginx->port()), upstream(nginx->port());
  in_handshake.set(FaultProxy::Fault::kSilent);
  upstream.set(FaultProxy::Fault::kSilent);
  auto after_handshake = https_server([&](testing::NginxOptions& o) { o.proxy_to = upstream.port(); });
  struct Case {
    const char* what;
    std::string url;
  };
  for (const Case& c : {Case{"in the handshake", in_handshake.url("https", "/kiln")},
                        Case{"after the handshake", after_handshake->url()}}) {
    m_reports.clear();
    auto t = tiers(options(c.url));
    auto start = Clock::now();
    EXPECT_EQ(fetch(*t, xxh3_128("k")), "") << c.what;
    double first = ms_since(start);
    EXPECT_GE(first, 150) << c.what << ": the 200 ms allowed for the connection and its handshake";
    EXPECT_LT(first, 3000) << c.what;
    start = Clock::now();
    for (int i = 0; i < 20; ++i) EXPECT_EQ(fetch(*t, xxh3_128("k" + std::to_string(i))), "");
    EXPECT_LT(ms_since(start), 100) << c.what << ": the breaker skips it";
    auto by = counters(*t);
    EXPECT_EQ(by[TierCounter::kErrors], 1) << c.what;
    EXPECT_EQ(by[TierCounter::kSkipped], 20) << c.what;
    ASSERT_EQ(m_reports.size(), 1u) << c.what;
    EXPECT_NE(m_reports[0].find("timed out"), std::string::npos) << c.what << ": " << m_reports[0];
  }
}

}  // namespace
}  // namespace kiln::cache
