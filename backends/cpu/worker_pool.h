// A persistent pool of threads that runs the blocks of one launch at a time.
//
// Threads start on the first run(), not at construction (nothing happens at load time).
// run() is safe to call from several threads; calls are serialised, and the calling
// thread works too, so a pool of N threads uses N+1 cores' worth of workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::backends::cpu {

class WorkerPool {
 public:
  using Task = void (*)(void* context, uint64_t index);

  // `threads` helpers besides the caller; 0 runs everything on the caller.
  explicit WorkerPool(unsigned threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls task(context, i) for every i in [0, count); returns when all calls have returned.
  void run(uint64_t count, Task task, void* context);

  unsigned helper_count() const { return m_thread_count; }

 private:
  void start_threads();
  void worker_main();
  // Claims chunks of indices until none are left; returns how many it ran.
  uint64_t work();

  const unsigned m_thread_count;
  std::mutex m_run_mutex;  // one launch at a time

  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::condition_variable m_done;
  std::vector<std::thread> m_threads;
  bool m_stop = false;
  uint64_t m_generation = 0;
  unsigned m_active = 0;  // helpers inside the current job

  // The current job; written under m_mutex before m_generation changes.
  Task m_task = nullptr;
  void* m_context = nullptr;
  uint64_t m_count = 0;
  uint64_t m_chunk = 1;
  std::atomic<uint64_t> m_next{0};
};

}  // namespace kiln::backends::cpu
