// One compile per key across processes: an advisory lock (flock) on a file per key under
// <cache>/locks. The kernel drops a flock when its holder dies, however it dies, so a
// crashed compiler never leaves a key locked. Waiters poll, and give up after a timeout
// rather than hang forever: a timed-out waiter compiles itself.
#pragma once

#include <chrono>
#include <string>

#include "support/hash.h"

namespace kiln::cache {

class KeyLock {
 public:
  // Takes the lock for `key`, waiting up to `timeout`. Never fails: when the lock cannot be
  // had (timeout, unwritable folder) the result is simply not held().
  static KeyLock acquire(const std::string& cache_root, const Hash128& key, std::chrono::milliseconds timeout);

  KeyLock(KeyLock&& other) noexcept;
  KeyLock& operator=(KeyLock&&) = delete;
  ~KeyLock();

  bool held() const { return m_fd >= 0; }
  // True when another process held the lock first: its result may be in the cache now.
  bool waited() const { return m_waited; }

 private:
  KeyLock() = default;
  int m_fd = -1;
  bool m_waited = false;
};

}  // namespace kiln::cache
