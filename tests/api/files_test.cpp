// Groups of files another compiler made (Triton's kernels), kept by kiln under their caller's
// key through <kiln/kiln.h>: stored whole and handed out as real files, checked on every read (a
// damaged artifact is a miss, a damaged copy of its files is put back), one maker per key while
// the others wait (Claim), first writer wins on request, and bad input refused with the reason.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/servers.h"
#include "tests/test_util.h"

namespace {

using TempDir = kiln::testing::TempDir;
using Files = std::vector<std::pair<std::string, std::string>>;

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("KILN_CACHE_DIR", m_cache.path().c_str(), 1); }
  void TearDown() override { ::unsetenv("KILN_CACHE_DIR"); }
  kiln::Options none() {
    kiln::Options o;
    o.accelerator = "none";
    return o;
  }
  TempDir m_cache;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void spit(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }

const Files k_group = {{"k.source", "def k(): ..."}, {"k.cubin", std::string("\x7f" "ELF\0\1\2", 7)}, {"k.json", "{\"name\": \"k\"}"}};

// What a group's row says, each field named (the log left empty).
kiln::ArtifactInfo info(std::string label, std::string target, std::string toolchain = "", double compile_ms = 0) {
  kiln::ArtifactInfo i;
  i.label = std::move(label);
  i.target = std::move(target);
  i.toolchain = std::move(toolchain);
  i.compile_ms = compile_ms;
  return i;
}

TEST_F(FilesTest, AGroupIsStoredWholeAndHandedOutAsItsFiles) {
  kiln::Context ctx(none());
  EXPECT_FALSE(ctx.find_files("triton-group", "key 1").has_value());
  kiln::FileGroup stored = ctx.store_files("triton-group", "key 1", k_group, info("k", "cuda:sm_90", "triton 3.9.0", 120));
  EXPECT_EQ(stored.cache_source, "stored");
  auto found = ctx.find_files("triton-group", "key 1");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->cache_source, "disk");
  EXPECT_EQ(found->key, stored.key);
  ASSERT_EQ(found->files.size(), k_group.size());
  for (size_t i = 0; i < k_group.size(); ++i) {
    EXPECT_EQ(found->files[i].first, k_group[i].first);
    EXPECT_EQ(found->files[i].second, found->folder + "/" + k_group[i].first);
    EXPECT_EQ(slurp(found->files[i].second), k_group[i].second);
  }
  // Another kind, or another key, is another artifact.
  EXPECT_FALSE(ctx.find_files("triton-file", "key 1").has_value());
  EXPECT_FALSE(ctx.find_files("triton-group", "key 2").has_value());
}

TEST_F(FilesTest, ADamagedArtifactIsAMissAndADamagedCopyOfItsFilesIsPutBack) {
  kiln::Context ctx(none());
  kiln::FileGroup stored = ctx.store_files("triton-group", "k", k_group);
  spit(stored.files[1].second, "garbage");
  std::filesystem::remove(stored.files[2].second);
  auto found = ctx.find_files("triton-group", "k");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(slurp(found->files[1].second), k_group[1].second);
  EXPECT_EQ(slurp(found->files[2].second), k_group[2].second);
  // The blob itself: one byte flipped.
  std::string blob = m_cache.path() + "/blobs/" + stored.key.substr(0, 2) + "/" + stored.key + ".blob";
  std::string bytes = slurp(blob);
  bytes[bytes.size() / 2] ^= 0x5a;
  spit(blob, bytes);
  EXPECT_FALSE(ctx.find_files("triton-group", "k").has_value());
}

TEST_F(FilesTest, OneProcessMakesAKeyWhileTheOthersWaitAndAReleasedClaimPassesItOn) {
  kiln::Context ctx(none());
  kiln::FilesOrClaim mine = ctx.find_or_claim_files("triton-group", "busy");
  ASSERT_FALSE(mine.found.has_value());
  ASSERT_TRUE(mine.claim && mine.claim->held());
  // A second Context is another "process" for the lock (its own descriptor of the lock file).
  std::atomic<bool> done{false};
  std::optional<kiln::FileGroup> theirs;
  std::thread waiter([&] {
    kiln::Context other(none());
    kiln::FilesOrClaim got = other.find_or_claim_files("triton-group", "busy");
    theirs = got.found;
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(done.load()) << "the waiter did not wait for the claim";
  ctx.store_files("triton-group", "busy", k_group, {}, mine.claim.get());
  EXPECT_FALSE(mine.claim->held());
  waiter.join();
  ASSERT_TRUE(theirs.has_value());
  EXPECT_EQ(slurp(theirs->files[0].second), k_group[0].second);

  // A make that failed: release() lets the next one claim it.
  kiln::FilesOrClaim failed = ctx.find_or_claim_files("triton-group", "fails");
  ASSERT_TRUE(failed.claim && failed.claim->held());
  failed.claim->release();
  kiln::Context other(none());
  kiln::FilesOrClaim next = other.find_or_claim_files("triton-group", "fails");
  EXPECT_TRUE(next.claim && next.claim->held());
}

TEST_F(FilesTest, AClaimThatOutlivesItsContextStillLetsItsLeaseGo) {
  if (kiln::testing::RedisServer::binary().empty()) GTEST_SKIP() << "redis-server is not installed (scripts/setup installs it)";
  TempDir dir;
  kiln::testing::RedisServer redis(dir.path());
  ::setenv("KILN_REMOTE_CACHE", redis.url().c_str(), 1);
  ::setenv("KILN_REMOTE_UNSIGNED_OK", "1", 1);
  std::unique_ptr<kiln::Claim> claim;
  {
    kiln::Context ctx(none());
    claim = ctx.find_or_claim_files("triton-group", "outlived").claim;
    ASSERT_TRUE(claim && claim->held());
  }  // the Context goes first, as Python's may at exit; the claim's lease is on the Redis tier
  claim.reset();  // used to touch the tier's freed endpoint
  // Another node (its own cache folder) is not kept waiting on a lease nobody holds.
  TempDir other_cache;
  ::setenv("KILN_CACHE_DIR", other_cache.path().c_str(), 1);
  auto start = std::chrono::steady_clock::now();
  kiln::Context other(none());
  kiln::FilesOrClaim next = other.find_or_claim_files("triton-group", "outlived");
  EXPECT_TRUE(next.claim && next.claim->held());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ::unsetenv("KILN_REMOTE_CACHE");
  ::unsetenv("KILN_REMOTE_UNSIGNED_OK");
}

TEST_F(FilesTest, TheFirstWriterWinsWhenAsked) {
  kiln::Context ctx(none());
  Files first = {{"f.autotune.json", "rank 0"}}, second = {{"f.autotune.json", "rank 1"}};
  EXPECT_EQ(ctx.store_files("triton-file", "t", first, {}, nullptr, true).cache_source, "stored");
  kiln::FileGroup kept = ctx.store_files("triton-file", "t", second, {}, nullptr, true);
  EXPECT_EQ(kept.cache_source, "disk");
  EXPECT_EQ(slurp(kept.files[0].second), "rank 0");
  // Without keep_first a store replaces.
  EXPECT_EQ(slurp(ctx.store_files("triton-file", "t", second).files[0].second), "rank 1");
}

TEST_F(FilesTest, ListingAKindGivesEachOfItsGroupsCheckedAndLeavesOutADamagedOne) {
  kiln::Context ctx(none());
  EXPECT_TRUE(ctx.list_files("triton-record").empty());
  kiln::FileGroup a = ctx.store_files("triton-record", "a", {{"record.json", "{\"a\": 1}"}}, info("k", "cuda:sm_90"));
  kiln::FileGroup b = ctx.store_files("triton-record", "b", {{"record.json", "{\"b\": 2}"}}, info("k", "cuda:sm_80"));
  ctx.store_files("triton-group", "a", k_group);  // another kind: not listed
  std::vector<kiln::FileGroup> listed = ctx.list_files("triton-record");
  ASSERT_EQ(listed.size(), 2u);
  std::set<std::string> contents;
  for (const kiln::FileGroup& g : listed) {
    ASSERT_EQ(g.files.size(), 1u);
    EXPECT_EQ(g.files[0].first, "record.json");
    contents.insert(slurp(g.files[0].second));
  }
  EXPECT_EQ(contents, (std::set<std::string>{"{\"a\": 1}", "{\"b\": 2}"}));
  // One damaged: left out of the listing (and removed), the other still listed.
  std::string blob = m_cache.path() + "/blobs/" + a.key.substr(0, 2) + "/" + a.key + ".blob";
  std::string bytes = slurp(blob);
  bytes[bytes.size() / 2] ^= 0x5a;
  spit(blob, bytes);
  listed = ctx.list_files("triton-record");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].key, b.key);
  EXPECT_THROW(ctx.list_files("Not A Kind"), kiln::Error);
}

TEST_F(FilesTest, BadKindsKeysAndNamesAreRefusedWithTheReason) {
  kiln::Context ctx(none());
  auto code_of = [&](auto&& call) {
    try {
      call();
    } catch (const kiln::Error& e) {
      return e.code() + ": " + e.what();
    }
    return std::string("nothing thrown");
  };
  EXPECT_EQ(code_of([&] { ctx.find_files("Triton Group", "k"); }).rfind("invalid_argument: artifact kind 'Triton Group'", 0), 0u);
  EXPECT_NE(code_of([&] { ctx.store_files("cubin", "k", k_group); }).find("one of kiln's own"), std::string::npos);
  EXPECT_NE(code_of([&] { ctx.find_files("triton-group", ""); }).find("empty key"), std::string::npos);
  EXPECT_NE(code_of([&] { ctx.store_files("triton-group", "k", {{"../x", ""}}); }).find("not a plain file name"), std::string::npos);
  EXPECT_NE(code_of([&] { ctx.store_files("triton-group", "k", {{"a", ""}, {"a", ""}}); }).find("appears twice"), std::string::npos);
}

}  // namespace

// Every folder the C++ API makes for a new cache (and above it) is private: the cache, its
// blobs, manifests, locks, counter pages, and the folders a group's files are handed out in.
TEST_F(FilesTest, EveryFolderTheApiMakesIsPrivate) {
  TempDir top;
  kiln::Options o = none();
  o.cache_dir = top.path() + "/new/deeper/cache";
  kiln::Context ctx(o);
  ASSERT_EQ(ctx.cache_dir(), o.cache_dir);
  auto got = ctx.find_or_claim_files("triton-group", "private");
  ASSERT_FALSE(got.found.has_value());
  kiln::FileGroup stored = ctx.store_files("triton-group", "private", k_group, {}, got.claim.get());
  ASSERT_TRUE(std::filesystem::exists(stored.folder));
  std::vector<std::string> open;
  for (auto& e : std::filesystem::recursive_directory_iterator(top.path() + "/new"))
    if (e.is_directory() && (e.status().permissions() & std::filesystem::perms::all) != std::filesystem::perms::owner_all)
      open.push_back(e.path().string());
  EXPECT_TRUE(open.empty()) << open.front();
  EXPECT_EQ(std::filesystem::status(top.path() + "/new").permissions() & std::filesystem::perms::all, std::filesystem::perms::owner_all);
  EXPECT_TRUE(std::filesystem::exists(o.cache_dir + "/locks"));
  EXPECT_TRUE(std::filesystem::exists(o.cache_dir + "/counters"));
}
