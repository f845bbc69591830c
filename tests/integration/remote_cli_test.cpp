// A cluster as kiln meets it: "nodes" are separate kiln processes, each with its own cache
// folder, sharing a real redis-server and a real nginx (WebDAV) on 127.0.0.1. One compile per
// key across the nodes; a remote killed mid-run, silent, lying or signed with another secret
// costs at most a short timeout and never loads anything unverified; a hit never calls out.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <map>
#include <regex>
#include <thread>

#include "cache/remote.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::FaultProxy;
using testing::NginxServer;
using testing::RedisServer;
using testing::json_field;
using testing::run_process;
using testing::TempDir;
using Clock = std::chrono::steady_clock;

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"
#define REQUIRE_NGINX() \
  if (NginxServer::binary().empty()) GTEST_SKIP() << "nginx with WebDAV is not installed (scripts/setup installs it)"

// Ops that differ only in a define: distinct keys that compile fast.
struct Node {
  std::string cache;
  std::map<std::string, std::string> env;
  std::vector<std::string> kiln(const std::string& remote, std::initializer_list<std::string> args) const {
    std::vector<std::string> argv{testing::kiln_binary(), "--cache-dir", cache, "--remote", remote};
    argv.insert(argv.end(), args);
    return argv;
  }
};

// {"op":"variant0",...,"source":"compiled",...} rows of `kiln warm --json`: op -> source.
std::map<std::string, std::string> sources(const std::string& json) {
  std::map<std::string, std::string> out;
  std::regex row("\"op\":\"([^\"]+)\",\"target\":\"[^\"]*\",\"cache\":\"[^\"]*\",\"source\":\"([a-z]+)\"");
  for (std::sregex_iterator it(json.begin(), json.end(), row), end; it != end; ++it) out[(*it)[1]] = (*it)[2];
  return out;
}

// The counters of the remote tier in `kiln cache stats --json`.
int64_t tier_counter(const Node& node, const std::string& name) {
  auto stats = run_process({testing::kiln_binary(), "--cache-dir", node.cache, "cache", "stats", "--json"});
  std::smatch m;
  if (!std::regex_search(stats.out, m, std::regex("\"remote_tiers\":\\[\\{[^\\]]*\"" + name + "\":([0-9]+)"))) return 0;
  return std::stoll(m[1]);
}

// The Redis server as the tiers reach it: keys under `prefix` (theirs by default).
std::unique_ptr<cache::RemoteEndpoint> raw_redis(const std::string& url, const std::string& prefix = "kiln:") {
  cache::EndpointOptions o;
  o.prefix = prefix;
  return cache::make_endpoint(cache::parse_endpoint_url(url).value(), o).value();
}

std::string secret_file(const TempDir& dir, const std::string& name, const std::string& secret) {
  dir.write(name, secret + "\n");
  ::chmod((dir / name).c_str(), 0600);
  return dir / name;
}

class RemoteCliTest : public ::testing::Test {
 protected:
  std::vector<Node> nodes(int n, std::map<std::string, std::string> env = {}) {
    std::vector<Node> out;
    for (int i = 0; i < n; ++i) {
      m_caches.push_back(std::make_unique<TempDir>());
      out.push_back({m_caches.back()->path(), env});
    }
    return out;
  }
  TempDir m_specs, m_server_dir;
  std::vector<std::unique_ptr<TempDir>> m_caches;
};

TEST_F(RemoteCliTest, SixNodesStartingTogetherCompileEachKeyOnce) {
  REQUIRE_REDIS();
  REQUIRE_NGINX();
  RedisServer redis(m_server_dir.path());
  TempDir web;
  NginxServer nginx(web.path());
  testing::write_variant_specs(m_specs.path(), 6);
  std::string remote = redis.url() + " " + nginx.url();
  auto cluster = nodes(6);
  std::vector<std::vector<std::string>> commands;
  for (auto& n : cluster) commands.push_back(n.kiln(remote, {"warm", "--spec-dir", m_specs.path(), "--json", "-j", "1"}));
  auto results = testing::run_processes(commands, {});
  std::map<std::string, int> compiles, remote_hits;
  for (auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto s = sources(r.out);
    ASSERT_EQ(s.size(), 6u) << r.out;
    for (auto& [op, source] : s) {
      compiles[op] += source == "compiled";
      remote_hits[op] += source == "remote";
    }
  }
  for (int i = 0; i < 6; ++i) {
    std::string op = "variant" + std::to_string(i);
    EXPECT_EQ(compiles[op], 1) << op << " was compiled on " << compiles[op] << " nodes";
    EXPECT_EQ(remote_hits[op], 5) << op;
  }
  // Both tiers hold what was published; every node's cache checks out and its ops run.
  // Which nodes compiled is up to the race, so sum over all of them: six keys, six publications
  // to each of the two tiers.
  int64_t published = 0;
  for (auto& n : cluster) published += tier_counter(n, "published");
  EXPECT_GE(published, 6);
  for (auto& n : cluster) {
    auto verify = run_process({testing::kiln_binary(), "--cache-dir", n.cache, "cache", "verify"});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  }
  auto check = run_process(cluster[5].kiln("", {"warm", "--check", "--spec-dir", m_specs.path()}));
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  auto http_only = nodes(1)[0];
  auto from_http = run_process(http_only.kiln(nginx.url(), {"warm", "--spec-dir", m_specs.path(), "--json"}));
  for (auto& [op, source] : sources(from_http.out)) EXPECT_EQ(source, "remote") << op << " from the HTTP tier alone";
}

TEST_F(RemoteCliTest, ARedisKilledMidRunCostsNoOpAndIsUsedAgainOnceBack) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  testing::write_variant_specs(m_specs.path(), 8);
  auto cluster = nodes(4, {{"KILN_REMOTE_TIMEOUT", "0.5"}});
  std::vector<std::vector<std::string>> commands;
  std::vector<std::map<std::string, std::string>> envs;
  for (auto& n : cluster) {
    commands.push_back(n.kiln(redis.url(), {"warm", "--spec-dir", m_specs.path(), "--json", "-j", "1"}));
    envs.push_back(n.env);
  }
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    redis.kill();
  });
  auto results = testing::run_processes(commands, envs);
  killer.join();
  for (auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(sources(r.out).size(), 8u) << r.out;
  }
  redis.start();  // empty: it kept nothing on disk
  auto later = nodes(2);
  auto first = run_process(later[0].kiln(redis.url(), {"build", (m_specs / "variant3.toml"), "--json"}));
  EXPECT_EQ(json_field(first.out, "source"), "compiled") << first.out << first.err;
  auto second = run_process(later[1].kiln(redis.url(), {"build", (m_specs / "variant3.toml"), "--json"}));
  EXPECT_EQ(json_field(second.out, "source"), "remote") << second.out << second.err;
}

TEST_F(RemoteCliTest, ArtifactsSignedWithAnotherSecretOrNotSignedAreRefusedAndCounted) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  testing::write_variant_specs(m_specs.path(), 2);
  TempDir secrets;
  auto a = nodes(1, {{"KILN_REMOTE_SECRET_FILE", secret_file(secrets, "one", "first secret")}})[0];
  auto b = nodes(1, {{"KILN_REMOTE_SECRET_FILE", secret_file(secrets, "two", "second secret")}})[0];
  auto plain = nodes(1)[0];
  std::string spec0 = m_specs / "variant0.toml", spec1 = m_specs / "variant1.toml";
  ASSERT_EQ(run_process(a.kiln(redis.url(), {"build", spec0}), a.env).exit_code, 0);
  auto refused = run_process(b.kiln(redis.url(), {"build", spec0, "--json"}), b.env);
  EXPECT_EQ(json_field(refused.out, "source"), "compiled") << refused.out;
  EXPECT_NE(refused.err.find("signature does not match"), std::string::npos) << refused.err;
  EXPECT_GE(tier_counter(b, "rejected"), 1);
  // A node without the secret can read signed artifacts (their hashes still check)...
  auto reader = run_process(plain.kiln(redis.url(), {"build", spec0, "--json"}));
  EXPECT_EQ(json_field(reader.out, "source"), "remote") << reader.out << reader.err;
  // ...but what it publishes is unsigned, and a node that requires signatures refuses it.
  ASSERT_EQ(run_process(plain.kiln(redis.url(), {"build", spec1})).exit_code, 0);
  auto strict = run_process(a.kiln(redis.url(), {"build", spec1, "--json"}), a.env);
  EXPECT_EQ(json_field(strict.out, "source"), "compiled") << strict.out;
  EXPECT_NE(strict.err.find("not signed"), std::string::npos) << strict.err;
}

TEST_F(RemoteCliTest, SwappedAndCorruptedArtifactsAreRefusedAndTheOpsStillRun) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  testing::write_variant_specs(m_specs.path(), 2);
  auto publisher = nodes(1)[0];
  ASSERT_EQ(run_process(publisher.kiln(redis.url(), {"warm", "--spec-dir", m_specs.path()})).exit_code, 0);
  // The artifact keys, from the publisher's own cache.
  auto ls = run_process({testing::kiln_binary(), "--cache-dir", publisher.cache, "cache", "ls", "--json"});
  std::map<std::string, Hash128> keys;
  std::regex row("\"key\":\"([0-9a-f]{32})\",\"op\":\"(variant[01])\"");
  for (std::sregex_iterator it(ls.out.begin(), ls.out.end(), row), end; it != end; ++it)
    keys[(*it)[2]] = *Hash128::from_hex((*it)[1].str());
  ASSERT_EQ(keys.size(), 2u) << ls.out;
  auto raw = raw_redis(redis.url());
  auto name = [&](const std::string& op) { return cache::object_name(cache::RemoteObject::kArtifact, keys[op]); };
  std::string good0 = raw->get(name("variant0")).value().value(), good1 = raw->get(name("variant1")).value().value();
  // variant1's artifact filed under variant0's key: a whole, valid object, for the wrong key.
  ASSERT_TRUE(raw->put(name("variant0"), good1).ok());
  // variant1's artifact with one byte of its blob flipped.
  std::string flipped = good1;
  flipped[flipped.size() - 100] ^= 0x20;
  ASSERT_TRUE(raw->put(name("variant1"), flipped).ok());

  auto node = nodes(1)[0];
  for (const char* op : {"variant0", "variant1"}) {
    auto run = run_process(node.kiln(redis.url(), {"run", op, "--spec-dir", m_specs.path(), "--json"}));
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_EQ(json_field(run.out, "source"), "compiled") << op << ": " << run.out;
    EXPECT_EQ(json_field(run.out, "check"), "ok") << run.out;
    EXPECT_NE(run.err.find("refused an object"), std::string::npos) << run.err;
  }
  EXPECT_EQ(tier_counter(node, "rejected"), 2);
  auto verify = run_process({testing::kiln_binary(), "--cache-dir", node.cache, "cache", "verify"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
}

TEST_F(RemoteCliTest, ASilentOrAbsentRemoteCostsOneShortTimeoutPerProcess) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  FaultProxy silent(redis.port());
  silent.set(FaultProxy::Fault::kSilent);
  testing::write_variant_specs(m_specs.path(), 4);
  auto alone = nodes(1)[0];
  auto start = Clock::now();
  ASSERT_EQ(run_process(alone.kiln("", {"warm", "--spec-dir", m_specs.path(), "-j", "1"})).exit_code, 0);
  double without = std::chrono::duration<double>(Clock::now() - start).count();

  auto node = nodes(1, {{"KILN_REMOTE_TIMEOUT", "0.5"}})[0];
  start = Clock::now();
  auto r = run_process(node.kiln(silent.url("redis"), {"warm", "--spec-dir", m_specs.path(), "-j", "1", "--json"}), node.env);
  double with = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (auto& [op, source] : sources(r.out)) EXPECT_EQ(source, "compiled") << op;
  // One 0.5 s silence for four ops, not four; generous bounds for a busy 2-core machine.
  EXPECT_LT(with - without, 2.5) << "with " << with << " s, without " << without << " s";
  size_t warnings = 0;
  for (size_t p = 0; (p = r.err.find("skipping it for", p)) != std::string::npos; ++p) ++warnings;
  EXPECT_EQ(warnings, 1u) << r.err;
  EXPECT_EQ(tier_counter(node, "errors"), 1);

  // Nothing listening at all: refused at once.
  auto refused_node = nodes(1)[0];
  start = Clock::now();
  auto refused = run_process(refused_node.kiln("redis://127.0.0.1:" + std::to_string(testing::free_port()),
                                               {"build", m_specs / "variant0.toml"}));
  EXPECT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_NE(refused.err.find("cannot connect"), std::string::npos) << refused.err;
}

TEST_F(RemoteCliTest, AProcessWhoseOpsAreAllLocalNeverContactsTheRemote) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  FaultProxy counting(redis.port());
  testing::write_variant_specs(m_specs.path(), 1);
  auto node = nodes(1)[0];
  std::string spec = m_specs / "variant0.toml";
  ASSERT_EQ(run_process(node.kiln(counting.url("redis"), {"build", spec})).exit_code, 0);
  int after_compile = counting.connections();
  EXPECT_GE(after_compile, 1);
  for (int i = 0; i < 3; ++i) {
    auto hit = run_process(node.kiln(counting.url("redis"), {"build", spec, "--json"}));
    EXPECT_EQ(json_field(hit.out, "source"), "disk");
  }
  EXPECT_EQ(counting.connections(), after_compile) << "a local hit opened a connection";
}

TEST_F(RemoteCliTest, DoctorShowsEachTierAndConfigShowsWhereSettingsCameFrom) {
  REQUIRE_REDIS();
  RedisServer redis(m_server_dir.path());
  TempDir secrets;
  std::string dead = "redis://127.0.0.1:" + std::to_string(testing::free_port());
  auto node = nodes(1)[0];
  auto doctor = run_process({testing::kiln_binary(), "--cache-dir", node.cache, "--remote", redis.url() + " " + dead, "doctor", "--json"});
  ASSERT_EQ(doctor.exit_code, 0) << doctor.err;
  EXPECT_NE(doctor.out.find("\"endpoint\":\"" + redis.url() + "\",\"read_only\":false,\"answers\":true"), std::string::npos) << doctor.out;
  EXPECT_NE(doctor.out.find("\"endpoint\":\"" + dead + "\",\"read_only\":false,\"answers\":false"), std::string::npos) << doctor.out;
  auto text = run_process({testing::kiln_binary(), "--remote", redis.url(), "doctor"});
  EXPECT_NE(text.out.find(redis.url() + ": answers in"), std::string::npos) << text.out;

  TempDir config;
  config.write("config.toml", "max_size = \"3G\"\n[remote]\ntiers = \"" + redis.url() + "|read-only\"\n");
  std::string secret = secret_file(secrets, "s", "do-not-print-me");
  std::map<std::string, std::string> env{{"KILN_CONFIG", config / "config.toml"}, {"KILN_REMOTE_SECRET_FILE", secret}};
  auto shown = run_process({testing::kiln_binary(), "config"}, env);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find(config / "config.toml:1:12"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("KILN_REMOTE_SECRET_FILE"), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("(set; owner-only)"), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find("do-not-print-me"), std::string::npos) << "a secret was printed";
  auto flag = run_process({testing::kiln_binary(), "--remote", "", "config", "--json"}, env);
  EXPECT_NE(flag.out.find("{\"name\":\"remote.tiers\",\"value\":\"\",\"origin\":\"--remote\""), std::string::npos) << flag.out;
  ::chmod(secret.c_str(), 0644);
  auto loose = run_process({testing::kiln_binary(), "config"}, env);
  EXPECT_EQ(loose.exit_code, 1);
  EXPECT_NE(loose.out.find("NOT USABLE"), std::string::npos) << loose.out;
  // A build with that secret file runs, without the remote, and says why.
  testing::write_variant_specs(m_specs.path(), 1);
  auto build = run_process({testing::kiln_binary(), "--cache-dir", node.cache, "build", m_specs / "variant0.toml"}, env);
  EXPECT_EQ(build.exit_code, 0) << build.err;
  EXPECT_NE(build.err.find("remote cache tiers are off"), std::string::npos) << build.err;
}

}  // namespace
}  // namespace kiln
