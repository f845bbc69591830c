// Bookkeeping of live allocations for MemoryStats: bytes asked for and bytes reserved (with
// the backend's rounding), and the peak of each. One per accelerator; thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "runtime/accelerator.h"

namespace kiln::runtime {

class MemoryTracker {
 public:
  void on_allocate(const void* p, uint64_t bytes, uint64_t reserved_bytes) {
    std::lock_guard lock(m_mutex);
    m_sizes[p] = {bytes, reserved_bytes};
    m_allocated += bytes;
    m_reserved += reserved_bytes;
    if (m_allocated > m_peak) m_peak = m_allocated;
    if (m_reserved > m_peak_reserved) m_peak_reserved = m_reserved;
  }
  // False when `p` was not allocated here (or was freed already).
  bool on_free(const void* p) {
    std::lock_guard lock(m_mutex);
    auto it = m_sizes.find(p);
    if (it == m_sizes.end()) return false;
    m_allocated -= it->second.first;
    m_reserved -= it->second.second;
    m_sizes.erase(it);
    return true;
  }
  // True when `p` lies inside a live allocation.
  bool contains(const void* p) const {
    std::lock_guard lock(m_mutex);
    auto it = m_sizes.upper_bound(p);
    if (it == m_sizes.begin()) return false;
    --it;
    auto addr = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(it->first);
    return addr < base + std::max<uint64_t>(it->second.second, 1);
  }
  void fill(MemoryStats& s) const {
    std::lock_guard lock(m_mutex);
    s.allocated = m_allocated;
    s.max_allocated = m_peak;
    s.reserved = m_reserved;
    s.max_reserved = m_peak_reserved;
  }
  void reset_peak() {
    std::lock_guard lock(m_mutex);
    m_peak = m_allocated;
    m_peak_reserved = m_reserved;
  }

 private:
  mutable std::mutex m_mutex;
  // Ordered, so contains() finds interior pointers: (asked, reserved) bytes per allocation.
  std::map<const void*, std::pair<uint64_t, uint64_t>, std::less<>> m_sizes;
  uint64_t m_allocated = 0, m_peak = 0, m_reserved = 0, m_peak_reserved = 0;
};

}  // namespace kiln::runtime
