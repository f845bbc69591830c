// A group of files handed out from a real store: the stamp that lets a hit skip reading the
// blob and the files is written only once they have settled, and every change made after it
// (a file rewritten in place with the same size, a file removed, the blob evicted or stored
// again) sends the next hit back to the whole check, which puts the files back. `verify`
// reads the folders a stamp would hand out.
#include "cache/file_group.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cache/store.h"
#include "support/length_prefixed.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

const NamedFiles k_files = {{"k.source", "def k(): ..."}, {"k.cubin", std::string("\x7f" "ELF\0\1\2", 7)}, {"k.json", "{\"name\": \"k\"}"}};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Rewrites a file in place (same inode), as a stray writer would.
void overwrite(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }

// Files older than the stamp's settling time (a second; file_group.cpp says why).
void let_settle() { std::this_thread::sleep_for(std::chrono::milliseconds(1100)); }

class FileGroupTest : public ::testing::Test {
 protected:
  void SetUp() override { m_store = Store::open(m_dir.path()).value(); }

  Hash128 put(const std::string& name) {
    ArtifactRecord r;
    r.key = xxh3_128(name);
    r.input_key = r.key;
    r.op = name;
    r.kind = "triton-group";
    r.compile_ms = 120;
    EXPECT_TRUE(m_store->put(r, encode_file_group(views_of(k_files)), Compression::kNone).ok());
    return r.key;
  }

  // What a hit that reads the blob does: map it (checked), then put its files in place.
  MaterializedFiles place(const Hash128& key) {
    std::optional<FileIdentity> blob_read = file_identity(m_store->blob_path(key));
    auto mapped = m_store->map(key).value();
    EXPECT_TRUE(mapped.has_value());
    FileViews files = decode_file_group(mapped->bytes).value();
    return materialize_file_group(m_dir.path(), key, files, m_store->blob_path(key), blob_read, CompileCost{120'000, 90'000}).value();
  }

  // A stamp written by hand over the folder as it is now: what a disk's damage under an
  // unchanged ctime, or a forger, leaves (no real component can be made to show it on demand).
  void forge_stamp(const MaterializedFiles& placed, const Hash128& key, const std::vector<std::string>& names) {
    std::string out = "kiln-files-checked 2\n";
    put_count(out, 0);
    put_count(out, 0);
    put_count(out, names.size());
    FileIdentity blob = file_identity(m_store->blob_path(key)).value();
    put_field(out, std::string_view(reinterpret_cast<const char*>(&blob), sizeof blob));
    for (const std::string& name : names) {
      put_field(out, name);
      std::optional<FileIdentity> id = file_identity(placed.folder + "/" + name);
      FileIdentity none;
      put_field(out, std::string_view(reinterpret_cast<const char*>(id ? &*id : &none), sizeof none));
    }
    std::ofstream(placed.folder + "/.kiln-checked", std::ios::binary | std::ios::trunc) << out;
  }

  std::optional<PlacedFiles> stamped(const Hash128& key) { return placed_file_group(m_dir.path(), key, m_store->blob_path(key)); }

  void expect_whole(const MaterializedFiles& placed) {
    ASSERT_EQ(placed.paths.size(), k_files.size());
    for (size_t i = 0; i < k_files.size(); ++i) {
      EXPECT_EQ(placed.paths[i].first, k_files[i].first);
      EXPECT_EQ(placed.paths[i].second, placed.folder + "/" + k_files[i].first);
      EXPECT_EQ(slurp(placed.paths[i].second), k_files[i].second);
    }
  }

  testing::TempDir m_dir;
  std::unique_ptr<Store> m_store;
};

TEST_F(FileGroupTest, AFolderIsHandedOutOnItsStampOnlyOnceItsFilesHaveSettled) {
  Hash128 key = put("k");
  MaterializedFiles first = place(key);
  expect_whole(first);
  // Just written: a write in the same clock tick would not move a ctime, so no stamp yet.
  EXPECT_FALSE(std::filesystem::exists(first.folder + "/.kiln-checked"));
  EXPECT_FALSE(place(key).paths.empty());
  EXPECT_FALSE(stamped(key).has_value());
  let_settle();
  expect_whole(place(key));
  ASSERT_TRUE(std::filesystem::exists(first.folder + "/.kiln-checked"));
  auto hit = stamped(key);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->files.folder, first.folder);
  EXPECT_EQ(hit->cost.wall_us, 120'000);
  EXPECT_EQ(hit->cost.cpu_us, 90'000);
  expect_whole(hit->files);
}

TEST_F(FileGroupTest, AnyChangeAfterTheStampSendsTheHitBackToTheWholeCheck) {
  Hash128 rewritten = put("rewritten"), removed = put("removed"), evicted = put("evicted"), stored_again = put("stored again");
  for (const Hash128& key : {rewritten, removed, evicted, stored_again}) place(key);
  let_settle();
  for (const Hash128& key : {rewritten, removed, evicted, stored_again}) {
    place(key);  // the hit that finds them settled stamps them
    ASSERT_TRUE(stamped(key).has_value());
  }
  MaterializedFiles r = stamped(rewritten)->files;
  overwrite(r.paths[1].second, "garbage");  // the same size as the cubin it replaces: only its ctime says so
  ASSERT_EQ(std::filesystem::file_size(r.paths[1].second), k_files[1].second.size());
  std::filesystem::remove(stamped(removed)->files.paths[2].second);
  ::unlink(m_store->blob_path(evicted).c_str());
  // Stored again with the same bytes: a new blob file, which the stamp did not see.
  ASSERT_EQ(put("stored again"), stored_again);

  for (const Hash128& key : {rewritten, removed, evicted, stored_again}) EXPECT_FALSE(stamped(key).has_value()) << key.hex();
  expect_whole(place(rewritten));
  expect_whole(place(removed));
  expect_whole(place(stored_again));
  EXPECT_FALSE(m_store->map(evicted).value().has_value());
}

TEST_F(FileGroupTest, VerifyReadsTheFilesAStampHandsOutAndRemovesAFolderThatDiffers) {
  Hash128 good = put("good"), bad = put("bad"), unstamped = put("unstamped");
  place(good);
  place(bad);
  MaterializedFiles u = place(unstamped);
  let_settle();
  place(good);
  MaterializedFiles b = place(bad);
  ASSERT_TRUE(stamped(bad).has_value());
  // Damage a stamp cannot see: the file changed and the stamp says it is as it was.
  overwrite(b.paths[0].second, "def k(): !!");
  forge_stamp(b, bad, {"k.source", "k.cubin", "k.json"});
  ASSERT_TRUE(stamped(bad).has_value());
  overwrite(u.paths[0].second, "def k(): ??");  // no stamp: its next hit compares it anyway
  auto report = m_store->verify().value();
  EXPECT_EQ(report.ok, 3u);
  ASSERT_EQ(report.files_differing.size(), 1u);
  EXPECT_NE(report.files_differing[0].find(bad.hex()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(b.folder));  // removed; the next hit puts it back
  expect_whole(place(bad));
  expect_whole(place(unstamped));
  EXPECT_TRUE(stamped(good).has_value());  // a folder that matches keeps its stamp
}

TEST_F(FileGroupTest, AStampNamingAFileOutsideItsFolderOrABlobReadBeforeItWasStoredAgainIsRefused) {
  Hash128 key = put("k"), other = put("other");
  MaterializedFiles placed = place(key);
  place(other);
  let_settle();
  place(key);
  ASSERT_TRUE(stamped(key).has_value());
  // A real file outside the folder, its identity in the stamp: only the name check refuses it.
  std::ofstream(m_dir.path() + "/outside") << "not the group's";
  ASSERT_TRUE(std::filesystem::exists(placed.folder + "/../../../outside"));
  forge_stamp(placed, key, {"k.source", "../../../outside", "k.json"});
  EXPECT_FALSE(stamped(key).has_value());
  forge_stamp(placed, key, {"k.source", "k.cubin", "k.json"});
  EXPECT_TRUE(stamped(key).has_value());  // the forger's stamp of the real names is well formed
  forge_stamp(placed, key, {"k.source", "", "k.json"});
  EXPECT_FALSE(stamped(key).has_value());
  // The blob a hit read, then stored again by another process before the stamp: no stamp.
  std::optional<FileIdentity> read = file_identity(m_store->blob_path(other));
  ASSERT_EQ(put("other"), other);
  let_settle();
  FileViews files = views_of(k_files);
  materialize_file_group(m_dir.path(), other, files, m_store->blob_path(other), read, CompileCost{}).value();
  EXPECT_FALSE(stamped(other).has_value());
  place(other);  // read afresh: stamped
  EXPECT_TRUE(stamped(other).has_value());
}

TEST(FileGroupNamesTest, NamesStartingWithDotKilnAreKilnsOwn) {
  FileViews files = {{".kiln-checked", "x"}};
  Status st = check_file_names(files);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("reserved"), std::string::npos) << st.message();
  EXPECT_TRUE(check_file_names({{".kiln", "x"}, {"a.kilnx", "y"}}).ok());
}

}  // namespace
}  // namespace kiln::cache
