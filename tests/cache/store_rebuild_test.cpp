// The index is a cache of the blobs: whatever happens to index.sqlite (removed with its WAL or
// alone, emptied, truncated, replaced by another cache's), the next process rebuilds it from the
// blobs, and nothing valid is lost to hits, statistics, verify or gc, even once the blobs are old.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "cache/file_group.h"
#include "cache/store.h"
#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

constexpr int k_artifacts = 6;

ArtifactRecord record_for(int i) {
  ArtifactRecord r;
  r.key = xxh3_128("rebuild " + std::to_string(i));
  r.input_key = xxh3_128("rebuild input " + std::to_string(i));
  r.manifest = "spec:h.h\t00112233445566778899aabbccddeeff\n";
  r.op = "kernel_" + std::to_string(i);
  r.target = "cuda:sm_90";
  r.kind = "cubin";
  r.toolchain = "test";
  r.entry_points = r.op + ":8";
  r.compile_ms = 100 + i;
  r.compile_cpu_ms = 90 + i;
  return r;
}

std::string content_for(int i) {
  std::mt19937 rng(i);
  std::string out(20'000 + 1000 * i, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// Every file under `dir`'s blobs, manifests and files, made `hours` older.
void age(const std::string& dir, int hours) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= hours * 3600;
  times[1] = times[0];
  std::error_code ec;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) ::utimensat(AT_FDCWD, e.path().c_str(), times, AT_SYMLINK_NOFOLLOW);
}

class StoreRebuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::open(m_dir.path()).value();
    for (int i = 0; i < k_artifacts; ++i) ASSERT_TRUE(store->put(record_for(i), content_for(i)).ok());
    auto stats = store->statistics().value();
    m_bytes = stats.bytes;
    ASSERT_EQ(stats.artifacts, static_cast<uint64_t>(k_artifacts));
  }

  std::unique_ptr<Store> open() {
    StoreOptions options;
    options.report_notice = [this](const std::string& m) { m_notices.push_back(m); };
    return Store::open(m_dir.path(), options).value();
  }

  // Nothing valid lost: hits, the counts, verify, and gc once every blob is hours old.
  void expect_whole(Store& store) {
    // A hit reads the blob alone: it works before the index is even opened.
    for (int i = 0; i < k_artifacts; ++i) {
      auto hit = store.get(record_for(i).key);
      ASSERT_TRUE(hit.ok() && hit->has_value()) << i;
      EXPECT_EQ((*hit)->bytes, content_for(i));
    }
    auto stats = store.statistics().value();
    for (int i = 0; i < k_artifacts; ++i) {
      auto manifest = store.get_manifest(record_for(i).input_key).value();
      ASSERT_TRUE(manifest.has_value()) << i;
      EXPECT_EQ(*manifest, record_for(i).manifest);
    }
    EXPECT_EQ(stats.artifacts, static_cast<uint64_t>(k_artifacts));
    EXPECT_EQ(stats.bytes, m_bytes);
    auto row = store.record(record_for(2).key).value();
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->op, "kernel_2");
    EXPECT_EQ(row->compile_cpu_ms, 92);
    auto verify = store.verify().value();
    EXPECT_EQ(verify.ok, static_cast<uint64_t>(k_artifacts));
    EXPECT_EQ(verify.unindexed, 0u);
    EXPECT_TRUE(verify.problems.empty()) << verify.problems.front();
    age(m_dir.path(), 3);
    auto gc = store.gc(uint64_t{1} << 40).value();
    EXPECT_EQ(gc.orphans_removed, 0u);
    EXPECT_EQ(gc.evicted, 0u);
    EXPECT_EQ(store.statistics()->artifacts, static_cast<uint64_t>(k_artifacts));
  }

  void expect_rebuilt_notice(const std::string& what) {
    ASSERT_EQ(m_notices.size(), 1u);
    EXPECT_NE(m_notices[0].find("was " + what), std::string::npos) << m_notices[0];
    EXPECT_NE(m_notices[0].find("rebuilt from " + std::to_string(k_artifacts) + " blobs"), std::string::npos) << m_notices[0];
  }

  testing::TempDir m_dir;
  uint64_t m_bytes = 0;
  std::vector<std::string> m_notices;
};

TEST_F(StoreRebuildTest, AnIndexRemovedWithItsFilesIsRebuiltFromTheBlobs) {
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) ::unlink((m_dir / f).c_str());
  std::filesystem::remove_all(m_dir / "manifests");  // the blobs carry them too
  auto store = open();
  expect_whole(*store);
  expect_rebuilt_notice("missing");
  EXPECT_EQ(store->statistics()->counters["adopted"], k_artifacts);
}

TEST_F(StoreRebuildTest, EachOfTheIndexFilesRemovedAloneLosesNothing) {
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) {
    SCOPED_TRACE(f);
    ::unlink((m_dir / f).c_str());
    m_notices.clear();
    auto store = open();
    expect_whole(*store);
    EXPECT_LE(m_notices.size(), 1u);  // rebuilt when what was left held no rows
  }
}

TEST_F(StoreRebuildTest, AnIndexTruncatedToNothingIsRebuilt) {
  ::unlink((m_dir / "index.sqlite-wal").c_str());
  ::unlink((m_dir / "index.sqlite-shm").c_str());
  ASSERT_EQ(::truncate((m_dir / "index.sqlite").c_str(), 0), 0);
  auto store = open();
  expect_whole(*store);
  expect_rebuilt_notice("empty");
}

TEST_F(StoreRebuildTest, AnIndexTruncatedHalfwayIsSetAsideAndRebuilt) {
  {
    // Its pages in the main file, none in the WAL: a checkpoint, as a long-lived cache has.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((m_dir / "index.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  ::unlink((m_dir / "index.sqlite-wal").c_str());
  ::unlink((m_dir / "index.sqlite-shm").c_str());
  struct stat st{};
  ASSERT_EQ(::stat((m_dir / "index.sqlite").c_str(), &st), 0);
  ASSERT_GT(st.st_size, 8192);
  ASSERT_EQ(::truncate((m_dir / "index.sqlite").c_str(), st.st_size / 2), 0);
  auto store = open();
  expect_whole(*store);
  ASSERT_EQ(m_notices.size(), 1u);
  EXPECT_NE(m_notices[0].find("corrupt (set aside as"), std::string::npos) << m_notices[0];
}

TEST_F(StoreRebuildTest, AnotherCachesIndexIsSetAsideAndRebuilt) {
  testing::TempDir other;
  {
    auto store = Store::open(other.path()).value();
    ArtifactRecord r = record_for(100);
    ASSERT_TRUE(store->put(r, "another cache's artifact").ok());
  }
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) {
    ::unlink((m_dir / f).c_str());
    std::error_code ec;
    std::filesystem::copy_file(other / f, m_dir / f, ec);
  }
  auto store = open();
  expect_whole(*store);
  ASSERT_EQ(m_notices.size(), 1u);
  EXPECT_NE(m_notices[0].find("another cache's (set aside as"), std::string::npos) << m_notices[0];
  EXPECT_FALSE(store->get(record_for(100).key)->has_value());  // its rows named blobs that are not here
}

TEST_F(StoreRebuildTest, AProcessWhoseIndexIsRemovedUnderItWritesToTheNewOne) {
  auto store = open();
  ASSERT_TRUE(store->statistics().ok());  // the index is open
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) ::unlink((m_dir / f).c_str());
  ArtifactRecord r = record_for(7);
  ASSERT_TRUE(store->put(r, content_for(7)).ok());
  auto fresh = Store::open(m_dir.path()).value();
  EXPECT_EQ(fresh->statistics()->artifacts, static_cast<uint64_t>(k_artifacts + 1));
}

TEST_F(StoreRebuildTest, GcAdoptsValidBlobsTheIndexLacksAndRemovesOnlyDamagedOnes) {
  // Rows lost without the index looking empty (an old copy of the index put back, say).
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((m_dir / "index.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, ("DELETE FROM artifacts WHERE op IN ('kernel_1', 'kernel_2')"), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  // One blob the index never knew, damaged.
  std::string damaged = m_dir / "blobs/ab/abababababababababababababababab.blob";
  m_dir.write("blobs/ab/abababababababababababababababab.blob", "KILNBLOB not a blob at all");
  auto store = open();
  // Young ones may be a publication between its rename and its row: left alone.
  auto young = store->gc(uint64_t{1} << 40).value();
  EXPECT_EQ(young.adopted, 0u);
  EXPECT_EQ(young.orphans_removed, 0u);
  age(m_dir.path(), 3);
  auto gc = store->gc(uint64_t{1} << 40).value();
  EXPECT_EQ(gc.adopted, 2u);
  EXPECT_EQ(gc.orphans_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(damaged));
  auto stats = store->statistics().value();
  EXPECT_EQ(stats.artifacts, static_cast<uint64_t>(k_artifacts));
  EXPECT_EQ(stats.bytes, m_bytes);
  EXPECT_EQ(stats.counters["adopted"], 2);
}

TEST_F(StoreRebuildTest, VerifyReportsBlobsTheIndexLacksAndRepairAdoptsThem) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((m_dir / "index.sqlite").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DELETE FROM artifacts WHERE op = 'kernel_3'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = open();
  auto report = store->verify().value();
  EXPECT_EQ(report.ok, static_cast<uint64_t>(k_artifacts - 1));
  EXPECT_EQ(report.unindexed, 1u);
  EXPECT_EQ(report.adopted, 0u);
  ASSERT_EQ(report.problems.size(), 1u);
  // Named as its blob knows it: the kernel and the target.
  EXPECT_NE(report.problems[0].find("kernel_3, cuda:sm_90"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[0].find("--repair"), std::string::npos) << report.problems[0];
  auto repaired = store->verify(/*repair=*/true).value();
  EXPECT_EQ(repaired.unindexed, 1u);
  EXPECT_EQ(repaired.adopted, 1u);
  auto again = store->verify().value();
  EXPECT_EQ(again.unindexed, 0u);
  EXPECT_EQ(again.ok, static_cast<uint64_t>(k_artifacts));
  EXPECT_EQ(store->statistics()->bytes, m_bytes);
}

// Version 3 counted blob files alone and one compile time: version 4 counts what an artifact keeps
// beside its blob (a group's copies, its manifest) and names wall and CPU time apart.
TEST(StoreMigrationTest, VersionThreeCountsCopiesAndManifestsAndNamesWallTime) {
  testing::TempDir dir;
  ArtifactRecord group;
  group.key = group.input_key = xxh3_128("a group");
  group.op = "add_kernel";
  group.target = "cuda:sm_90";
  group.kind = "triton-group";
  NamedFiles files = {{"add_kernel.cubin", std::string(5000, 'c')}, {"add_kernel.json", "{}"}};
  std::string bytes = encode_file_group(views_of(files));
  ArtifactRecord op;
  op.key = xxh3_128("an op");
  op.input_key = xxh3_128("an op's inputs");
  op.manifest = "spec:h.h\t00112233445566778899aabbccddeeff\n";
  op.op = "gelu";
  op.target = "cpu:x86-64-v3";
  op.kind = "host-so";
  {
    auto store = Store::open(dir.path()).value();
    ASSERT_TRUE(store->put(group, bytes, Compression::kNone).ok());
    ASSERT_TRUE(store->put(op, "so bytes").ok());
  }
  // As version 3 left it.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "index.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "ALTER TABLE artifacts DROP COLUMN extra_size; ALTER TABLE artifacts DROP COLUMN compile_cpu_ms;"
                         " DROP TABLE folded; DELETE FROM meta WHERE name = 'store_id';"
                         " UPDATE stats SET value = (SELECT sum(stored_size) FROM artifacts) WHERE name = 'bytes';"
                         " INSERT INTO stats VALUES('compile_us_spent', 7000); INSERT INTO stats VALUES('compile_us_saved', 3000);"
                         " UPDATE meta SET value = '3' WHERE name = 'schema_version';",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = Store::open(dir.path()).value();
  auto stats = store->statistics().value();
  EXPECT_EQ(stats.counters["compile_wall_us_spent"], 7000);
  EXPECT_EQ(stats.counters["compile_wall_us_saved"], 3000);
  EXPECT_EQ(stats.counters.count("compile_us_spent"), 0u);
  auto g = store->record(group.key).value().value();
  auto o = store->record(op.key).value().value();
  EXPECT_EQ(g.extra_size, placed_size_of(bytes).value());
  EXPECT_GT(g.extra_size, 5002u);
  EXPECT_EQ(o.extra_size, std::string("kiln-manifest 1\n").size() + op.manifest.size());
  EXPECT_EQ(stats.bytes, g.stored_size + g.extra_size + o.stored_size + o.extra_size);
}

}  // namespace
}  // namespace kiln::cache
