#include "cache/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <fstream>

#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

ArtifactRecord record_for(const std::string& name) {
  ArtifactRecord r;
  r.key = xxh3_128(name);
  r.op = name;
  r.target = "cpu:x86-64-v3";
  r.kind = "host-so";
  r.toolchain = "test";
  r.entry_points = name + ":8";
  r.compile_ms = 12.5;
  return r;
}

TEST(StoreTest, MissThenHitWithMetadata) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_a");
  auto miss = store->get(r.key);
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss->has_value());
  ASSERT_TRUE(store->put(r, "artifact bytes").ok());
  auto hit = store->get(r.key);
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->bytes, "artifact bytes");
  EXPECT_EQ((*hit)->record.op, "op_a");
  EXPECT_EQ((*hit)->record.entry_points, "op_a:8");
  EXPECT_DOUBLE_EQ((*hit)->record.compile_ms, 12.5);
}

TEST(StoreTest, PersistsAcrossOpensAndUsesWal) {
  testing::TempDir dir;
  auto r = record_for("op_b");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());
  auto store = Store::open(dir.path()).value();
  EXPECT_TRUE(store->get(r.key)->has_value());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "index.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_close(db);
}

TEST(StoreTest, TruncatedBlobIsAMissAndIsRepaired) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_c");
  ASSERT_TRUE(store->put(r, std::string(5000, 'x')).ok());
  std::string path = store->blob_path(r.key);
  std::string bytes = read_file(path).value();
  ASSERT_TRUE(write_file_atomic(path, bytes.substr(0, bytes.size() / 2)).ok());
  auto got = store->get(r.key);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store->repairs(), 1u);
  EXPECT_EQ(store->artifact_count().value(), 0u);  // the row is gone, so the next put replaces it
  ASSERT_TRUE(store->put(r, std::string(5000, 'x')).ok());
  EXPECT_TRUE(store->get(r.key)->has_value());
}

TEST(StoreTest, MissingBlobIsAMiss) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_d");
  ASSERT_TRUE(store->put(r, "bytes").ok());
  ASSERT_EQ(::unlink(store->blob_path(r.key).c_str()), 0);
  EXPECT_FALSE(store->get(r.key)->has_value());
}

TEST(StoreTest, BlobOfAnotherKeyIsNotAHit) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto a = record_for("op_e"), b = record_for("op_f");
  ASSERT_TRUE(store->put(a, "content of a").ok());
  ASSERT_TRUE(store->put(b, "content of b, longer").ok());
  // Swap in a's blob under b's name: valid by itself, but not b's content (size differs).
  ASSERT_TRUE(write_file_atomic(store->blob_path(b.key), read_file(store->blob_path(a.key)).value()).ok());
  EXPECT_FALSE(store->get(b.key)->has_value());
}

TEST(StoreTest, ManifestsRoundTrip) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  Hash128 k = xxh3_128("inputs");
  EXPECT_FALSE(store->get_manifest(k)->has_value());
  ASSERT_TRUE(store->put_manifest(k, "op", "spec:include/x.h\t00112233445566778899aabbccddeeff\n").ok());
  EXPECT_EQ(**store->get_manifest(k), "spec:include/x.h\t00112233445566778899aabbccddeeff\n");
}

TEST(StoreTest, IndexFromANewerSchemaIsRefusedWithAClearMessage) {
  testing::TempDir dir;
  { ASSERT_TRUE(Store::open(dir.path()).ok()); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "index.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE name = 'schema_version'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = Store::open(dir.path());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("schema version 99"), std::string::npos) << store.status().message();
}

TEST(StoreTest, HitCountsAreWrittenInBatches) {
  testing::TempDir dir;
  auto r = record_for("op_g");
  {
    auto store = Store::open(dir.path()).value();
    ASSERT_TRUE(store->put(r, "bytes").ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->get(r.key)->has_value());
  }  // flushed on close
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "index.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "SELECT hits FROM artifacts", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(s, 0), 5);
  sqlite3_finalize(s);
  sqlite3_close(db);
}

}  // namespace
}  // namespace kiln::cache
