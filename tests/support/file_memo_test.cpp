// The file memo: values derived from files, trusted across processes while the files' stamps
// hold, and never for a file that changed or has not settled.
#include "support/file_memo.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "support/cuda_toolkit.h"
#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

class FileMemoTest : public ::testing::Test {
 protected:
  // Files must be two seconds old before the memo trusts them: made once for the suite.
  static void SetUpTestSuite() {
    s_dir = new testing::TempDir;
    s_dir->write("a.h", "int a;\n");
    s_dir->write("tree/x.h", "x\n");
    s_dir->write("tree/sub/y.h", "y\n");
    // More files than memo_files_hash does on one thread, in 30 folders, one reached through a link.
    for (int d = 0; d < k_many_folders; ++d)
      for (int f = 0; f < k_many_per_folder; ++f) s_dir->write(many_rel(d, f), "// " + many_rel(d, f) + "\n");
    std::filesystem::create_directory_symlink(*s_dir / "many/d0", *s_dir / "linked");
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  }
  static void TearDownTestSuite() { delete s_dir; }
  void SetUp() override { FileMemo::instance().reset_for_testing(); }
  void TearDown() override { FileMemo::instance().reset_for_testing(); }

  static std::string memo_file() { return *s_dir / "memo"; }
  static constexpr int k_many_folders = 30, k_many_per_folder = 50;
  static std::string many_rel(int d, int f) { return "many/d" + std::to_string(d) + "/f" + std::to_string(f) + ".h"; }
  static std::vector<std::string> many_paths() {
    std::vector<std::string> out;
    for (int d = 0; d < k_many_folders; ++d)
      for (int f = 0; f < k_many_per_folder; ++f) out.push_back(*s_dir / many_rel(d, f));
    out.push_back(*s_dir / "linked/f7.h");
    return out;
  }
  static testing::TempDir* s_dir;
};
testing::TempDir* FileMemoTest::s_dir = nullptr;

TEST_F(FileMemoTest, ASettledFileIsRememberedByTheNextProcess) {
  FileMemo& memo = FileMemo::instance();
  ASSERT_TRUE(memo.attach(memo_file()).ok());
  std::string path = *s_dir / "a.h";
  Hash128 hash = memo_file_hash(path).value();
  EXPECT_EQ(hash, xxh3_128("int a;\n"));
  ASSERT_TRUE(memo.save().ok());
  // A new process: nothing in memory, the memo file on disk.
  memo.reset_for_testing();
  ASSERT_TRUE(memo.attach(memo_file()).ok());
  auto remembered = memo.get("hash", path, file_stamp(path)->digest());
  ASSERT_TRUE(remembered.has_value());
  EXPECT_EQ(*remembered, hash.hex());
}

TEST_F(FileMemoTest, AChangedFileIsReadAgain) {
  testing::TempDir dir;
  std::string path = dir / "b.h";
  dir.write("b.h", "first\n");
  // Same size, new content: the stamp (mtime, ctime, and here the inode too) differs.
  Hash128 first = memo_file_hash(path).value();
  dir.write("b.h", "other\n");
  Hash128 second = memo_file_hash(path).value();
  EXPECT_NE(first, second);
  EXPECT_EQ(second, xxh3_128("other\n"));
}

TEST_F(FileMemoTest, AFileThatHasNotSettledIsNotRemembered) {
  testing::TempDir dir;
  dir.write("fresh.h", "fresh\n");
  ASSERT_TRUE(FileMemo::instance().attach(memo_file()).ok());
  EXPECT_EQ(memo_file_hash(dir / "fresh.h").value(), xxh3_128("fresh\n"));
  EXPECT_FALSE(FileMemo::instance().get("hash", dir / "fresh.h", file_stamp(dir / "fresh.h")->digest()).has_value());
}

TEST_F(FileMemoTest, SavingWithNothingNewWritesNothing) {
  FileMemo& memo = FileMemo::instance();
  ASSERT_TRUE(memo.attach(memo_file()).ok());
  (void)memo_file_hash(*s_dir / "a.h");
  ASSERT_TRUE(memo.save().ok());
  struct stat before{};
  ASSERT_EQ(::stat(memo_file().c_str(), &before), 0);
  (void)memo_file_hash(*s_dir / "a.h");  // remembered already: nothing new
  ASSERT_TRUE(memo.save().ok());
  struct stat after{};
  ASSERT_EQ(::stat(memo_file().c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // a save replaces the file: same inode, no save
}

TEST_F(FileMemoTest, ADamagedMemoFileIsAnEmptyMemo) {
  testing::TempDir dir;
  dir.write("memo", std::string("kind\tpath\tnot-a-hash\tvalue\n\x01\x02 garbage without newline", 48));
  FileMemo& memo = FileMemo::instance();
  ASSERT_TRUE(memo.attach(dir / "memo").ok());
  EXPECT_EQ(memo_file_hash(*s_dir / "a.h").value(), xxh3_128("int a;\n"));
  EXPECT_TRUE(memo.save().ok());
  EXPECT_NE(read_file(dir / "memo")->find(*s_dir / "a.h"), std::string::npos);
}

TEST_F(FileMemoTest, ManyFilesHashAtOnceAsEachDoesAlone) {
  std::vector<std::string> paths = many_paths();
  ASSERT_GT(paths.size(), 1024u);  // past the threshold where the stats are split across threads
  std::vector<Hash128> first = memo_files_hash(paths).value();  // read, then remembered
  ASSERT_EQ(first.size(), paths.size());
  for (size_t i = 0; i < paths.size(); i += 97) EXPECT_EQ(first[i], xxh3_128(read_file(paths[i]).value())) << paths[i];
  EXPECT_EQ(first.back(), first[7]);  // linked/f7.h is many/d0/f7.h
  EXPECT_TRUE(FileMemo::instance().get("hash", paths[1234], file_stamp(paths[1234])->digest()).has_value());
  EXPECT_EQ(memo_files_hash(paths).value(), first);  // from the memo: a stat each
}

TEST_F(FileMemoTest, ManyFilesAtOnceSeeAnEditedOneAndSayWhichIsGone) {
  testing::TempDir dir;
  std::vector<std::string> paths;
  for (int d = 0; d < 4; ++d)
    for (int f = 0; f < 300; ++f) {
      std::string rel = "d" + std::to_string(d) + "/f" + std::to_string(f) + ".h";
      dir.write(rel, "same size " + std::to_string(1000 + f) + "\n");
      paths.push_back(dir / rel);
    }
  std::vector<Hash128> first = memo_files_hash(paths).value();
  dir.write("d2/f123.h", "edit size " + std::to_string(1123) + "\n");  // same size, in place
  std::vector<Hash128> second = memo_files_hash(paths).value();
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i] == dir / "d2/f123.h") EXPECT_NE(second[i], first[i]);
    else EXPECT_EQ(second[i], first[i]) << paths[i];
  }
  ASSERT_EQ(::unlink((dir / "d3/f299.h").c_str()), 0);
  auto gone = memo_files_hash(paths);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find(dir / "d3/f299.h"), std::string::npos) << gone.status().message();
}

TEST_F(FileMemoTest, AMemoFileThatCannotBeReadIsSaidAndTheMemoStillWorks) {
  // As root every file is readable: a folder in the memo's place stands for one that is not.
  testing::TempDir dir;
  ASSERT_EQ(::mkdir((dir / "memo").c_str(), 0700), 0);
  FileMemo& memo = FileMemo::instance();
  Status st = memo.attach(dir / "memo");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot read the file memo " + dir / "memo"), std::string::npos) << st.message();
  EXPECT_EQ(memo_file_hash(*s_dir / "a.h").value(), xxh3_128("int a;\n"));
  EXPECT_TRUE(memo.get("hash", *s_dir / "a.h", file_stamp(*s_dir / "a.h")->digest()).has_value()) << "remembered in this process";
  // A missing memo is no reason to say anything.
  memo.reset_for_testing();
  EXPECT_TRUE(memo.attach(dir / "absent").ok());
}

TEST_F(FileMemoTest, AFolderDigestCoversNamesAndContentNotWhereTheFolderIs) {
  std::string tree = *s_dir / "tree";
  Hash128 digest = memo_folder_digest(tree).value();
  testing::TempDir copy;
  std::filesystem::copy(tree, copy.path(), std::filesystem::copy_options::recursive);
  EXPECT_EQ(memo_folder_digest(copy.path()).value(), digest);
  copy.write("sub/y.h", "Y\n");
  Hash128 edited = memo_folder_digest(copy.path()).value();
  EXPECT_NE(edited, digest);
  copy.write("z.h", "");
  EXPECT_NE(memo_folder_digest(copy.path()).value(), edited);
  EXPECT_EQ(memo_folder_digest(tree).value(), digest);
}

TEST_F(FileMemoTest, CudaHeadersAreFoundBesideTheLibraryAndFingerprinted) {
  testing::TempDir toolkit;
  toolkit.write("lib64/libnvrtc.so.13", "not really a library");
  toolkit.write("include/cuda_runtime.h", "// runtime\n");
  toolkit.write("include/cuda.h", "#define CUDA_VERSION 12040\n");
  toolkit.write("include/cccl/cub/cub.cuh", "// cub\n");
  auto headers = cuda_headers_near(toolkit / "lib64/libnvrtc.so.13");
  ASSERT_TRUE(headers.has_value());
  EXPECT_EQ(headers->include_dir, toolkit / "include");
  ASSERT_EQ(headers->dirs.size(), 2u);
  EXPECT_EQ(headers->dirs[1], toolkit / "include/cccl");
  EXPECT_EQ(headers->version, "12.4");
  std::string id = cuda_headers_identity(*headers).value();
  EXPECT_EQ(id.rfind("cuda-headers=12.4:", 0), 0u) << id;
  toolkit.write("include/cccl/cub/cub.cuh", "// cub, patched\n");
  EXPECT_NE(cuda_headers_identity(*headers).value(), id);
}

}  // namespace
}  // namespace kiln
