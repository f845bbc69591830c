// The store against a real folder and a real SQLite index: hits, integrity and repair,
// counters, eviction, verification, migration, and a corrupt index rebuilt from blobs.
#include "cache/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "support/file_util.h"
#include "tests/cache/record_for.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using testing_records::record_for;

int64_t sql_int(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

void sql_exec(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
  sqlite3_close(db);
}

TEST(StoreTest, MissThenHitWithMetadataAndManifest) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_a");
  EXPECT_FALSE(store->get(r.key)->has_value());
  EXPECT_FALSE(store->get_manifest(r.input_key)->has_value());
  ASSERT_TRUE(store->put(r, "artifact bytes").ok());
  auto hit = store->get(r.key);
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->bytes, "artifact bytes");
  EXPECT_EQ((*hit)->record.op, "op_a");
  EXPECT_EQ((*hit)->record.entry_points, "op_a:8");
  EXPECT_EQ((*hit)->record.components, r.components);
  EXPECT_DOUBLE_EQ((*hit)->record.compile_ms, 12.5);
  EXPECT_EQ(**store->get_manifest(r.input_key), r.manifest);
}

TEST(StoreTest, PersistsAcrossOpensUsesWalAndPrivateFolders) {
  testing::TempDir dir;
  auto r = record_for("op_b");
  ASSERT_TRUE(Store::open(dir / "cache").value()->put(r, "bytes").ok());
  auto store = Store::open(dir / "cache").value();
  EXPECT_TRUE(store->get(r.key)->has_value());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir / "cache/index.sqlite").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, nullptr);
  ASSERT_EQ(sqlite3_step(s), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)), "wal");
  sqlite3_finalize(s);
  sqlite3_close(db);
  EXPECT_EQ(std::filesystem::status(dir / "cache").permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);
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
  auto stats = store->statistics().value();
  EXPECT_EQ(stats.counters["repairs"], 1);
  EXPECT_EQ(stats.artifacts, 0u);  // the row is gone, so the next put replaces it
  EXPECT_EQ(stats.bytes, 0u);
  ASSERT_TRUE(store->put(r, std::string(5000, 'x')).ok());
  EXPECT_TRUE(store->get(r.key)->has_value());
}

TEST(StoreTest, FlippedByteAndMissingBlobAreMisses) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto a = record_for("op_d"), b = record_for("op_e");
  ASSERT_TRUE(store->put(a, "bytes of a").ok());
  ASSERT_TRUE(store->put(b, "bytes of b").ok());
  std::string bytes = read_file(store->blob_path(a.key)).value();
  bytes[bytes.size() - 3] ^= 1;
  ASSERT_TRUE(write_file_atomic(store->blob_path(a.key), bytes).ok());
  ASSERT_EQ(::unlink(store->blob_path(b.key).c_str()), 0);
  EXPECT_FALSE(store->get(a.key)->has_value());
  EXPECT_FALSE(store->get(b.key)->has_value());
  EXPECT_EQ(store->statistics()->counters["repairs"], 2);
}

TEST(StoreTest, BlobOfAnotherKeyIsNotAHit) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto a = record_for("op_f"), b = record_for("op_g");
  ASSERT_TRUE(store->put(a, "content of a").ok());
  ASSERT_TRUE(store->put(b, "content of b, longer").ok());
  ASSERT_TRUE(write_file_atomic(store->blob_path(b.key), read_file(store->blob_path(a.key)).value()).ok());
  EXPECT_FALSE(store->get(b.key)->has_value());
}

// Store::map reads an artifact in place: one stored uncompressed (Compression::kNone, though it
// would compress) is checked in its mapped blob file; a compressed one is decoded. Both count a
// hit; a damaged or missing blob is a miss and is repaired, as for get().
TEST(StoreTest, MapReadsInPlaceChecksAndRepairsAsGetDoes) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto plain = record_for("op_map_plain"), packed = record_for("op_map_packed"), gone = record_for("op_map_gone");
  std::string content(200000, 'k');
  ASSERT_TRUE(store->put(plain, content, Compression::kNone).ok());
  ASSERT_TRUE(store->put(packed, content).ok());
  EXPECT_GT(std::filesystem::file_size(store->blob_path(plain.key)), content.size());
  EXPECT_LT(std::filesystem::file_size(store->blob_path(packed.key)), content.size() / 10);
  for (auto* r : {&plain, &packed}) {
    auto mapped = store->map(r->key);
    ASSERT_TRUE(mapped.ok() && mapped->has_value()) << r->op;
    EXPECT_EQ((*mapped)->bytes, content);
    EXPECT_EQ((*mapped)->record.op, r->op);
    EXPECT_TRUE((*mapped)->memory);
  }
  // The view outlives the Store and a rename over its file (blobs are replaced, never rewritten).
  auto kept = store->map(plain.key).value();
  ASSERT_TRUE(store->put(plain, std::string(100, 'z'), Compression::kNone).ok());
  EXPECT_EQ(kept->bytes, content);

  ASSERT_TRUE(store->put(plain, content, Compression::kNone).ok());
  std::string bytes = read_file(store->blob_path(plain.key)).value();
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(write_file_atomic(store->blob_path(plain.key), bytes).ok());
  auto damaged = store->map(plain.key);
  ASSERT_TRUE(damaged.ok());
  EXPECT_FALSE(damaged->has_value());
  EXPECT_FALSE(std::filesystem::exists(store->blob_path(plain.key)));  // removed, so the next put replaces it
  ASSERT_TRUE(store->put(gone, "short").ok());
  ASSERT_EQ(::unlink(store->blob_path(gone.key).c_str()), 0);
  EXPECT_FALSE(store->map(gone.key)->has_value());
  EXPECT_FALSE(store->map(record_for("never stored").key)->has_value());
  auto stats = store->statistics().value();
  EXPECT_EQ(stats.counters["repairs"], 2);
  ASSERT_TRUE(store->flush_usage().ok());
  EXPECT_EQ(store->record(packed.key).value()->hits, 1u);
}

TEST(StoreTest, HitsNeverWriteTheIndexTheyGoToTheUsageJournal) {
  testing::TempDir dir;
  auto r = record_for("op_h");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());
  struct stat index_before{}, wal_before{};
  ASSERT_EQ(::stat((dir / "index.sqlite").c_str(), &index_before), 0);
  ::stat((dir / "index.sqlite-wal").c_str(), &wal_before);
  {
    // A process that only hits: no index opened, nothing written to it.
    auto store = Store::open(dir.path()).value();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->get(r.key)->has_value());
    EXPECT_EQ(**store->get_manifest(r.input_key), r.manifest);
    store->count(Counter::kCompiles, 3);
  }  // its usage goes to the journal on close
  struct stat index_after{}, wal_after{};
  ASSERT_EQ(::stat((dir / "index.sqlite").c_str(), &index_after), 0);
  ::stat((dir / "index.sqlite-wal").c_str(), &wal_after);
  EXPECT_EQ(index_after.st_mtim.tv_nsec, index_before.st_mtim.tv_nsec);
  EXPECT_EQ(wal_after.st_size, wal_before.st_size);
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT hits FROM artifacts"), 0);
  EXPECT_NE(read_file(dir / "usage")->find("H " + r.key.hex() + " 5 "), std::string::npos);
  // The next process that writes or queries the index folds the journal in.
  auto stats = Store::open(dir.path()).value()->statistics().value();
  EXPECT_EQ(stats.counters["compiles"], 3);
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT hits FROM artifacts"), 5);
  EXPECT_GT(sql_int(dir / "index.sqlite", "SELECT last_used FROM artifacts"), 0);
  EXPECT_FALSE(std::filesystem::exists(dir / "usage"));
}

TEST(StoreTest, AnUnreadableUsageJournalIsOneNoticeAndTheIndexStillAnswers) {
  // Another user's journal in a shared cache folder cannot be read. Tests run as root, who
  // reads any file, so a folder in the journal's place stands for it (read(2): EISDIR).
  testing::TempDir dir;
  auto r = record_for("op_j");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());
  ASSERT_EQ(::mkdir((dir / "usage").c_str(), 0700), 0);
  std::vector<std::string> notices;
  StoreOptions options;
  options.report_notice = [&](const std::string& m) { notices.push_back(m); };
  {
    auto store = Store::open(dir.path(), options).value();
    auto stats = store->statistics();
    ASSERT_TRUE(stats.ok()) << stats.status().message();
    EXPECT_EQ(stats->artifacts, 1u);
    EXPECT_TRUE(store->statistics().ok());
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_NE(notices[0].find("cannot read the usage journal " + dir / "usage.folding."), std::string::npos) << notices[0];
  }
  // Left for a process that can read it, not deleted.
  int kept = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    kept += e.path().filename().string().rfind("usage.folding.", 0) == 0 && e.is_directory();
  EXPECT_EQ(kept, 1);
  // One that cannot be appended to: the hits of this process go uncounted, the query answers.
  notices.clear();
  ASSERT_EQ(::mkdir((dir / "usage").c_str(), 0700), 0);
  auto store = Store::open(dir.path(), options).value();
  EXPECT_TRUE(store->get(r.key)->has_value());
  EXPECT_TRUE(store->statistics().ok());
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("cannot append to the usage journal " + dir / "usage"), std::string::npos) << notices[0];
}

std::string incompressible(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

TEST(StoreTest, PastItsCapTheLeastRecentlyUsedAreEvicted) {
  // The cap holds everything the store keeps: its artifacts and its other files (the index
  // itself, here some tens of KB of it).
  testing::TempDir dir;
  StoreOptions options;
  options.max_bytes = 2'000'000;
  auto store = Store::open(dir.path(), options).value();
  std::vector<ArtifactRecord> records;
  for (int i = 0; i < 12; ++i) {
    records.push_back(record_for("op_" + std::to_string(i)));
    records.back().created = 1000 + i;  // oldest first
    ASSERT_TRUE(store->put(records.back(), incompressible(300'000, i)).ok());
  }
  auto stats = store->statistics().value();
  EXPECT_LE(stats.bytes + stats.other_bytes, options.max_bytes);
  EXPECT_GT(stats.other_bytes, 0u);
  EXPECT_GT(stats.counters["evictions"], 0);
  EXPECT_EQ(stats.counters["evictions"] + static_cast<int64_t>(stats.artifacts), 12);
  EXPECT_FALSE(store->get(records.front().key)->has_value());  // oldest gone
  EXPECT_TRUE(store->get(records.back().key)->has_value());    // newest kept
  // Blob files went with their rows.
  size_t files = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir / "blobs")) files += e.path().extension() == ".blob";
  EXPECT_EQ(files, stats.artifacts);
}

TEST(StoreTest, GcToASizeKeepsTheRecentlyUsed) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto old_one = record_for("old"), used = record_for("used");
  ASSERT_TRUE(store->put(old_one, incompressible(100'000, 1)).ok());
  ASSERT_TRUE(store->put(used, incompressible(100'000, 2)).ok());
  sql_exec(dir / "index.sqlite", "UPDATE artifacts SET last_used = 1 WHERE op = 'old'");
  auto report = store->gc(1).value();  // everything must go but nothing is left to keep
  EXPECT_EQ(report.evicted, 2u);
  EXPECT_EQ(report.bytes_after, 0u);
  ASSERT_TRUE(store->put(old_one, incompressible(100'000, 1)).ok());
  ASSERT_TRUE(store->put(used, incompressible(100'000, 2)).ok());
  sql_exec(dir / "index.sqlite", "UPDATE artifacts SET last_used = 1 WHERE op = 'old'");
  auto stats = store->statistics().value();
  report = store->gc(stats.bytes / 2 + 1 + stats.other_bytes + 20'000).value();  // room for one, and the index growing a little
  EXPECT_EQ(report.evicted, 1u);
  EXPECT_FALSE(store->get(old_one.key)->has_value());
  EXPECT_TRUE(store->get(used.key)->has_value());
}

TEST(StoreTest, VerifyFindsAndRemovesDamage) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto a = record_for("ok"), b = record_for("flipped"), c = record_for("gone");
  for (auto* r : {&a, &b, &c}) ASSERT_TRUE(store->put(*r, "content of " + r->op).ok());
  std::string bytes = read_file(store->blob_path(b.key)).value();
  bytes.back() ^= 0x40;
  ASSERT_TRUE(write_file_atomic(store->blob_path(b.key), bytes).ok());
  ::unlink(store->blob_path(c.key).c_str());
  auto report = store->verify().value();
  EXPECT_EQ(report.checked, 3u);
  EXPECT_EQ(report.ok, 1u);
  EXPECT_EQ(report.damaged, 1u);
  EXPECT_EQ(report.missing, 1u);
  ASSERT_EQ(report.problems.size(), 2u);
  auto again = store->verify().value();
  EXPECT_EQ(again.checked, 1u);
  EXPECT_EQ(again.ok, 1u);
}

TEST(StoreTest, ClearRemovesEverything) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_i");
  ASSERT_TRUE(store->put(r, "bytes").ok());
  ASSERT_TRUE(store->clear().ok());
  EXPECT_FALSE(store->get(r.key)->has_value());
  EXPECT_FALSE(store->get_manifest(r.input_key)->has_value());
  EXPECT_EQ(store->statistics()->bytes, 0u);
}

TEST(StoreTest, FindByKeyPrefix) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  auto r = record_for("op_j");
  ASSERT_TRUE(store->put(r, "bytes").ok());
  auto found = store->find(r.key.hex().substr(0, 8)).value();
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->op, "op_j");
  EXPECT_FALSE(store->find("ffffffffffffffffffffffffffffffff")->has_value());
  EXPECT_FALSE(store->find("not hex").ok());
}

TEST(StoreTest, IndexFromANewerSchemaIsLeftAloneWithAClearMessage) {
  testing::TempDir dir;
  auto r = record_for("op_n");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());
  sql_exec(dir / "index.sqlite", "UPDATE meta SET value = '99' WHERE name = 'schema_version'");
  auto store = Store::open(dir.path()).value();
  // What this kiln can read still hits; writes and queries say why not, and change nothing.
  EXPECT_TRUE(store->get(r.key)->has_value());
  Status put = store->put(record_for("op_o"), "other bytes");
  EXPECT_EQ(put.code(), StatusCode::kUnavailable);
  EXPECT_NE(put.message().find("schema version 99"), std::string::npos) << put.message();
  EXPECT_EQ(store->statistics().status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(std::filesystem::exists(store->blob_path(record_for("op_o").key)));
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT value FROM meta WHERE name = 'schema_version'"), 99);
}

TEST(StoreTest, VersionOneIndexMigratesForward) {
  testing::TempDir dir;
  // The walking skeleton's schema, with one row.
  sql_exec(dir / "index.sqlite",
           "CREATE TABLE meta(name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
           "CREATE TABLE artifacts(key BLOB PRIMARY KEY, op TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,"
           " size INTEGER NOT NULL, stored_size INTEGER NOT NULL, content_hash BLOB NOT NULL, toolchain TEXT NOT NULL,"
           " entry_points TEXT NOT NULL, created INTEGER NOT NULL, last_used INTEGER NOT NULL,"
           " hits INTEGER NOT NULL DEFAULT 0, compile_ms REAL NOT NULL, log TEXT NOT NULL) WITHOUT ROWID;"
           "CREATE TABLE manifests(input_key BLOB PRIMARY KEY, op TEXT NOT NULL, body BLOB NOT NULL,"
           " created INTEGER NOT NULL) WITHOUT ROWID;"
           "INSERT INTO meta VALUES('schema_version', '1');"
           "INSERT INTO artifacts VALUES(x'00112233445566778899aabbccddeeff', 'old_op', 'cpu:x86-64', 'host-so', 10, 58,"
           " x'00', 't', 'old_op:8', 1, 1, 4, 1.0, '');");
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto stats = (*store)->statistics().value();
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT value FROM meta WHERE name = 'schema_version'"), 4);
  EXPECT_EQ(stats.artifacts, 1u);
  EXPECT_EQ(stats.bytes, 58u);
  auto listed = (*store)->list("old_op").value();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].hits, 4u);
}

// Version 2 kept header manifests in a table: they become files, which lookups read.
TEST(StoreTest, VersionTwoManifestsMoveToFiles) {
  testing::TempDir dir;
  auto r = record_for("op_v2");
  {
    auto store = Store::open(dir.path()).value();
    ASSERT_TRUE(store->put(r, "bytes").ok());
  }
  // As version 2 left it: the manifest in the index, no file, none of version 4's columns.
  std::filesystem::remove_all(dir / "manifests");
  sql_exec(dir / "index.sqlite",
           "CREATE TABLE manifests(input_key BLOB PRIMARY KEY, op TEXT NOT NULL, body BLOB NOT NULL, created INTEGER NOT NULL)"
           " WITHOUT ROWID; INSERT INTO manifests VALUES(x'" + r.input_key.hex() + "', 'op_v2', CAST('" + r.manifest +
               "' AS BLOB), 1); UPDATE meta SET value = '2' WHERE name = 'schema_version';"
               "ALTER TABLE artifacts DROP COLUMN extra_size; ALTER TABLE artifacts DROP COLUMN compile_cpu_ms; DROP TABLE folded;");
  auto store = Store::open(dir.path()).value();
  EXPECT_FALSE(store->get_manifest(r.input_key)->has_value());  // not migrated before the index is opened
  ASSERT_TRUE(store->statistics().ok());
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT value FROM meta WHERE name = 'schema_version'"), 4);
  EXPECT_EQ(sql_int(dir / "index.sqlite", "SELECT count(*) FROM sqlite_master WHERE name = 'manifests'"), 0);
  EXPECT_EQ(**store->get_manifest(r.input_key), r.manifest);
}

TEST(StoreTest, CorruptIndexIsSetAsideAndRebuiltFromTheBlobs) {
  testing::TempDir dir;
  auto a = record_for("op_k"), b = record_for("op_l");
  {
    auto store = Store::open(dir.path()).value();
    ASSERT_TRUE(store->put(a, "content a").ok());
    ASSERT_TRUE(store->put(b, "content b").ok());
  }
  ::unlink((dir / "index.sqlite-wal").c_str());
  ::unlink((dir / "index.sqlite-shm").c_str());
  std::ofstream(dir / "index.sqlite", std::ios::trunc) << "this is not a database, it was overwritten";
  std::filesystem::remove_all(dir / "manifests");  // gone too: the blobs carry them
  auto store = Store::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().message();
  ASSERT_TRUE((*store)->statistics().ok());  // the first use of the index finds it corrupt
  EXPECT_NE((*store)->notice().find("set aside"), std::string::npos) << (*store)->notice();
  EXPECT_NE((*store)->notice().find("rebuilt from 2 blobs"), std::string::npos) << (*store)->notice();
  auto hit = (*store)->get(a.key);
  ASSERT_TRUE(hit.ok() && hit->has_value());
  EXPECT_EQ((*hit)->bytes, "content a");
  EXPECT_EQ((*hit)->record.entry_points, "op_k:8");
  EXPECT_EQ(**(*store)->get_manifest(b.input_key), b.manifest);  // direct lookups work again
  size_t aside = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    aside += e.path().filename().string().rfind("index.sqlite.corrupt-", 0) == 0;
  EXPECT_EQ(aside, 1u);
}

TEST(StoreTest, RecordEncodingRoundTrips) {
  auto r = record_for("op_m");
  r.log = "line 1\nline 2\twith tab";
  r.size = 77;
  r.created = 1234;
  auto back = decode_record(encode_record(r)).value();
  EXPECT_EQ(back.key, r.key);
  EXPECT_EQ(back.input_key, r.input_key);
  EXPECT_EQ(back.log, r.log);
  EXPECT_EQ(back.manifest, r.manifest);
  EXPECT_EQ(back.size, 77u);
  EXPECT_EQ(back.created, 1234);
  std::string enc = encode_record(r);
  for (size_t n = 0; n < enc.size(); n += 5) EXPECT_FALSE(decode_record(enc.substr(0, n)).ok()) << n;
}

}  // namespace
}  // namespace kiln::cache
