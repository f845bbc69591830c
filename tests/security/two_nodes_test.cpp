// Issue 44's acceptance, as a new operator would try it: `kiln key generate NAME --out FILE`,
// KILN_SIGNING_KEY_FILE and KILN_TRUSTED_KEYS on real kiln processes (separate caches, "nodes")
// sharing one real redis-server on 127.0.0.1.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::testing {
namespace {

struct Node {
  std::string cache;
  std::map<std::string, std::string> env;
};

class TwoNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
    m_redis = std::make_unique<RedisServer>(m_dir.path());
  }
  // `kiln key generate NAME --out FILE`: the public key it printed.
  std::string generate(const std::string& name) {
    auto r = run_process({kiln_binary(), "key", "generate", name, "--out", m_dir / (name + ".key")});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    while (!r.out.empty() && r.out.back() == '\n') r.out.pop_back();
    return r.out;
  }
  Node node(const std::string& name, const std::map<std::string, std::string>& trust) {
    Node n{m_dir / name, trust};
    n.env["KILN_CACHE_DIR"] = n.cache;
    n.env["KILN_REMOTE_CACHE"] = m_redis->url();
    n.env["KILN_ACCELERATOR"] = "cpu";
    return n;
  }
  ProcessResult build(const Node& n) {
    return run_process({kiln_binary(), "build", bundled_spec_dir() + "/vector_add.toml", "--json"}, n.env);
  }
  int64_t redis_keys() {
    auto r = run_process({"redis-cli", "-u", m_redis->url(), "DBSIZE"});
    return std::stoll(r.out);
  }
  TempDir m_dir;
  std::unique_ptr<RedisServer> m_redis;
};

TEST_F(TwoNodes, KeyGenerateWritesAnOwnerOnlyKeyAndPrintsNameColonBase64) {
  std::string pub = generate("ci-1");
  ASSERT_EQ(pub.rfind("ci-1:", 0), 0u) << pub;
  EXPECT_EQ(pub.size(), 5u + 44u);  // 32 bytes in base64
  struct stat st{};
  ASSERT_EQ(::stat((m_dir / "ci-1.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Never over an existing key.
  auto again = run_process({kiln_binary(), "key", "generate", "ci-1", "--out", m_dir / "ci-1.key"});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  auto pub_again = run_process({kiln_binary(), "key", "public", m_dir / "ci-1.key"});
  EXPECT_EQ(pub_again.out, pub + "\n");
}

TEST_F(TwoNodes, ANodeTrustingAOnlyCompilesWhatBPublishedAndANodeTrustingBLoadsIt) {
  std::string a = generate("team-a"), b = generate("team-b");
  Node publisher_b = node("b", {{"KILN_SIGNING_KEY_FILE", m_dir / "team-b.key"}});
  auto built = build(publisher_b);
  ASSERT_EQ(built.exit_code, 0) << built.err;
  EXPECT_NE(built.out.find("\"source\":\"compiled\""), std::string::npos) << built.out;
  EXPECT_GE(redis_keys(), 2) << "B published its artifact and manifest";

  Node trusts_a = node("trusts-a", {{"KILN_TRUSTED_KEYS", a}});
  auto refused = build(trusts_a);
  ASSERT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.out.find("\"source\":\"compiled\""), std::string::npos) << refused.out;
  EXPECT_NE(refused.err.find("team-b"), std::string::npos) << "it says why: " << refused.err;
  EXPECT_NE(refused.err.find("does not trust"), std::string::npos) << refused.err;

  Node trusts_b = node("trusts-b", {{"KILN_TRUSTED_KEYS", a + "," + b}});
  auto loaded = build(trusts_b);
  ASSERT_EQ(loaded.exit_code, 0) << loaded.err;
  EXPECT_NE(loaded.out.find("\"source\":\"remote\""), std::string::npos) << loaded.out << loaded.err;
}

TEST_F(TwoNodes, AReaderPublishesNothing) {
  std::string a = generate("team-a");
  Node reader = node("reader", {{"KILN_TRUSTED_KEYS", a}});
  auto r = build(reader);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"source\":\"compiled\""), std::string::npos);
  EXPECT_EQ(redis_keys(), 0) << "a reader wrote to the tier";
}

TEST_F(TwoNodes, AnUnsignedTierIsSaidOncePerProcess) {
  Node plain = node("plain", {{"KILN_REMOTE_UNSIGNED_OK", "0"}});
  auto r = build(plain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t first = r.err.find("unsigned");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("unsigned", first + 1), std::string::npos) << "said more than once: " << r.err;
  auto doctor = run_process({kiln_binary(), "doctor"}, plain.env);
  EXPECT_NE(doctor.out.find("trust: unsigned"), std::string::npos) << doctor.out;
  // A node whose operator says the tiers are private: doctor still says it, the build does not.
  plain.env["KILN_REMOTE_UNSIGNED_OK"] = "1";
  auto quiet = build(plain);
  EXPECT_EQ(quiet.err.find("unsigned"), std::string::npos) << quiet.err;
}

}  // namespace
}  // namespace kiln::testing
