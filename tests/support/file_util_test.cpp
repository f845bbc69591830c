#include "support/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(FileUtilTest, AtomicWriteReplacesWholeFileAndLeavesNoTemporary) {
  testing::TempDir dir;
  ASSERT_TRUE(write_file_atomic(dir / "f", "first").ok());
  ASSERT_TRUE(write_file_atomic(dir / "f", "second, longer").ok());
  EXPECT_EQ(read_file(dir / "f").value(), "second, longer");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(FileUtilTest, MissingFileIsNotFound) {
  testing::TempDir dir;
  auto r = read_file(dir / "nope");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(FileUtilTest, MakeDirsCreatesPrivateFolders) {
  testing::TempDir dir;
  ASSERT_TRUE(make_dirs(dir / "a/b/c").ok());
  struct stat st{};
  ASSERT_EQ(::stat((dir / "a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(FileUtilTest, PathContainment) {
  EXPECT_TRUE(path_is_within("/a/b/c", "/a/b"));
  EXPECT_TRUE(path_is_within("/a/b", "/a/b/"));
  EXPECT_FALSE(path_is_within("/a/bc", "/a/b"));
  EXPECT_FALSE(path_is_within("/a", "/a/b"));
  EXPECT_EQ(relative_to("/a/b/c/d.h", "/a/b"), "c/d.h");
  EXPECT_EQ(absolute_path("/x/./y/../z"), "/x/z");
  EXPECT_EQ(absolute_path("/x//y/"), "/x/y");
  EXPECT_EQ(absolute_path("/x/../.."), "/");
  EXPECT_EQ(absolute_path("/"), "/");
  EXPECT_EQ(absolute_path("y/z"), absolute_path(".") + "/y/z");
}

}  // namespace
}  // namespace kiln
