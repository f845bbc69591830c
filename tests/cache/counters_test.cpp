// The store's counters count what happened: kept in a page that outlives a killed process, folded
// into the index once each, live ones added as they stand; damage named as the index knows it;
// every byte the store keeps (a group's copies, staging folders) under its cap.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cache/counter_page.h"
#include "cache/file_group.h"
#include "cache/store.h"
#include "support/file_util.h"
#include "tests/cache/record_for.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using testing_records::record_for;

std::vector<std::string> pages(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(root + "/counters", ec))
    if (e.path().extension() == ".page") out.push_back(e.path().string());
  return out;
}

TEST(CountersTest, AKilledProcessLosesNoCounterAndAtMostASecondOfHitCounts) {
  testing::TempDir dir;
  ArtifactRecord r = record_for("op_killed");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto store = Store::open(dir.path()).value();
    for (int i = 0; i < 168; ++i) {
      store->count(Counter::kCompiles);
      store->count(Counter::kCompileWallUsSpent, 1000);
      store->count(Counter::kCompileCpuUsSpent, 700);
    }
    store->count("remote|redis://127.0.0.1:6379|hits", 4);
    (void)store->get(r.key);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    (void)store->get(r.key);  // a second on: both hits go to the journal now
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto store = Store::open(dir.path()).value();
  auto stats = store->statistics().value();
  EXPECT_EQ(stats.counters["compiles"], 168);
  EXPECT_EQ(stats.counters["compile_wall_us_spent"], 168'000);
  EXPECT_EQ(stats.counters["compile_cpu_us_spent"], 168 * 700);
  EXPECT_EQ(stats.counters["remote|redis://127.0.0.1:6379|hits"], 4);
  EXPECT_EQ(store->record(r.key).value()->hits, 2u);
  EXPECT_TRUE(pages(dir.path()).empty());  // folded, and gone
  EXPECT_EQ(store->statistics()->counters["compiles"], 168);  // once
}

TEST(CountersTest, LivePagesCountAsTheyStandAndEachPageIsFoldedOnce) {
  testing::TempDir dir;
  auto live = Store::open(dir.path()).value();
  auto reader = Store::open(dir.path()).value();
  live->count(Counter::kMisses, 3);
  EXPECT_EQ(reader->statistics()->counters["misses"], 3);
  live->count(Counter::kMisses, 2);
  EXPECT_EQ(reader->statistics()->counters["misses"], 5);
  ASSERT_EQ(pages(dir.path()).size(), 1u);
  std::string page = pages(dir.path())[0];
  std::string kept = read_file(page).value();
  live.reset();  // a process that only counted leaves its page for the next fold
  EXPECT_EQ(reader->statistics()->counters["misses"], 5);
  EXPECT_TRUE(pages(dir.path()).empty());
  // A folder that died between its commit and its unlink leaves the page behind, marked: not
  // counted again, and not taken over by a process that counts meanwhile (its counts would go).
  kept[12] = 1;  // the fold's mark, made before its commit
  std::ofstream(page, std::ios::binary) << kept;
  {
    auto counting = Store::open(dir.path()).value();
    counting->count(Counter::kMisses);
    EXPECT_EQ(pages(dir.path()).size(), 2u) << "a page of its own";
  }
  EXPECT_EQ(reader->statistics()->counters["misses"], 6);
  EXPECT_FALSE(std::filesystem::exists(page));
  // A process that wrote the index folds its own page when it closes.
  {
    auto writer = Store::open(dir.path()).value();
    writer->count(Counter::kMisses, 4);
    ASSERT_TRUE(writer->put(record_for("op_w"), "bytes").ok());
  }
  EXPECT_TRUE(pages(dir.path()).empty());
  EXPECT_EQ(reader->statistics()->counters["misses"], 10);
}

TEST(CountersTest, APageIsWhatItsProcessAddedAndTakesNoOthersLock) {
  testing::TempDir dir;
  auto page = CounterPage::create(dir / "counters").value();
  EXPECT_TRUE(page->add("hits_disk", 2));
  EXPECT_TRUE(page->add("hits_disk", 3));
  EXPECT_FALSE(page->add(std::string(k_counter_name_max + 1, 'x'), 1));
  for (int i = 0; page->add("n" + std::to_string(i), 1); ++i) ASSERT_LT(i, 64);  // full: the caller keeps the rest
  EXPECT_FALSE(AbandonedPage::take(page->path()).held());  // its process lives
  auto counters = read_counter_page(page->path()).value();
  ASSERT_FALSE(counters.empty());
  EXPECT_EQ(counters[0], std::make_pair(std::string("hits_disk"), int64_t{5}));
  std::string path = page->path();
  page.reset();
  EXPECT_TRUE(AbandonedPage::take(path).held());
  EXPECT_EQ(read_counter_page(dir / "nothing").status().code(), StatusCode::kNotFound);
  dir.write("counters/bad.page", "short");
  EXPECT_EQ(read_counter_page(dir / "counters/bad.page").status().code(), StatusCode::kDataLoss);
}

TEST(CountersTest, ProcessesThatOnlyHitTakeOverAnAbandonedPageRatherThanMakeOne) {
  testing::TempDir dir;
  ArtifactRecord r = record_for("op_hit_often");
  ASSERT_TRUE(Store::open(dir.path()).value()->put(r, "bytes").ok());  // a writer: its page folded and gone
  ASSERT_TRUE(pages(dir.path()).empty());
  // A launcher run once per compile: each process hits and counts, then ends.
  for (int i = 0; i < 50; ++i) {
    auto hitter = Store::open(dir.path()).value();
    auto hit = hitter->get(r.key);
    ASSERT_TRUE(hit.ok() && hit->has_value());
    hitter->count(Counter::kCompiles);
    hitter->count("cc|not_cached|link", 1);
  }
  EXPECT_EQ(pages(dir.path()).size(), 1u) << "one page, taken over 49 times";
  {
    // Two at once: the second cannot take the page the first holds.
    auto a = Store::open(dir.path()).value();
    auto b = Store::open(dir.path()).value();
    a->count(Counter::kCompiles);
    b->count(Counter::kCompiles);
    EXPECT_EQ(pages(dir.path()).size(), 2u);
  }
  auto reader = Store::open(dir.path()).value();
  EXPECT_EQ(reader->statistics()->counters["compiles"], 52);  // statistics fold the abandoned pages
  EXPECT_TRUE(pages(dir.path()).empty());
  EXPECT_EQ(reader->statistics()->counters["cc|not_cached|link"], 50) << "each count folded once";
  EXPECT_EQ(reader->statistics()->counters["compiles"], 52);
}

TEST(CountersTest, APageThatIsNotAPageOfThisUsersIsNeverTakenOver) {
  testing::TempDir dir;
  std::string folder = dir / "counters";
  std::string abandoned;
  {
    auto page = CounterPage::create(folder).value();
    page->add("compiles", 7);
    abandoned = page->name();
  }
  // A link to it, a page of the wrong size and one whose header is not a page's: each left alone.
  ASSERT_EQ(::symlink((folder + "/" + abandoned).c_str(), (folder + "/link.page").c_str()), 0);
  EXPECT_EQ(CounterPage::adopt(folder, "link.page"), nullptr);
  dir.write("counters/short.page", "short");
  EXPECT_EQ(CounterPage::adopt(folder, "short.page"), nullptr);
  dir.write("counters/zero.page", std::string(64 * 64, '\0'));
  EXPECT_EQ(CounterPage::adopt(folder, "zero.page"), nullptr);
  ASSERT_EQ(::link((folder + "/" + abandoned).c_str(), (folder + "/second-name.page").c_str()), 0);
  EXPECT_EQ(CounterPage::adopt(folder, abandoned), nullptr) << "a page with two names would be folded twice";
  ASSERT_EQ(::unlink((folder + "/second-name.page").c_str()), 0);
  if (::geteuid() == 0) {  // another user's page (nobody's): only root can make one here
    ASSERT_EQ(::chown((folder + "/" + abandoned).c_str(), 65534, 65534), 0);
    EXPECT_EQ(CounterPage::adopt(folder, abandoned), nullptr);
    ASSERT_EQ(::chown((folder + "/" + abandoned).c_str(), 0, 0), 0);
  }
  // Its own abandoned page is taken over, its counters kept and added to.
  auto taken = CounterPage::adopt(folder, abandoned);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(CounterPage::adopt(folder, abandoned), nullptr) << "held now";
  taken->add("compiles", 1);
  taken->add("misses", 2);
  auto counters = read_counter_page(folder + "/" + abandoned).value();
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[0], std::make_pair(std::string("compiles"), int64_t{8}));
  EXPECT_EQ(counters[1], std::make_pair(std::string("misses"), int64_t{2}));
  taken.reset();
  ASSERT_TRUE(mark_counter_page_folded(folder + "/" + abandoned));
  EXPECT_EQ(CounterPage::adopt(folder, abandoned), nullptr) << "a page a fold has counted";
}

TEST(CountersTest, DamageIsReportedWithTheKernelAndTargetTheIndexKnows) {
  testing::TempDir dir;
  std::vector<std::string> damage;
  StoreOptions options;
  options.report_damage = [&](const std::string& m) { damage.push_back(m); };
  auto store = Store::open(dir.path(), options).value();
  ArtifactRecord r = record_for("matmul_kernel");
  r.key = r.input_key = xxh3_128("a Triton group");
  r.manifest.clear();
  r.kind = "triton-group";
  r.target = "cuda:sm_80";
  ASSERT_TRUE(store->put(r, encode_file_group(views_of({{"matmul_kernel.cubin", "cubin"}})), Compression::kNone).ok());
  // The metadata section itself damaged: the blob cannot say what it is, the index can.
  std::string bytes = read_file(store->blob_path(r.key)).value();
  bytes[90] ^= 0x7f;
  ASSERT_TRUE(write_file_atomic(store->blob_path(r.key), bytes).ok());
  EXPECT_FALSE(store->map(r.key).value().has_value());
  ASSERT_EQ(damage.size(), 1u);
  EXPECT_NE(damage[0].find("(triton-group matmul_kernel, cuda:sm_80)"), std::string::npos) << damage[0];
  EXPECT_EQ(damage[0].find("unknown op"), std::string::npos) << damage[0];
  EXPECT_EQ(store->statistics()->counters["repairs"], 1);
}

TEST(CountersTest, AGroupsCopiesCountAgainstTheCapAndGoWithItsArtifact) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  ArtifactRecord r = record_for("add_kernel");
  r.key = r.input_key = xxh3_128("add group");
  r.manifest.clear();
  r.kind = "triton-group";
  NamedFiles files = {{"add_kernel.cubin", std::string(40'000, 'c')}, {"add_kernel.ptx", std::string(30'000, 'p')}};
  std::string bytes = encode_file_group(views_of(files));
  ASSERT_TRUE(store->put(r, bytes, Compression::kNone).ok());
  auto placed = materialize_file_group(dir.path(), r.key, views_of(files), store->blob_path(r.key), std::nullopt, {}).value();
  auto stats = store->statistics().value();
  uint64_t copies = placed_size_of(bytes).value();
  EXPECT_GE(copies, 70'000u);
  EXPECT_LE(copies, 70'000u + 1024);
  EXPECT_EQ(stats.bytes, stats.blob_bytes + copies);
  EXPECT_GT(stats.blob_bytes, 70'000u);
  // A compile's staging folder counts too, among the store's other files.
  dir.write("files/staging/triton-x.tmp.1/add_kernel.llir", std::string(100'000, 'l'));
  EXPECT_GE(store->statistics()->other_bytes, stats.other_bytes + 100'000);
  // Evicted whole: blob and copies.
  auto gc = store->gc(0).value();
  EXPECT_EQ(gc.evicted, 1u);
  EXPECT_EQ(gc.bytes_after, 0u);
  EXPECT_FALSE(std::filesystem::exists(placed.folder));
  EXPECT_FALSE(std::filesystem::exists(store->blob_path(r.key)));
  EXPECT_TRUE(std::filesystem::exists(dir / "files/staging/triton-x.tmp.1"));  // a compile under way keeps it
}

TEST(CountersTest, ChunksKeptForARemoteFetchCountAgainstTheCapAndGoOnceStale) {
  testing::TempDir dir;
  auto store = Store::open(dir.path()).value();
  uint64_t before = store->statistics()->other_bytes;
  dir.write("remote-chunks/fresh", std::string(60'000, 'f'));
  dir.write("remote-chunks/stale", std::string(50'000, 's'));
  EXPECT_GE(store->statistics()->other_bytes, before + 110'000);
  // A fetch resumes within minutes if at all: past the grace period a kept chunk is debris.
  auto stale = std::filesystem::file_time_type::clock::now() - std::chrono::hours(2);
  std::filesystem::last_write_time(dir / "remote-chunks/stale", stale);
  auto gc = store->gc(1ull << 40).value();
  EXPECT_GE(gc.temporaries_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(dir / "remote-chunks/stale"));
  EXPECT_TRUE(std::filesystem::exists(dir / "remote-chunks/fresh"));
}

TEST(CountersTest, TheCpuTimeRidesInTheRecordWhereAnOlderReaderStillReadsTheWallTime) {
  ArtifactRecord r = record_for("op_cpu");
  r.compile_ms = 12.5;
  r.compile_cpu_ms = 30.25;
  std::string enc = encode_record(r);
  auto back = decode_record(enc).value();
  EXPECT_DOUBLE_EQ(back.compile_ms, 12.5);
  EXPECT_DOUBLE_EQ(back.compile_cpu_ms, 30.25);
  // Version 1's reader parsed the field with strtod and nothing more.
  size_t at = enc.find("12.500000");
  ASSERT_NE(at, std::string::npos);
  EXPECT_DOUBLE_EQ(std::strtod(enc.c_str() + at, nullptr), 12.5);
  r.compile_cpu_ms = 0;
  EXPECT_EQ(encode_record(r).find(" cpu="), std::string::npos);  // not measured: the field as version 1 wrote it
}

}  // namespace
}  // namespace kiln::cache
