// Writers killed with SIGKILL at random instants, many times, never leave an entry that a
// later lookup returns wrong: every listed entry reads back whole, with the right bytes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "cache/store.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

// The content stored under a key is a function of the key, so a reader can check it.
std::string content_for(const Hash128& key) {
  std::mt19937_64 rng(key.bytes[0] | uint64_t{key.bytes[1]} << 8 | uint64_t{key.bytes[2]} << 16);
  std::string s(20000 + rng() % 180000, '\0');
  for (size_t i = 0; i < s.size(); i += 8) s[i] = static_cast<char>(rng());  // partly compressible
  return s;
}

[[noreturn]] void writer(const std::string& root, int round) {
  StoreOptions options;
  options.max_bytes = uint64_t{64} << 20;
  auto store = Store::open(root, options);
  if (!store.ok()) _exit(3);
  for (uint64_t i = 0;; ++i) {
    ArtifactRecord r;
    r.key = xxh3_128("round " + std::to_string(round) + " item " + std::to_string(i));
    r.input_key = xxh3_128("input " + std::to_string(i % 7));
    r.op = "op" + std::to_string(i % 5);
    r.target = "cpu:x86-64";
    r.kind = "host-so";
    r.toolchain = "t";
    r.entry_points = "e:8";
    (void)(*store)->put(r, content_for(r.key));
    if (i % 3 == 0) (void)(*store)->get(xxh3_128("round " + std::to_string(round) + " item " + std::to_string(i / 2)));
  }
}

TEST(CrashTest, WritersKilledAtRandomNeverLeaveABadEntry) {
  testing::TempDir dir;
  { ASSERT_TRUE(Store::open(dir.path()).ok()); }
  std::mt19937 rng(20261122);
  int kills = 0;
  for (int round = 0; round < 60; ++round) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) writer(dir.path(), round);
    ::usleep(2000 + rng() % 40000);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    kills += WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
  }
  EXPECT_GE(kills, 55);  // the writers were really killed mid-work, not finished

  auto store = Store::open(dir.path()).value();
  auto report = store->verify().value();
  EXPECT_EQ(report.damaged, 0u);
  EXPECT_EQ(report.missing, 0u);
  EXPECT_GT(report.checked, 30u);
  for (auto& r : store->list().value()) {
    auto a = store->get(r.key);
    ASSERT_TRUE(a.ok() && a->has_value()) << r.key.hex();
    ASSERT_EQ((*a)->bytes, content_for(r.key)) << r.key.hex();
  }
  // The byte count survived the kills too: it matches the rows (each blob and its manifest).
  auto stats = store->statistics().value();
  uint64_t sum = 0;
  for (auto& r : store->list().value()) sum += r.stored_size + r.extra_size;
  EXPECT_EQ(stats.bytes, sum);
}

}  // namespace
}  // namespace kiln::cache
