// A persistent pool of threads that runs the blocks of one launch at a time.
//
// Threads start on the first run(), not at construction (nothing happens at load time).
// run() is safe to call from several threads; calls are serialised, and the calling
// thread works too, so a pool of N threads uses N+1 cores' worth of workers.
//
// A run for a caller that waits for it (a synchronous launch) may instead go to the caller's
// OpenMP team when the process has an OpenMP runtime loaded (torch's libgomp): those threads
// are spinning after torch's last op, and kiln's own would have to be woken and then share
// the cores with them. Measured on a 2-core VM (docs/history/2026-12-04-cpu-adamw-openmp.md): AdamW over 256 Ki fp32
// took 3.1x DeepSpeed's cpu_adam (itself an OpenMP loop) on kiln's threads, 1.06x on the team.
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

  // `threads` helpers besides the caller; 0 runs everything on the caller. `use_openmp`: let
  // run(..., waiting_caller = true) use the caller's OpenMP team when there is a runtime.
  explicit WorkerPool(unsigned threads, bool use_openmp = true);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Calls task(context, i) for every i in [0, count); returns when all calls have returned.
  // `waiting_caller`: the calling thread is the one that asked for the work and waits for it
  // (not a stream's thread), so its OpenMP team, if it has one, is the right one to use.
  void run(uint64_t count, Task task, void* context, bool waiting_caller = false);

  unsigned helper_count() const { return m_thread_count; }

 private:
  void start_threads();
  // Until no helper is inside a job (m_active == 0): only then may the job's fields, and the
  // context its tasks point into, change. Under m_mutex.
  void wait_for_helpers(std::unique_lock<std::mutex>& lock);
  // Sets up the job's fields for work(), once no helper is still inside the last job.
  void begin_job(std::unique_lock<std::mutex>& lock, uint64_t count, Task task, void* context, unsigned workers);
  // Runs the job on the caller's OpenMP team, at the team's size; false (nothing run) when there
  // is no runtime, the team would be one thread, or the caller is already inside a parallel
  // region (a nested team would be one thread).
  bool run_on_openmp_team(uint64_t count, Task task, void* context);
  void worker_main();
  // Claims chunks of indices until none are left; returns how many it ran.
  uint64_t work();

  const unsigned m_thread_count;
  const bool m_use_openmp;
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
