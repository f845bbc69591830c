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
  std::string dir = root + "/locks";
  if (!make_dirs(dir, 0700).ok()) return lock;
  std::string path = dir + "/" + key.hex() + ".lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
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
  if (m_fd >= 0) ::close(m_fd);  // closing the last descriptor releases the flock
}

}  // namespace kiln::cache
