// Every counter `kiln cache stats` prints moves by what happened, through the ops API: the real
// compiler, a real cache folder, a real Redis for the remote tier (docs/STORE.md lists them).
#include <gtest/gtest.h>

#include "builders/ops.h"
#include "support/file_util.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

std::unique_ptr<Ops> make_ops(const std::string& cache, const std::string& remote = "") {
  OpsOptions o;
  o.cache_dir = cache;
  o.remote = remote;
  o.spec_dirs = {testing::bundled_spec_dir()};
  auto ops = Ops::create(o);
  EXPECT_TRUE(ops.ok()) << ops.status().message();
  return std::move(ops).value();
}

// The counters as `kiln cache stats` reads them (another Store on the folder: pages of live
// processes count as they stand).
std::map<std::string, int64_t> counters(const std::string& cache) {
  auto store = cache::Store::open(cache).value();
  return store->statistics().value().counters;
}

// What each counter moved by between two readings (those that did not move are left out).
std::map<std::string, int64_t> moved(const std::map<std::string, int64_t>& before, const std::map<std::string, int64_t>& after) {
  std::map<std::string, int64_t> out;
  for (auto& [name, value] : after) {
    auto it = before.find(name);
    int64_t delta = value - (it == before.end() ? 0 : it->second);
    if (delta) out[name] = delta;
  }
  return out;
}

TEST(OpsCountersTest, MissCompileMemoryAndDiskHitsEachMoveTheirCountersByOne) {
  testing::TempDir cache;
  auto start = counters(cache.path());
  auto ops = make_ops(cache.path());
  ASSERT_TRUE(ops->get("vector_add").ok());
  auto compiled = counters(cache.path());
  auto m = moved(start, compiled);
  EXPECT_EQ(m["misses"], 1);
  EXPECT_EQ(m["compiles"], 1);
  EXPECT_EQ(m["hits_memory"] + m["hits_disk"] + m["hits_remote"], 0);
  EXPECT_GT(m["compile_wall_us_spent"], 0);
  EXPECT_GT(m["compile_cpu_us_spent"], 0);
  // What was spent is what the record keeps (saved by each later hit).
  auto spec = ops->find_spec("vector_add").value();
  auto record = ops->cached_record(spec, parse_target(ops->accelerator().native_target()).value()).value().value();
  EXPECT_EQ(m["compile_wall_us_spent"], static_cast<int64_t>(record.compile_ms * 1000));
  EXPECT_EQ(m["compile_cpu_us_spent"], static_cast<int64_t>(record.compile_cpu_ms * 1000));

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ops->get("vector_add").ok());
  m = moved(compiled, counters(cache.path()));
  EXPECT_EQ(m, (std::map<std::string, int64_t>{{"hits_memory", 3}}));

  auto before = counters(cache.path());
  auto fresh = make_ops(cache.path());
  ASSERT_TRUE(fresh->get("vector_add").ok());
  m = moved(before, counters(cache.path()));
  EXPECT_EQ(m["hits_disk"], 1);
  EXPECT_EQ(m["compile_wall_us_saved"], static_cast<int64_t>(record.compile_ms * 1000));
  EXPECT_EQ(m["compile_cpu_us_saved"], static_cast<int64_t>(record.compile_cpu_ms * 1000));
  EXPECT_EQ(m.count("compiles") + m.count("misses"), 0u);
}

TEST(OpsCountersTest, ADamagedArtifactIsOneRepairOneMissAndOneCompile) {
  testing::TempDir cache;
  { ASSERT_TRUE(make_ops(cache.path())->get("vector_add").ok()); }
  auto ops = make_ops(cache.path());
  auto spec = ops->find_spec("vector_add").value();
  auto record = ops->cached_record(spec, parse_target(ops->accelerator().native_target()).value()).value().value();
  std::string blob = ops->store()->blob_path(record.key);
  std::string bytes = read_file(blob).value();
  bytes[bytes.size() / 2] ^= 0x5a;
  ASSERT_TRUE(write_file_atomic(blob, bytes).ok());
  auto before = counters(cache.path());
  ASSERT_TRUE(ops->get("vector_add").ok());
  auto m = moved(before, counters(cache.path()));
  EXPECT_EQ(m["repairs"], 1);
  EXPECT_EQ(m["misses"], 1);
  EXPECT_EQ(m["compiles"], 1);
  EXPECT_EQ(m["hits_disk"], 0);
}

TEST(OpsCountersTest, ARemoteHitAndTheTiersFiguresMoveByWhatTheyDid) {
  if (testing::RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup)";
  testing::TempDir redis_dir, a, b;
  testing::RedisServer redis(redis_dir.path());
  std::string tier = "remote|" + redis.url() + "|";
  {
    auto first = make_ops(a.path(), redis.url());
    ASSERT_TRUE(first->get("vector_add").ok());
    first->wait_background();
  }  // its publications are drained when it goes
  auto published = counters(a.path());
  EXPECT_GE(published[tier + "published"], 2);  // the artifact and its manifest
  EXPECT_GT(published[tier + "bytes_out"], 0);
  auto before = counters(b.path());
  auto second = make_ops(b.path(), redis.url());
  ASSERT_TRUE(second->get("vector_add").ok());
  auto m = moved(before, counters(b.path()));
  EXPECT_EQ(m["hits_remote"], 1);
  EXPECT_EQ(m["compiles"], 0);
  EXPECT_GT(m["compile_wall_us_saved"], 0);
  EXPECT_GE(m[tier + "hits"], 2);  // the manifest, then the artifact
  EXPECT_GT(m[tier + "bytes_in"], 0);
  EXPECT_GT(m[tier + "us"], 0);
  // An op no node has published: the tier is asked and has nothing.
  before = counters(b.path());
  ASSERT_TRUE(second->get("axpby").ok());
  second->wait_background();
  m = moved(before, counters(b.path()));
  EXPECT_EQ(m[tier + "misses"], 2);  // looked for under the node's lock, then again under the cluster's lease
  EXPECT_EQ(m[tier + "hits"], 0);
  EXPECT_EQ(m["compiles"], 1);
}

TEST(OpsCountersTest, ATierThatCannotBeReachedCountsOneErrorThenSkipsUntilItsBreakerCloses) {
  testing::TempDir cache;
  std::string url = "redis://127.0.0.1:1";  // nothing listens on port 1
  std::string tier = "remote|" + url + "|";
  auto before = counters(cache.path());
  {
    auto ops = make_ops(cache.path(), url);
    ASSERT_TRUE(ops->get("vector_add").ok());
    ASSERT_TRUE(ops->get("axpby").ok());
    ops->wait_background();
  }
  auto m = moved(before, counters(cache.path()));
  EXPECT_EQ(m[tier + "errors"], 1);
  EXPECT_GE(m[tier + "skipped"], 2);  // each op's lookups, lease and publication while the breaker is open
  EXPECT_EQ(m[tier + "hits"] + m[tier + "misses"], 0);
  EXPECT_EQ(m["compiles"], 2);
}

}  // namespace
}  // namespace kiln::builders
