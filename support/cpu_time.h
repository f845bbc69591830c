// CPU time, for telling what a compile cost in CPU seconds beside its wall time: wall time adds
// up waiting (for a contended CPU, for the disk), CPU time what the work itself took.
//
// A compile that runs on helper threads counts them through the thread that joins them: each
// helper ends by handing its CPU time (and its own helpers') to a total the joiner adds with
// add_joined_helpers_cpu_us(), so that work_cpu_us() on the thread that asked covers every thread
// the work ran on, however deep. The counts are per library (a thread_local in each shared
// library that links support): measure where the threads are started and joined.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

namespace kiln {

// The calling thread's CPU time so far (user and system), in microseconds.
int64_t thread_cpu_us();
// The CPU time of this process's child processes that have ended and been waited for.
int64_t children_cpu_us();
// The calling thread's CPU time plus what its joined helpers handed it: take it before and after.
int64_t work_cpu_us();
// For the thread that joined helpers: adds what they used (each helper's work_cpu_us() at its end;
// a fresh thread's clock starts at zero).
void add_joined_helpers_cpu_us(int64_t us);

// Helper threads that hand their CPU time to the thread that joins them: start() each, then
// join() (or let the destructor join) on the thread that started them.
class HelperThreads {
 public:
  HelperThreads() = default;
  HelperThreads(const HelperThreads&) = delete;
  HelperThreads& operator=(const HelperThreads&) = delete;
  ~HelperThreads() { join(); }

  template <class F>
  void start(F work) {
    m_threads.emplace_back([this, work = std::move(work)]() mutable {
      work();
      m_cpu_us.fetch_add(work_cpu_us());
    });
  }

  void join() {
    for (auto& t : m_threads) t.join();
    m_threads.clear();
    add_joined_helpers_cpu_us(m_cpu_us.exchange(0));
  }

 private:
  std::vector<std::thread> m_threads;
  std::atomic<int64_t> m_cpu_us{0};
};

}  // namespace kiln
