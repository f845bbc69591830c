#include "support/cpu_time.h"

#include <sys/resource.h>
#include <time.h>

namespace kiln {
namespace {
thread_local int64_t t_joined_helpers_us = 0;

int64_t timeval_us(const timeval& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000 + t.tv_usec; }
}  // namespace

int64_t thread_cpu_us() {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

int64_t children_cpu_us() {
  rusage u{};
  if (::getrusage(RUSAGE_CHILDREN, &u) != 0) return 0;
  return timeval_us(u.ru_utime) + timeval_us(u.ru_stime);
}

int64_t work_cpu_us() { return thread_cpu_us() + t_joined_helpers_us; }

void add_joined_helpers_cpu_us(int64_t us) { t_joined_helpers_us += us; }

}  // namespace kiln
