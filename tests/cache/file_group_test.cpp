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
    auto mapped = m_store->map(key).value();
    EXPECT_TRUE(mapped.has_value());
    FileViews files = decode_file_group(mapped->bytes).value();
    return materialize_file_group(m_dir.path(), key, files, m_store->blob_path(key), 120'000).value();
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
  EXPECT_EQ(hit->compile_us, 120'000);
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
  ArtifactRecord again;
  again.key = stored_again;
  again.input_key = stored_again;
  again.op = "stored again";
  again.kind = "triton-group";
  ASSERT_TRUE(m_store->put(again, encode_file_group(views_of(k_files)), Compression::kNone).ok());

  for (const Hash128& key : {rewritten, removed, evicted, stored_again}) EXPECT_FALSE(stamped(key).has_value()) << key.hex();
  expect_whole(place(rewritten));
  expect_whole(place(removed));
  expect_whole(place(stored_again));
  EXPECT_FALSE(m_store->map(evicted).value().has_value());
}

TEST_F(FileGroupTest, VerifyReadsTheFilesAStampHandsOutAndSendsADifferingFolderBackToTheWholeCheck) {
  Hash128 good = put("good"), bad = put("bad");
  place(good);
  place(bad);
  let_settle();
  place(good);
  MaterializedFiles b = place(bad);
  ASSERT_TRUE(stamped(bad).has_value());
  // What a stamp cannot see (a disk's damage under an unchanged ctime) shows here as a change
  // in place; verify must find it by reading, whatever the ctime says.
  overwrite(b.paths[0].second, "def k(): !!");
  auto report = m_store->verify().value();
  EXPECT_EQ(report.ok, 2u);
  ASSERT_EQ(report.files_differing.size(), 1u);
  EXPECT_NE(report.files_differing[0].find(bad.hex()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(b.folder + "/.kiln-checked"));
  expect_whole(place(bad));
  EXPECT_TRUE(stamped(good).has_value());  // a folder that matches keeps its stamp
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
