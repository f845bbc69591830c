// The remote tier at cluster scale, against real redis-servers on 127.0.0.1 (started here):
// large artifacts as chunks spread over shards, checked, resumed; waiters of one lease woken by
// its release instead of polling; a shard lost mid-start. Faults come from a proxy in front of
// a server, or from writing to a server directly what a broken one would hold.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>

#include "cache/remote.h"
#include "tests/cache/remote_test_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::FaultProxy;
using kiln::testing::RedisServer;
using kiln::testing::TempDir;
using Clock = std::chrono::steady_clock;

#define REQUIRE_REDIS() \
  if (RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)"

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(path.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

std::unique_ptr<RemoteEndpoint> raw(const std::string& url) { return make_endpoint(parse_endpoint_url(url).value(), {}).value(); }

// Keys a server holds under kiln's prefix whose object name ends in `type_digit` (2: chunks).
int count_objects(const std::string& url, char type_digit) {
  auto r = kiln::testing::run_process({"redis-cli", "-u", url, "--scan", "--pattern", std::string("kiln:*") + type_digit});
  int n = 0;
  for (char c : r.out) n += c == '\n';
  return n;
}

class Shards : public ::testing::Test {
 protected:
  void start(int n) {
    for (int i = 0; i < n; ++i) {
      m_dirs.push_back(std::make_unique<TempDir>());
      m_servers.push_back(std::make_unique<RedisServer>(m_dirs.back()->path()));
    }
  }
  std::string urls(const std::vector<std::string>& override = {}) const {
    std::string out;
    for (size_t i = 0; i < m_servers.size(); ++i)
      out += (out.empty() ? "" : ",") + (i < override.size() && !override[i].empty() ? override[i] : m_servers[i]->url());
    return out;
  }
  RemoteOptions options(const std::string& tiers) {
    RemoteOptions o;
    o.tiers = parse_tiers(tiers).value();
    o.connect_timeout = std::chrono::milliseconds(200);
    o.io_timeout = std::chrono::milliseconds(500);
    o.lease = std::chrono::milliseconds(900);
    o.breaker = std::chrono::milliseconds(60000);
    o.chunk_threshold = 64 << 10;
    o.chunk_bytes = 4 << 10;
    return o;
  }
  std::unique_ptr<RemoteTiers> tiers(RemoteOptions o) { return RemoteTiers::create(std::move(o)).value(); }
  std::vector<std::unique_ptr<TempDir>> m_dirs;
  std::vector<std::unique_ptr<RedisServer>> m_servers;
};

TEST_F(Shards, LargeArtifactIsChunkedOverEveryShardAndComesBackWhole) {
  REQUIRE_REDIS();
  start(6);
  Hash128 key = xxh3_128("pch");
  std::string payload = noise(600 << 10, 7);  // 150 chunks of 4 KiB
  auto writer = tiers(options(urls()));
  writer->publish({{RemoteObject::kArtifact, key, payload}});
  writer->drain();
  int total = 0, most = 0;
  for (auto& s : m_servers) {
    int n = count_objects(s->url(), '2');
    EXPECT_GT(n, 0) << s->url() << " holds no chunk";
    total += n;
    most = std::max(most, n);
  }
  EXPECT_EQ(total, 150);
  EXPECT_EQ(most, 25) << "the chunks are dealt out evenly: 150 over 6 shards";
  // Small objects stay whole, on one shard.
  writer->publish({{RemoteObject::kArtifact, xxh3_128("small"), "a small kernel"}});
  writer->drain();
  auto reader = tiers(options(urls()));
  int accepted = 0;
  EXPECT_EQ(fetch_whole(*reader, key, &accepted), payload);
  EXPECT_EQ(accepted, 1);
  EXPECT_EQ(fetch_whole(*reader, xxh3_128("small")), "a small kernel");
}

TEST_F(Shards, DamagedOrMissingChunkIsAMissNeverAPartialLoadAndARebuildRepairsIt) {
  REQUIRE_REDIS();
  start(3);
  Hash128 key = xxh3_128("big");
  std::string payload = noise(200 << 10, 3);
  auto writer = tiers(options(urls()));
  writer->publish({{RemoteObject::kArtifact, key, payload}});
  writer->drain();
  // One chunk overwritten with other bytes of the same size on its shard, one deleted.
  std::string victim, gone;
  for (auto& s : m_servers) {
    auto r = kiln::testing::run_process({"redis-cli", "-u", s->url(), "--scan", "--pattern", "kiln:*2"});
    std::string first = r.out.substr(0, r.out.find('\n'));
    if (first.empty()) continue;
    if (victim.empty()) {
      victim = first;
      auto e = raw(s->url());
      ASSERT_TRUE(e->put(first.substr(5), noise(4 << 10, 99)).ok());
    } else if (gone.empty()) {
      gone = first;
      kiln::testing::run_process({"redis-cli", "-u", s->url(), "DEL", first});
    }
  }
  ASSERT_FALSE(victim.empty());
  ASSERT_FALSE(gone.empty());
  auto reader = tiers(options(urls()));
  int accepted = 0;
  EXPECT_EQ(fetch_whole(*reader, key, &accepted), "");
  EXPECT_EQ(accepted, 0) << "nothing is handed over unless whole and checked";
  // The node that misses compiles it again and publishes it: the chunks are written anew.
  writer->publish({{RemoteObject::kArtifact, key, payload}});
  writer->drain();
  EXPECT_EQ(fetch_whole(*reader, key), payload);
}

TEST_F(Shards, PartialFetchResumesWithTheChunksThatArrived) {
  REQUIRE_REDIS();
  start(3);
  std::vector<std::unique_ptr<FaultProxy>> proxies;
  for (auto& s : m_servers) proxies.push_back(std::make_unique<FaultProxy>(s->port()));
  std::string tier = urls({proxies[0]->url("redis"), proxies[1]->url("redis"), proxies[2]->url("redis")});
  Hash128 key = xxh3_128("resume");
  std::string payload = noise(400 << 10, 5);  // 100 chunks
  auto writer = tiers(options(tier));
  writer->publish({{RemoteObject::kArtifact, key, payload}});
  writer->drain();
  // The shard that goes down is one that does not hold the chunk list (that would be a plain miss).
  size_t down = 0;
  while (count_objects(m_servers[down]->url(), '0') > 0) ++down;
  FaultProxy& proxy = *proxies[down];
  TempDir spool;
  RemoteOptions o = options(tier);
  o.spool_dir = spool / "chunks";
  o.breaker = std::chrono::milliseconds(100);
  auto reader = tiers(o);
  proxy.set(FaultProxy::Fault::kRefuse);  // the third shard goes down mid-start
  // Its chunks are not to be had (their second endpoint in rendezvous order has none): a miss.
  EXPECT_EQ(fetch_whole(*reader, key), "");
  auto kept = list_dir(spool / "chunks");
  EXPECT_GT(kept.size(), 30u) << "the chunks of the shards that answered are kept";
  EXPECT_LT(kept.size(), 100u);
  reader->take_counters();
  proxy.set(FaultProxy::Fault::kNone);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the breaker lets it be tried again
  EXPECT_EQ(fetch_whole(*reader, key), payload);
  int64_t bytes_in = counters_of(*reader)[TierCounter::kBytesIn];
  EXPECT_LT(bytes_in, static_cast<int64_t>(payload.size()) - static_cast<int64_t>(kept.size()) * (4 << 10) + (8 << 10))
      << "only the missing chunks (and the list) are fetched again";
  EXPECT_TRUE(list_dir(spool / "chunks").empty()) << "kept chunks are dropped once the artifact is whole";
}

// A chunk list is what a remote sent: each way it can be wrong is refused with what is wrong,
// and nothing is handed over.
TEST_F(Shards, AMalformedChunkListIsRefusedAndSaysWhy) {
  REQUIRE_REDIS();
  start(2);
  auto le64 = [](uint64_t v, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += static_cast<char>(v >> (8 * i));
    return out;
  };
  std::string chunk = "the only chunk";
  auto sha = [](std::string_view b) { return sha256({b}).value(); };
  auto raw_hash = [](const Sha256& h) { return std::string(reinterpret_cast<const char*>(h.data()), h.size()); };
  Sha256 h = sha(chunk);
  std::string entry = raw_hash(h) + le64(chunk.size(), 4);
  auto list = [&](uint64_t total, uint32_t count, const std::string& entries, const Sha256& whole) {
    return "KILNCHK2" + le64(total, 8) + le64(count, 4) + le64(0, 4) + raw_hash(whole) + entries;
  };
  // The chunk itself is there, where the tier looks for it (both shards: wherever it is dealt).
  for (auto& s : m_servers) ASSERT_TRUE(raw(s->url())->put(chunk_object_name(h), chunk).ok());
  struct Case {
    std::string payload;
    const char* says;
  };
  std::vector<Case> cases{{"KILNCHK2short", "no KILNCHK2 header"},
                          {list(chunk.size(), 2, entry, sha(chunk)), "bytes for 2 chunks"},
                          {list(99, 1, entry, sha(chunk)), "its chunks hold 14 bytes, it says 99"},
                          {list(1, 1, raw_hash(sha("")) + le64(0, 4), sha("")), "says 0 bytes"},
                          // A 92-byte list that says 4 GiB: refused before anything is sized by it.
                          {list(uint64_t{4} << 30, 1, entry, sha(chunk)), "over the cap"},
                          {list(chunk.size(), 1, entry, sha("another whole")), "do not hash to the artifact's SHA-256"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    Hash128 key = xxh3_128("malformed " + std::to_string(i));
    std::string name = object_name(RemoteObject::kArtifact, key);
    auto sealed = seal_object(RemoteObject::kArtifact, key, cases[i].payload, TrustConfig{}, tier_namespace(parse_tiers(urls()).value()[0])).value();
    for (auto& s : m_servers) ASSERT_TRUE(raw(s->url())->put(name, sealed).ok());
    RemoteOptions o = options(urls());
    std::string said;
    o.report = [&](const std::string&, const std::string& m) { said += m; };
    auto reader = tiers(o);
    int accepted = 0;
    EXPECT_EQ(fetch_whole(*reader, key, &accepted), "") << cases[i].says;
    EXPECT_EQ(accepted, 0);
    EXPECT_NE(said.find(cases[i].says), std::string::npos) << said;
  }
}

TEST_F(Shards, SignedChunkedArtifactIsRefusedWithoutTheSameSecret) {
  REQUIRE_REDIS();
  start(2);
  Hash128 key = xxh3_128("signed");
  std::string payload = noise(300 << 10, 11);
  RemoteOptions signer = options(urls());
  signer.trust.secret = "cluster secret";
  tiers(signer)->publish({{RemoteObject::kArtifact, key, payload}});
  RemoteOptions same = options(urls()), other = options(urls());
  same.trust.secret = "cluster secret";
  other.trust.secret = "another secret";
  EXPECT_EQ(fetch_whole(*tiers(same), key), payload);
  EXPECT_EQ(fetch_whole(*tiers(other), key), "");
  // Unsigned chunks are refused by a node that requires signatures.
  Hash128 plain = xxh3_128("unsigned");
  tiers(options(urls()))->publish({{RemoteObject::kArtifact, plain, payload}});
  EXPECT_EQ(fetch_whole(*tiers(same), plain), "");
}

TEST_F(Shards, WaitersOfALeaseAreWokenByItsReleaseAndPollRarely) {
  REQUIRE_REDIS();
  start(1);
  Hash128 input = xxh3_128("one compile");
  auto holder = tiers(options(urls()));
  auto lease = holder->take_lease(input);
  ASSERT_EQ(lease.state, RemoteTiers::LeaseState::kTaken);
  constexpr int k_waiters = 40;
  std::atomic<bool> published{false};
  std::vector<RemoteTiers::WaitResult> results(k_waiters);
  std::vector<double> waited_ms(k_waiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < k_waiters; ++i)
    threads.emplace_back([&, i] {
      RemoteOptions o = options(urls());
      o.lease_polls_per_second = 10;
      auto t = tiers(o);
      auto start = Clock::now();
      results[i] = t->wait_for_holder(input, std::chrono::milliseconds(20000), [&] { return published.load(); });
      waited_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // a compile of 2.5 s
  published = true;
  lease.lease.reset();  // released: the waiters are told
  for (auto& t : threads) t.join();
  int polls = 0;
  for (int i = 0; i < k_waiters; ++i) {
    EXPECT_EQ(results[i].state, RemoteTiers::WaitState::kFound) << i;
    EXPECT_TRUE(results[i].woken) << i;
    EXPECT_LT(waited_ms[i], 2500 + 1000) << "woken at the release, not at a poll";
    polls += results[i].polls;
  }
  // Each waiter: watch, take, look, then one poll (take, look, count) per interval of at least
  // 1 s (40 watchers / 10 polls a second = 4 s, jittered 0.5x..1.5x), and a look when woken.
  EXPECT_LT(polls, k_waiters * 9) << "polls of the whole cluster while it waited 2.5 s";
}

TEST_F(Shards, ALeaseWhoseHolderDiedIsTakenByOneWaiterAfterItExpires) {
  REQUIRE_REDIS();
  start(1);
  Hash128 input = xxh3_128("holder dies");
  // A holder that took the lease and died: nothing renews or releases it. Its expiry is the
  // server's to count (PX), so a holder with a skewed clock can neither shorten nor lengthen it.
  auto e = raw(m_servers[0]->url());
  ASSERT_TRUE(e->take_lease("lease:" + input.hex(), "a dead node", std::chrono::milliseconds(900)).value());
  constexpr int k_waiters = 8;
  std::atomic<int> taken{0};
  std::vector<std::thread> threads;
  std::atomic<bool> published{false};
  for (int i = 0; i < k_waiters; ++i)
    threads.emplace_back([&] {
      auto t = tiers(options(urls()));
      auto r = t->wait_for_holder(input, std::chrono::milliseconds(15000), [&] { return published.load(); });
      if (r.state == RemoteTiers::WaitState::kTaken) {
        ++taken;
        published = true;  // it compiles and publishes, then releases: the others are woken
        r.lease.reset();
      } else {
        EXPECT_EQ(r.state, RemoteTiers::WaitState::kFound);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 1);
}

// A cluster start with one shard lost part way: the keys it owned are compiled again, once
// each (the lease and the objects move to the next shard in rendezvous order), never once per node.
TEST_F(Shards, AShardLostMidStartHasItsShareCompiledAgainOnce) {
  REQUIRE_REDIS();
  start(3);
  FaultProxy proxy(m_servers[1]->port());
  std::string tier = urls({"", proxy.url("redis"), ""});
  constexpr int k_keys = 30, k_nodes = 8;
  std::map<int, std::atomic<int>> compiles;
  for (int k = 0; k < k_keys; ++k) compiles[k] = 0;
  auto node = [&](RemoteTiers& t, int k) {
    Hash128 key = xxh3_128("key " + std::to_string(k));
    auto look = [&] { return t.fetch(RemoteObject::kManifest, key, [](std::string_view) { return Status(); }); };
    if (look()) return;
    auto taken = t.take_lease(key);
    std::unique_ptr<RemoteTiers::Lease> lease = std::move(taken.lease);
    if (taken.state == RemoteTiers::LeaseState::kHeldElsewhere) {
      auto w = t.wait_for_holder(key, std::chrono::milliseconds(20000), look);
      if (w.state == RemoteTiers::WaitState::kFound) return;
      lease = std::move(w.lease);
      if (look()) return;
    }
    ++compiles[k];
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::shared_ptr<RemoteTiers::Lease> held(std::move(lease));
    t.publish({{RemoteObject::kManifest, key, "manifest " + std::to_string(k)}}, [held]() mutable { held.reset(); });
    t.drain();
  };
  auto run_nodes = [&] {
    std::vector<std::thread> threads;
    for (int n = 0; n < k_nodes; ++n)
      threads.emplace_back([&] {
        auto t = tiers(options(tier));
        for (int k = 0; k < k_keys; ++k) node(*t, k);
      });
    for (auto& t : threads) t.join();
  };
  run_nodes();
  for (int k = 0; k < k_keys; ++k) EXPECT_EQ(compiles[k].load(), 1) << "key " << k;
  int lost = count_objects(m_servers[1]->url(), '1');
  ASSERT_GT(lost, 0) << "the second shard owns some keys";
  proxy.set(FaultProxy::Fault::kRefuse);  // lost: every connection to it refused from now on
  run_nodes();
  int again = 0;
  for (int k = 0; k < k_keys; ++k) {
    EXPECT_LE(compiles[k].load(), 2) << "key " << k;
    again += compiles[k].load() - 1;
  }
  EXPECT_EQ(again, lost) << "exactly the lost shard's share is compiled again, once each";
}

// Lease holders whose wall clocks are a day ahead and three hours behind, beside one that is
// right (libfaketime; the monotonic clock left alone, as NTP leaves it): three processes of
// simulated nodes, compiles of 2.5 s under leases of 0.9 s that must be renewed twice. Each key
// is compiled once in all, whoever holds it: a lease's life is counted by the server.
TEST_F(Shards, LeaseHoldersWithSkewedClocksStillCompileEachKeyOnce) {
  REQUIRE_REDIS();
  std::string faketime = kiln::testing::find_program("faketime", {"/usr/bin/faketime"});
  if (faketime.empty()) GTEST_SKIP() << "faketime is not installed (scripts/setup installs it)";
  std::string kiln = kiln::testing::kiln_binary();
  std::string sim = kiln.substr(0, kiln.rfind('/')) + "/kiln_cluster_sim";
  if (::access(sim.c_str(), X_OK) != 0) GTEST_SKIP() << sim << " is not built";
  start(1);
  TempDir work;
  std::vector<std::vector<std::string>> commands;
  std::vector<std::map<std::string, std::string>> envs;
  for (const char* skew : {"+1d", "-3h", ""}) {
    std::vector<std::string> cmd{sim, "--tiers", m_servers[0]->url(), "--nodes", "4", "--concurrency", "4", "--triton", "20",
                                 "--lease-ms", "900", "--pch-compile-ms", "2500", "--work", work / ("n" + std::string(skew))};
    if (*skew) cmd.insert(cmd.begin(), {faketime, "-f", skew});
    commands.push_back(cmd);
    envs.push_back({{"FAKETIME_DONT_FAKE_MONOTONIC", "1"}});
  }
  auto results = kiln::testing::run_processes(commands, envs);
  int compiles = 0;
  for (auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string field = "\"compiles\": ";
    size_t at = r.out.find(field);
    ASSERT_NE(at, std::string::npos) << r.out;
    compiles += std::stoi(r.out.substr(at + field.size()));
    EXPECT_NE(r.out.find("\"max_compiles_per_key\": "), std::string::npos);
    EXPECT_EQ(r.out.find("\"max_compiles_per_key\": 2"), std::string::npos) << r.out;
  }
  EXPECT_EQ(compiles, 13 + 1 + 20) << "one compile per key across the three processes";
}

}  // namespace
}  // namespace kiln::cache
