#include "cache/key_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>

#include "support/file_util.h"

namespace kiln::cache {

KeyLock KeyLock::acquire(const std::string& root, const Hash128& key, std::chrono::milliseconds timeout) {
  KeyLock lock;
  // The locks folder a real one of the store (a link there is replaced, never followed), and the
  // lock file opened without following one either: a link planted there cannot make kiln create
  // or lock a file elsewhere.
  int root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return lock;
  auto dir = make_dirs_beneath(root_fd, "locks", 0700, root + "/locks");
  ::close(root_fd);
  if (!dir.ok()) return lock;
  std::string name = key.hex() + ".lock";
  int fd = ::openat(dir.value(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  ::close(dir.value());
  if (fd < 0) return lock;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      lock.m_fd = fd;
      return lock;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    lock.m_waited = true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  ::close(fd);
  return lock;
}

KeyLock::KeyLock(KeyLock&& other) noexcept : m_fd(other.m_fd), m_waited(other.m_waited) { other.m_fd = -1; }

KeyLock::~KeyLock() {
  if (m_fd < 0) return;
  // Released outright, not by the close: a child forked while the lock was held (a compiler's
  // worker, a process NVRTC's host forks) shares the open file, and the flock, until it exits;
  // only the holder's LOCK_UN frees it for the waiters meanwhile.
  ::flock(m_fd, LOCK_UN);
  ::close(m_fd);
}

}  // namespace kiln::cache
