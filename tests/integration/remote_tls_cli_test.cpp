// The cluster tier over TLS as kiln's users meet it: separate kiln processes ("nodes") with
// their own cache folders, a real nginx serving https on 127.0.0.1 with certificates openssl
// makes for the test, a real HTTPS proxy (tinyproxy) named by HTTPS_PROXY. A server this node
// cannot trust costs one warning and the op still runs, compiled here.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <map>

#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::FaultProxy;
using testing::NginxServer;
using testing::json_field;
using testing::run_process;
using testing::TempDir;
using testing::TestCa;
using Clock = std::chrono::steady_clock;

#define REQUIRE_TLS_NGINX()                                                                                            \
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx with WebDAV is not installed (scripts/setup installs it)"; \
  if (testing::openssl_binary().empty()) GTEST_SKIP() << "openssl is not installed (scripts/setup installs it)"

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

class RemoteTlsCliTest : public ::testing::Test {
 protected:
  RemoteTlsCliTest() : m_ca(m_ca_dir.path()) { testing::write_variant_specs(m_specs.path(), 4); }
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
    m_dirs.push_back(std::make_unique<TempDir>());
    return std::make_unique<NginxServer>(m_dirs.back()->path(), o);
  }
  // `kiln build variantN --json` on a node of its own (a fresh cache folder), with `env`.
  testing::ProcessResult build(const std::string& remote, int variant, std::map<std::string, std::string> env = {},
                               const std::string& cache = "") {
    if (!env.count("KILN_REMOTE_CA_FILE")) env["KILN_REMOTE_CA_FILE"] = m_ca.ca_pem();
    std::string dir = cache;
    if (dir.empty()) {
      m_dirs.push_back(std::make_unique<TempDir>());
      dir = m_dirs.back()->path();
    }
    return run_process({testing::kiln_binary(), "--cache-dir", dir, "--remote", remote, "build",
                        m_specs / ("variant" + std::to_string(variant) + ".toml"), "--json"},
                       env);
  }
  TempDir m_ca_dir, m_specs;
  TestCa m_ca;
  std::vector<std::unique_ptr<TempDir>> m_dirs;
};

TEST_F(RemoteTlsCliTest, ANodePublishesOverHttpsAndASecondNodeHits) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server();
  auto first = build(nginx->url(), 0);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(json_field(first.out, "source"), "compiled") << first.out;
  EXPECT_EQ(first.err, "") << "a healthy https tier says nothing";
  auto second = build(nginx->url(), 0);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(json_field(second.out, "source"), "remote") << second.out << second.err;
  EXPECT_EQ(second.err, "");
  // The CA from the config file does the same as the variable.
  TempDir config;
  config.write("config.toml", "[remote]\nca_file = \"" + m_ca.ca_pem() + "\"\n");
  auto from_file = build(nginx->url(), 0, {{"KILN_CONFIG", config / "config.toml"}, {"KILN_REMOTE_CA_FILE", ""}});
  EXPECT_EQ(json_field(from_file.out, "source"), "remote") << from_file.out << from_file.err;
}

TEST_F(RemoteTlsCliTest, AServerThisNodeCannotTrustIsOneWarningAndTheOpCompilesHere) {
  REQUIRE_TLS_NGINX();
  TempDir other_dir;
  for (const auto& c : testing::bad_certificates(m_ca, other_dir.path())) {
    auto nginx = https_server([&](testing::NginxOptions& o) {
      o.tls_cert = c.cert.cert;
      o.tls_key = c.cert.key;
    });
    // warm: four ops, so four misses ask the tier; the breaker keeps it to one attempt.
    m_dirs.push_back(std::make_unique<TempDir>());
    auto r = run_process({testing::kiln_binary(), "--cache-dir", m_dirs.back()->path(), "--remote", nginx->url(),
                          "warm", "--spec-dir", m_specs.path(), "-j", "1", "--json"},
                         {{"KILN_REMOTE_CA_FILE", m_ca.ca_pem()}});
    ASSERT_EQ(r.exit_code, 0) << c.what << ": " << r.err;
    EXPECT_EQ(count(r.out, "\"source\":\"compiled\""), 4u) << c.what << ": " << r.out;
    EXPECT_EQ(count(r.err, "kiln: warning:"), 1u) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find("ops still compile here"), std::string::npos) << r.err;
    EXPECT_TRUE(nginx->requests().empty()) << c.what;
  }
}

TEST_F(RemoteTlsCliTest, AHangingHttpsServerCostsOneBoundedTimeoutPerProcess) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server();
  FaultProxy silent(nginx->port());
  silent.set(FaultProxy::Fault::kSilent);
  auto hanging =
      https_server([&](testing::NginxOptions& o) { o.proxy_to = silent.port(); });  // the handshake done, then nothing
  m_dirs.push_back(std::make_unique<TempDir>());
  std::string cache = m_dirs.back()->path();
  auto start = Clock::now();
  auto r = run_process({testing::kiln_binary(), "--cache-dir", cache, "--remote", hanging->url(), "warm", "--spec-dir",
                        m_specs.path(), "-j", "1", "--json"},
                       {{"KILN_REMOTE_CA_FILE", m_ca.ca_pem()}, {"KILN_REMOTE_TIMEOUT", "0.5"}});
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.out, "\"source\":\"compiled\""), 4u) << r.out;
  EXPECT_EQ(count(r.err, "skipping it for"), 1u) << r.err;
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  // One 0.5 s silence for four ops, not four; generous for a busy 2-core machine.
  EXPECT_LT(seconds, 6.0);
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", cache, "cache", "stats", "--json"});
  EXPECT_NE(stats.out.find("\"errors\":1"), std::string::npos) << stats.out;
}

TEST_F(RemoteTlsCliTest, HttpsProxyAndNoProxyFromTheEnvironmentAreHonoured) {
  REQUIRE_TLS_NGINX();
  if (testing::TinyProxy::binary().empty()) GTEST_SKIP() << "tinyproxy is not installed (scripts/setup installs it)";
  auto nginx = https_server();
  TempDir proxy_dir;
  testing::TinyProxy tinyproxy(proxy_dir.path());
  FaultProxy counting(tinyproxy.port());  // counts the connections made to the proxy
  std::string proxy = "http://127.0.0.1:" + std::to_string(counting.port());
  // NO_PROXY empty: the loopback address goes through the proxy like any other.
  auto through = build(nginx->url(), 1, {{"HTTPS_PROXY", proxy}, {"NO_PROXY", ""}, {"no_proxy", ""}});
  ASSERT_EQ(through.exit_code, 0) << through.err;
  EXPECT_EQ(through.err, "");
  EXPECT_GE(counting.connections(), 1) << "HTTPS_PROXY was not used";
  auto hit = build(nginx->url(), 1, {{"https_proxy", proxy}, {"NO_PROXY", ""}, {"no_proxy", ""}});
  EXPECT_EQ(json_field(hit.out, "source"), "remote") << hit.out << hit.err;
  // Named in NO_PROXY, the server is reached directly.
  int before = counting.connections();
  auto direct = build(nginx->url(), 1, {{"HTTPS_PROXY", proxy}, {"NO_PROXY", "127.0.0.1"}});
  EXPECT_EQ(json_field(direct.out, "source"), "remote") << direct.out << direct.err;
  EXPECT_EQ(counting.connections(), before) << "NO_PROXY was not honoured";
  // A proxy that is not there: one warning that names the proxy variables, and the op runs.
  auto dead = build(nginx->url(), 2,
                    {{"HTTPS_PROXY", "http://127.0.0.1:" + std::to_string(testing::free_port())}, {"NO_PROXY", ""}});
  EXPECT_EQ(dead.exit_code, 0) << dead.err;
  EXPECT_EQ(json_field(dead.out, "source"), "compiled") << dead.out;
  EXPECT_EQ(count(dead.err, "kiln: warning:"), 1u) << dead.err;
  EXPECT_NE(dead.err.find("HTTPS_PROXY"), std::string::npos) << dead.err;
}

TEST_F(RemoteTlsCliTest, ARejectedTokenIsOneWarningAndOneRequestPerProcess) {
  REQUIRE_TLS_NGINX();
  auto cert = m_ca.issue("server", "IP:127.0.0.1");
  auto nginx = https_server([&](testing::NginxOptions& o) {
    o.bearer_token = "right";
    o.tls_cert = cert.cert;
    o.tls_key = cert.key;
  });
  TempDir secrets;
  secrets.write("token", "wrong\n");
  ::chmod((secrets / "token").c_str(), 0600);
  m_dirs.push_back(std::make_unique<TempDir>());
  auto r = run_process(
      {testing::kiln_binary(), "--cache-dir", m_dirs.back()->path(), "--remote",
       nginx->url() + "|token-file=" + secrets / "token", "warm", "--spec-dir", m_specs.path(), "-j", "1", "--json"},
      {{"KILN_REMOTE_CA_FILE", m_ca.ca_pem()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count(r.out, "\"source\":\"compiled\""), 4u) << r.out;
  EXPECT_EQ(count(r.err, "kiln: warning:"), 1u) << r.err;
  EXPECT_NE(r.err.find("HTTP 401"), std::string::npos) << r.err;
  EXPECT_EQ(nginx->requests().size(), 1u) << "four misses and four publications, one request";
}

TEST_F(RemoteTlsCliTest, WithoutLibcurlAnHttpsTierIsOneWarningAndTheOpCompilesHere) {
  REQUIRE_TLS_NGINX();
  auto nginx = https_server();
  auto r = build(nginx->url(), 3, {{"KILN_CURL_LIBRARY", "/nonexistent/libcurl.so.4"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "source"), "compiled") << r.out;
  EXPECT_EQ(count(r.err, "kiln: warning:"), 1u) << r.err;
  EXPECT_NE(r.err.find("cannot load libcurl"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("apt-get install libcurl4"), std::string::npos) << r.err;
}

TEST_F(RemoteTlsCliTest, ATlsRedisIsReachedThroughALocalStunnelAndRedissSaysHow) {
  REQUIRE_TLS_NGINX();
  if (testing::RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  if (testing::StunnelClient::binary().empty()) GTEST_SKIP() << "stunnel is not installed (scripts/setup installs stunnel4)";
  auto cert = m_ca.issue("redis", "IP:127.0.0.1");
  TempDir redis_dir, tunnel_dir;
  testing::RedisServer redis(redis_dir.path(), {cert.cert, cert.key});
  std::string rediss = "rediss://127.0.0.1:" + std::to_string(redis.port());
  // rediss:// itself: a tier this kiln cannot speak, refused before anything runs (as any tier
  // list that does not parse), with the reason and the way round it.
  auto refused = build(rediss, 0);
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("hiredis (0.14) has none"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("local TLS tunnel"), std::string::npos) << refused.err;
  // Plain redis:// to the TLS port is no substitute: one warning, and the op runs.
  auto plain = build("redis://127.0.0.1:" + std::to_string(redis.port()), 0);
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(count(plain.err, "kiln: warning:"), 1u) << plain.err;
  // Through the tunnel (docs/CACHE.md: "The shared cluster cache"): one node publishes, another hits.
  testing::StunnelClient tunnel(tunnel_dir.path(), redis.port(), m_ca.ca_pem());
  std::string through = "redis://127.0.0.1:" + std::to_string(tunnel.port());
  auto first = build(through, 1);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.err, "");
  EXPECT_EQ(json_field(first.out, "source"), "compiled") << first.out;
  auto second = build(through, 1);
  EXPECT_EQ(json_field(second.out, "source"), "remote") << second.out << second.err;
}

}  // namespace
}  // namespace kiln
