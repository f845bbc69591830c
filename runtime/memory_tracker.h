// Bookkeeping of live allocations for MemoryStats: bytes allocated and their peak. One per
// accelerator; thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace kiln::runtime {

class MemoryTracker {
 public:
  void on_allocate(const void* p, uint64_t bytes) {
    std::lock_guard lock(m_mutex);
    m_sizes[p] = bytes;
    m_allocated += bytes;
    if (m_allocated > m_peak) m_peak = m_allocated;
  }
  void on_free(const void* p) {
    std::lock_guard lock(m_mutex);
    auto it = m_sizes.find(p);
    if (it == m_sizes.end()) return;
    m_allocated -= it->second;
    m_sizes.erase(it);
  }
  uint64_t allocated() const {
    std::lock_guard lock(m_mutex);
    return m_allocated;
  }
  uint64_t peak() const {
    std::lock_guard lock(m_mutex);
    return m_peak;
  }
  void reset_peak() {
    std::lock_guard lock(m_mutex);
    m_peak = m_allocated;
  }

 private:
  mutable std::mutex m_mutex;
  std::unordered_map<const void*, uint64_t> m_sizes;
  uint64_t m_allocated = 0, m_peak = 0;
};

}  // namespace kiln::runtime
