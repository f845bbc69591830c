// MappedFile against real files: the bytes as read_file reads them, missing and empty files,
// and a mapping that outlives the file's removal and replacement (what kiln does to blobs).
#include "support/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(MappedFileTest, ShowsTheFileAsReadFileReadsIt) {
  testing::TempDir dir;
  std::string bytes(3 * 4096 + 17, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(write_file_atomic(dir / "f", bytes).ok());
  for (bool populate : {false, true}) {
    auto mapped = MappedFile::open(dir / "f", populate);
    ASSERT_TRUE(mapped.ok()) << mapped.status().message();
    EXPECT_EQ((*mapped)->view(), bytes);
  }
}

TEST(MappedFileTest, MissingIsNotFoundAndEmptyIsEmpty) {
  testing::TempDir dir;
  auto missing = MappedFile::open(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(write_file_atomic(dir / "empty", "").ok());
  auto empty = MappedFile::open(dir / "empty", true);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE((*empty)->view().empty());
}

TEST(MappedFileTest, StaysWholeWhenTheFileIsReplacedOrRemoved) {
  testing::TempDir dir;
  ASSERT_TRUE(write_file_atomic(dir / "f", std::string(10000, 'a')).ok());
  auto mapped = MappedFile::open(dir / "f").value();
  ASSERT_TRUE(write_file_atomic(dir / "f", "b").ok());  // renamed over it, as the store writes
  EXPECT_EQ(mapped->view(), std::string(10000, 'a'));
  ASSERT_EQ(::unlink((dir / "f").c_str()), 0);  // evicted
  EXPECT_EQ(mapped->view(), std::string(10000, 'a'));
}

}  // namespace
}  // namespace kiln
