// s3:// tiers against a real S3 server started here: moto's server mode with IAM
// authentication on, which recomputes every request's SigV4 signature (botocore's signer) and
// refuses a wrong one, as S3 does. Faults as for HTTP tiers: a server down, slow, a bad
// signature, 503 SlowDown from a real rate limiter (nginx's limit_req in front), truncated bodies.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "cache/remote.h"
#include "cache/remote_s3_credentials.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::FaultProxy;
using kiln::testing::NginxServer;
using kiln::testing::S3Server;
using kiln::testing::TempDir;
using Clock = std::chrono::steady_clock;

#define REQUIRE_S3() \
  if (S3Server::binary().empty()) GTEST_SKIP() << "moto_server is not installed (scripts/setup installs moto[server] into kiln's venv)"

// Sets (or, with nullopt, unsets) environment variables for one scope.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      m_saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (auto& [name, value] : m_saved) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> m_saved;
};

const std::map<std::string, std::optional<std::string>> k_no_aws = {
    {"AWS_ACCESS_KEY_ID", std::nullopt}, {"AWS_SECRET_ACCESS_KEY", std::nullopt}, {"AWS_SESSION_TOKEN", std::nullopt},
    {"AWS_WEB_IDENTITY_TOKEN_FILE", std::nullopt}, {"AWS_ROLE_ARN", std::nullopt}, {"AWS_SHARED_CREDENTIALS_FILE", std::nullopt},
    {"AWS_PROFILE", std::nullopt}, {"AWS_ENDPOINT_URL_STS", std::nullopt}, {"AWS_ENDPOINT_URL", std::nullopt},
    {"AWS_REGION", std::nullopt}, {"AWS_DEFAULT_REGION", std::nullopt}};

std::map<std::string, std::optional<std::string>> keys_of(const S3Server& s, const std::string& secret = "") {
  auto env = k_no_aws;
  env["AWS_ACCESS_KEY_ID"] = s.access_key();
  env["AWS_SECRET_ACCESS_KEY"] = secret.empty() ? s.secret_key() : secret;
  return env;
}

TEST(S3TierParsing, ReadsBucketPrefixEndpointRegionAndStyle) {
  auto t = parse_tiers("s3://kiln-cache/team/a|endpoint=http://127.0.0.1:9000|region=eu-west-1|style=path|read-only");
  ASSERT_TRUE(t.ok()) << t.status().message();
  auto& tier = t->front();
  EXPECT_EQ(tier.endpoints[0].scheme, "s3");
  EXPECT_EQ(tier.endpoints[0].host, "kiln-cache");
  EXPECT_EQ(tier.endpoints[0].path, "/team/a/");
  EXPECT_EQ(tier.s3_endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(tier.s3_region, "eu-west-1");
  EXPECT_EQ(tier.s3_style, "path");
  EXPECT_TRUE(tier.read_only);
  EXPECT_EQ(parse_tiers(tier.str())->front().str(), tier.str());
  EXPECT_TRUE(parse_tiers("s3://bucket")->front().s3_endpoint.empty());
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"s3:///prefix", "no bucket"}, Case{"s3://Bucket_1/x", "not a bucket name"},
                        Case{"s3://key:secret@bucket/x", "names a bucket, not a server"},
                        Case{"s3://b|endpoint=ftp://h", "unknown scheme"}, Case{"s3://b|endpoint=http://h/b", "is a server"},
                        Case{"redis://a|region=x", "for s3:// tiers"}, Case{"s3://b|token-file=/t", "AWS credentials"},
                        Case{"s3://b|layout=bazel", "no layout"}, Case{"s3://b|style=dns", "unknown attribute 'style=dns'"}}) {
    auto r = parse_tiers(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.text << ": " << r.status().message();
  }
}

TEST(S3Credentials, ReadsAProfileOfTheSharedFile) {
  TempDir dir;
  std::ofstream(dir / "credentials") << "[default]\naws_access_key_id = AKIADEFAULT\naws_secret_access_key = s1\n\n"
                                     << "# a comment\n[ci]\naws_access_key_id=AKIACI\naws_secret_access_key=s2\naws_session_token = t\n";
  auto ci = read_shared_credentials(dir / "credentials", "ci");
  ASSERT_TRUE(ci.ok()) << ci.status().message();
  EXPECT_EQ(ci->access_key, "AKIACI");
  EXPECT_EQ(ci->session_token, "t");
  EXPECT_NE(read_shared_credentials(dir / "credentials", "nope").status().message().find("no profile [nope]"), std::string::npos);
  auto no_aws = k_no_aws;
  no_aws["HOME"] = dir.path();  // no ~/.aws here
  ScopedEnv env(no_aws);
  S3CredentialSource none("us-east-1", nullptr);
  auto missing = none.get();
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("AWS_ACCESS_KEY_ID"), std::string::npos) << missing.status().message();
  ::setenv("AWS_ACCESS_KEY_ID", "only-half", 1);
  EXPECT_NE(none.get().status().message().find("go together"), std::string::npos);
}

class S3Test : public ::testing::Test {
 protected:
  RemoteOptions options(const std::string& tier) {
    RemoteOptions o;
    o.tiers = parse_tiers(tier).value();
    o.connect_timeout = std::chrono::milliseconds(300);
    o.io_timeout = std::chrono::milliseconds(800);  // moto answers in Python: a few ms, more under load
    o.breaker = std::chrono::milliseconds(60000);
    o.chunk_threshold = 64 << 10;
    o.chunk_bytes = 16 << 10;
    o.report = [this](const std::string&, const std::string& m) { m_reports.push_back(m); };
    return o;
  }
  std::unique_ptr<RemoteTiers> tiers(const std::string& tier) { return RemoteTiers::create(options(tier)).value(); }
  // An S3 server (the test skips unless moto_server is installed) and its user's keys in the
  // environment, `secret` in place of the secret key when given.
  void start(const std::string& secret = "") {
    m_s3 = std::make_unique<S3Server>(m_dir.path(), "kiln-test");
    m_env = std::make_unique<ScopedEnv>(keys_of(*m_s3, secret));
  }
  std::string tier() const { return "s3://kiln-test/c|endpoint=" + m_s3->endpoint(); }
  std::string reports() const {
    std::string all;
    for (auto& r : m_reports) all += r + "\n";
    return all;
  }
  std::vector<std::string> m_reports;
  TempDir m_dir;
  std::unique_ptr<S3Server> m_s3;
  std::unique_ptr<ScopedEnv> m_env;
};

TEST_F(S3Test, SignedRequestsStoreAndFetchPathStyleAndVirtualHosts) {
  REQUIRE_S3();
  start();
  S3Server& s3 = *m_s3;
  Hash128 key = xxh3_128("kernel"), big = xxh3_128("pch");
  std::string large(300 << 10, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 7 + i / 4096);
  auto path_style = tiers("s3://kiln-test/cache|endpoint=" + s3.endpoint());
  path_style->publish({{RemoteObject::kArtifact, key, "a kernel"}, {RemoteObject::kArtifact, big, large}});
  path_style->drain();
  EXPECT_EQ(counters_of(*path_style)[TierCounter::kErrors], 0) << reports();
  EXPECT_EQ(fetch_whole(*path_style, key), "a kernel");
  // The same bucket named as a virtual host (kiln-test.localhost: libcurl resolves *.localhost
  // to this machine), the big one put together from its chunks.
  auto virtual_host = tiers("s3://kiln-test/cache|endpoint=http://localhost:" + std::to_string(s3.port()) + "|style=virtual");
  EXPECT_EQ(fetch_whole(*virtual_host, key), "a kernel") << reports();
  EXPECT_EQ(fetch_whole(*virtual_host, big), large);
  EXPECT_EQ(fetch_whole(*virtual_host, xxh3_128("absent")), "");
  EXPECT_EQ(virtual_host->ping_all().front().status.ok(), true);
}

TEST_F(S3Test, TheLastWriterWinsSoNobodySquatsAKey) {
  REQUIRE_S3();
  start();
  Hash128 key = xxh3_128("same key");
  auto a = tiers(tier()), b = tiers(tier());
  a->publish({{RemoteObject::kArtifact, key, "first"}});
  a->drain();
  b->publish({{RemoteObject::kArtifact, key, "second"}});  // replaces it, as a trusted publisher replaces a squatter's object
  b->drain();
  auto by = counters_of(*b);
  EXPECT_EQ(by[TierCounter::kErrors], 0) << reports();
  EXPECT_EQ(by[TierCounter::kPublished], 1);
  EXPECT_EQ(fetch_whole(*b, key), "second");
}

TEST_F(S3Test, ABadSignatureIsRefusedSaysWhyAndTheEndpointIsSkipped) {
  REQUIRE_S3();
  start("not-the-secret");
  auto t = tiers(tier());
  EXPECT_EQ(fetch_whole(*t, xxh3_128("k")), "");
  EXPECT_EQ(fetch_whole(*t, xxh3_128("k2")), "");
  auto by = counters_of(*t);
  EXPECT_EQ(by[TierCounter::kErrors], 1);
  EXPECT_EQ(by[TierCounter::kSkipped], 1) << "the breaker spares the second request";
  EXPECT_NE(reports().find("403 SignatureDoesNotMatch: the secret key does not match"), std::string::npos) << reports();
  EXPECT_NE(reports().find("credentials from the environment"), std::string::npos) << reports();
}

TEST_F(S3Test, CredentialsFromTheSharedFileAndFromAWebIdentityToken) {
  REQUIRE_S3();
  TempDir dir, role_dir;
  S3Server s3(dir.path(), "kiln-test");
  {
    std::ofstream(dir / "credentials") << "[default]\naws_access_key_id = AKIAWRONG\naws_secret_access_key = x\n[ci]\n"
                                       << "aws_access_key_id = " << s3.access_key() << "\naws_secret_access_key = " << s3.secret_key()
                                       << "\n";
    auto env = k_no_aws;
    env["AWS_SHARED_CREDENTIALS_FILE"] = dir / "credentials";
    env["AWS_PROFILE"] = "ci";
    ScopedEnv scoped(env);
    auto t = tiers("s3://kiln-test/c|endpoint=" + s3.endpoint());
    t->publish({{RemoteObject::kArtifact, xxh3_128("k"), "from a profile"}});
    t->drain();
    EXPECT_EQ(fetch_whole(*t, xxh3_128("k")), "from a profile") << reports();
  }
  // A role assumed with a web-identity token, as Kubernetes' IRSA sets it up: STS answers with
  // temporary credentials and a session token, and the server checks the role's policy.
  S3Server with_role(role_dir.path(), "kiln-role", S3Server::Mode::kRole);
  std::ofstream(role_dir / "token") << "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJraWxuIn0.c2lnbmF0dXJl\n";
  auto env = k_no_aws;
  env["AWS_WEB_IDENTITY_TOKEN_FILE"] = role_dir / "token";
  env["AWS_ROLE_ARN"] = with_role.role_arn();
  env["AWS_ENDPOINT_URL_STS"] = with_role.endpoint();
  ScopedEnv scoped(env);
  auto t = tiers("s3://kiln-role/c|endpoint=" + with_role.endpoint());
  t->publish({{RemoteObject::kArtifact, xxh3_128("r"), "as a role"}});
  t->drain();
  EXPECT_EQ(fetch_whole(*t, xxh3_128("r")), "as a role") << reports();
}

TEST_F(S3Test, DownSlowAndTruncatedServersAreFailuresNeverData) {
  REQUIRE_S3();
  start();
  Hash128 key = xxh3_128("k");
  std::string payload(20000, 'x');
  auto direct = tiers(tier());
  direct->publish({{RemoteObject::kArtifact, key, payload}});
  direct->drain();
  {  // down: nothing listens
    auto t = tiers("s3://kiln-test/c|endpoint=http://127.0.0.1:" + std::to_string(kiln::testing::free_port()));
    auto start = Clock::now();
    EXPECT_EQ(fetch_whole(*t, key), "");
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);
    EXPECT_NE(reports().find("cannot connect"), std::string::npos) << reports();
  }
  FaultProxy proxy(m_s3->port());
  for (auto [fault, amount, says] : {std::tuple{FaultProxy::Fault::kDelay, size_t{2000}, "timed out"},
                                     std::tuple{FaultProxy::Fault::kTruncate, size_t{5000}, ""}}) {
    proxy.set(fault, amount);
    m_reports.clear();
    auto t = tiers("s3://kiln-test/c|endpoint=" + proxy.url("http"));
    int accepted = 0;
    EXPECT_EQ(fetch_whole(*t, key, &accepted), "");
    EXPECT_EQ(accepted, 0) << "a cut body is never handed over";
    EXPECT_EQ(counters_of(*t)[TierCounter::kErrors], 1) << reports();
    EXPECT_NE(reports().find(says), std::string::npos) << reports();
  }
}

TEST_F(S3Test, SlowDownIsRetriedWithBackoff) {
  REQUIRE_S3();
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx is not installed (scripts/setup installs it)";
  start();
  TempDir nginx_dir;
  kiln::testing::NginxOptions limited;
  limited.proxy_to = m_s3->port();
  limited.pass_host = true;
  limited.limit_per_second = 4;  // beyond it: 503 SlowDown, as S3 answers a hot prefix
  NginxServer nginx(nginx_dir.path(), limited);
  Hash128 key = xxh3_128("hot");
  auto direct = tiers(tier());
  direct->publish({{RemoteObject::kArtifact, key, "hot kernel"}});
  direct->drain();
  auto t = tiers("s3://kiln-test/c|endpoint=http://127.0.0.1:" + std::to_string(nginx.port()));
  for (int i = 0; i < 8; ++i) {  // a burst: each fetch a fresh look (nothing is kept between them here)
    EXPECT_EQ(fetch_whole(*t, key), "hot kernel") << i << ": " << reports();
  }
  int slow_down = 0;
  for (auto& line : nginx.requests()) slow_down += line.find(" 503 ") != std::string::npos;
  EXPECT_GT(slow_down, 0) << "the limiter answered 503 SlowDown, and the fetches went on after backoff";
  EXPECT_EQ(counters_of(*t)[TierCounter::kErrors], 0) << reports();
}

}  // namespace
}  // namespace kiln::cache
