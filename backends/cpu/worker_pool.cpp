#include "backends/cpu/worker_pool.h"

#include <algorithm>

namespace kiln::backends::cpu {

WorkerPool::WorkerPool(unsigned threads) : m_thread_count(threads) {}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  for (auto& t : m_threads) t.join();
}

void WorkerPool::start_threads() {
  m_threads.reserve(m_thread_count);
  for (unsigned i = 0; i < m_thread_count; ++i) m_threads.emplace_back([this] { worker_main(); });
}

uint64_t WorkerPool::work() {
  uint64_t ran = 0;
  for (;;) {
    uint64_t begin = m_next.fetch_add(m_chunk, std::memory_order_relaxed);
    if (begin >= m_count) return ran;
    uint64_t end = std::min(m_count, begin + m_chunk);
    for (uint64_t i = begin; i < end; ++i) m_task(m_context, i);
    ran += end - begin;
  }
}

void WorkerPool::worker_main() {
  uint64_t seen = 0;
  std::unique_lock lock(m_mutex);
  for (;;) {
    m_wake.wait(lock, [&] { return m_stop || m_generation != seen; });
    if (m_stop) return;
    seen = m_generation;
    ++m_active;
    lock.unlock();
    work();
    lock.lock();
    if (--m_active == 0) m_done.notify_all();
  }
}

void WorkerPool::run(uint64_t count, Task task, void* context) {
  if (count == 0) return;
  std::lock_guard run_lock(m_run_mutex);
  // Small grids are not worth waking anyone for.
  if (m_thread_count == 0 || count == 1) {
    for (uint64_t i = 0; i < count; ++i) task(context, i);
    return;
  }
  {
    std::unique_lock lock(m_mutex);
    if (m_threads.empty()) start_threads();
    // A helper that woke late for the previous job may still be reading its fields.
    m_done.wait(lock, [&] { return m_active == 0; });
    m_task = task;
    m_context = context;
    m_count = count;
    // About 4 chunks per worker balances uneven blocks without hammering the counter.
    m_chunk = std::max<uint64_t>(1, count / (4 * (m_thread_count + 1)));
    m_next.store(0, std::memory_order_relaxed);
    ++m_generation;
  }
  m_wake.notify_all();
  work();
  // Every helper that joined this job must leave it before the job's fields change.
  std::unique_lock lock(m_mutex);
  m_done.wait(lock, [&] { return m_active == 0; });
}

}  // namespace kiln::backends::cpu
