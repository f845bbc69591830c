#include "cache/key_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using namespace std::chrono_literals;

// A child process that takes the lock, says so through a pipe, then sleeps until killed.
pid_t hold_in_child(const std::string& root, const Hash128& key) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    auto lock = KeyLock::acquire(root, key, 1s);
    char ok = lock.held() ? 'y' : 'n';
    (void)!::write(fds[1], &ok, 1);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char ok = 0;
  EXPECT_EQ(::read(fds[0], &ok, 1), 1);
  EXPECT_EQ(ok, 'y');
  ::close(fds[0]);
  return pid;
}

TEST(KeyLockTest, AWaiterTimesOutInsteadOfHanging) {
  testing::TempDir dir;
  Hash128 key = xxh3_128("k");
  pid_t holder = hold_in_child(dir.path(), key);
  auto start = std::chrono::steady_clock::now();
  auto lock = KeyLock::acquire(dir.path(), key, 150ms);
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(lock.held());
  EXPECT_TRUE(lock.waited());
  EXPECT_GE(waited, 150ms);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
}

TEST(KeyLockTest, TheLockOfAHolderThatDiedIsFree) {
  testing::TempDir dir;
  Hash128 key = xxh3_128("k");
  pid_t holder = hold_in_child(dir.path(), key);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  auto lock = KeyLock::acquire(dir.path(), key, 5s);
  EXPECT_TRUE(lock.held());
}

TEST(KeyLockTest, AChildForkedWhileItWasHeldDoesNotKeepItAfterTheHolderLetsGo) {
  testing::TempDir dir;
  Hash128 key = xxh3_128("forked");
  pid_t child = -1;
  {
    auto lock = KeyLock::acquire(dir.path(), key, 1s);
    ASSERT_TRUE(lock.held());
    child = ::fork();  // inherits the lock's open file, as a compiler's forked worker would
    if (child == 0) {
      ::sleep(30);
      ::_exit(0);
    }
  }
  auto start = std::chrono::steady_clock::now();
  auto again = KeyLock::acquire(dir.path(), key, 5s);
  EXPECT_TRUE(again.held());
  EXPECT_FALSE(again.waited()) << "waited " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s";
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(KeyLockTest, DifferentKeysDoNotWaitForEachOther) {
  testing::TempDir dir;
  pid_t holder = hold_in_child(dir.path(), xxh3_128("a"));
  auto lock = KeyLock::acquire(dir.path(), xxh3_128("b"), 0ms);
  EXPECT_TRUE(lock.held());
  EXPECT_FALSE(lock.waited());
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
}

}  // namespace
}  // namespace kiln::cache
