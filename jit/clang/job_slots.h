// The in-process Clang toolchain's job limit: how many of its CPU-bound jobs (a source's parse and
// code generation, one pass of a CUDA source, a code generation part, a cubin link, another
// compiler's run for a source) the process runs at once, whatever the number of compiles, sources
// and passes in flight: what ninja's -j is to torch's loader, for the whole process.
//
// The limit (job_limit()): $KILN_COMPILE_THREADS, else $MAX_JOBS (torch's cpp_extension reads it
// for ninja: a user who set it for torch's loader gets the same from kiln's), else the CPUs this
// process may run on (sched_getaffinity: a taskset or a cgroup's cpuset, not the machine's cores).
//
// A job holds its slot from start to end (no time slicing between jobs), and slots are given in
// the order they were asked for: the longest source's passes, started first, keep their cores.
// A thread that waits for other jobs (a host pass waiting for its fat binary) lets its slot go
// while it waits (Released) and takes one again after, so a job never waits for a job that waits
// for its slot. Slots are per thread and nest: a job that calls another job's code on its own
// thread holds one slot, not two.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace kiln::jit::stages {

struct JobLimit {
  unsigned jobs = 1;
  std::string source;   // "KILN_COMPILE_THREADS=3", "MAX_JOBS=2", "the 2 CPUs this process may use"
  std::string warning;  // a variable that was set but not a number from 1 to 1024 (then ignored)
};

// The limit as the environment says now (see above).
JobLimit job_limit();

class JobSlots {
 public:
  // The process's slots, sized by job_limit() when first asked for.
  static JobSlots& process();

  explicit JobSlots(JobLimit limit) : m_limit(std::move(limit)) {}
  JobSlots(const JobSlots&) = delete;
  JobSlots& operator=(const JobSlots&) = delete;

  const JobLimit& limit() const { return m_limit; }
  // The most jobs that held a slot at once since the process started (for logs and tests).
  unsigned peak() const;

  // Holds a slot for its scope (none more if this thread holds one already).
  class Held {
   public:
    explicit Held(JobSlots& slots = process());
    ~Held();
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    JobSlots* m_slots;
    bool m_took;
  };

  // Lets this thread's slot go for its scope (a wait for other jobs), and takes one again at its
  // end; nothing when the thread holds none.
  class Released {
   public:
    explicit Released(JobSlots& slots = process());
    ~Released();
    Released(const Released&) = delete;
    Released& operator=(const Released&) = delete;

   private:
    JobSlots* m_slots;
    bool m_gave;
  };

 private:
  void acquire();
  void release();

  const JobLimit m_limit;
  mutable std::mutex m_mutex;
  std::condition_variable m_freed;
  unsigned m_running = 0, m_peak = 0;
  uint64_t m_next_ticket = 0, m_serving = 0;  // first come, first served
};

}  // namespace kiln::jit::stages
