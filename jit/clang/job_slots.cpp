// JobSlots: see job_slots.h.
#include "jit/clang/job_slots.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

namespace kiln::jit::stages {
namespace {

// This thread's slot: which JobSlots it holds one of, and how many Held scopes are open on it.
thread_local JobSlots* t_slots = nullptr;
thread_local unsigned t_depth = 0;

// A variable's value as a number from 1 to 1024; 0 when unset; -1 when set to anything else.
long number_in(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  char* end = nullptr;
  long n = std::strtol(text, &end, 10);
  return end == text || *end != '\0' || n < 1 || n > 1024 ? -1 : n;
}

// A thread at idle priority (a PCH built in the background, builders/precompiled_headers.cpp)
// runs on the cycles nothing else wants: it takes no slot, or it would hold one of the few while
// the kernel gives it no time, and the compile it was meant not to slow would wait for it.
bool at_idle_priority() {
  if (::sched_getscheduler(0) == SCHED_IDLE) return true;
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  return errno == 0 && nice >= 19;
}

}  // namespace

JobLimit job_limit() {
  JobLimit limit;
  for (const char* name : {"KILN_COMPILE_THREADS", "MAX_JOBS"}) {
    long n = number_in(name);
    if (n > 0) {
      limit.jobs = static_cast<unsigned>(n);
      limit.source = std::string(name) + "=" + std::getenv(name);
      return limit;
    }
    if (n < 0 && limit.warning.empty())
      limit.warning = std::string(name) + "=" + std::getenv(name) + " is not a number from 1 to 1024; ignored";
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cpus <= 0) cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  limit.jobs = static_cast<unsigned>(cpus);
  limit.source = "the " + std::to_string(cpus) + " CPUs this process may use";
  return limit;
}

JobSlots& JobSlots::process() {
  static auto* slots = new JobSlots(job_limit());  // lives until exit, as the toolchain does
  return *slots;
}

unsigned JobSlots::peak() const {
  std::lock_guard lock(m_mutex);
  return m_peak;
}

void JobSlots::acquire() {
  std::unique_lock lock(m_mutex);
  const uint64_t ticket = m_next_ticket++;
  m_freed.wait(lock, [&] { return ticket == m_serving && m_running < m_limit.jobs; });
  ++m_serving;
  m_peak = std::max(m_peak, ++m_running);
  m_freed.notify_all();  // the next ticket may fit too
}

void JobSlots::release() {
  {
    std::lock_guard lock(m_mutex);
    --m_running;
  }
  m_freed.notify_all();
}

JobSlots::Held::Held(JobSlots& slots) : m_slots(&slots), m_took(t_depth == 0 && !at_idle_priority()) {
  if (m_took) {
    slots.acquire();
    t_slots = &slots;
  }
  ++t_depth;
}

JobSlots::Held::~Held() {
  if (--t_depth == 0 && m_took) {
    m_slots->release();
    t_slots = nullptr;
  }
}

JobSlots::Released::Released(JobSlots& slots) : m_slots(&slots), m_gave(t_depth > 0 && t_slots == &slots) {
  if (m_gave) slots.release();
}

JobSlots::Released::~Released() {
  if (m_gave) m_slots->acquire();
}

}  // namespace kiln::jit::stages
