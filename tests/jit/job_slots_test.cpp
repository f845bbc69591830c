// The process's job limit (jit/clang/job_slots.h): where the limit comes from, that no more jobs
// than it run at once, that a thread's slots nest, that a thread waiting for other jobs lets its
// slot go (no deadlock at a limit of 1), and that slots go first come, first served.
#include "jit/clang/job_slots.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::jit::stages {
namespace {

// Sets (or, with nullptr, unsets) a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = ::getenv(name)) m_old = old, m_had = true;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { m_had ? ::setenv(m_name, m_old.c_str(), 1) : ::unsetenv(m_name); }

 private:
  const char* m_name;
  std::string m_old;
  bool m_had = false;
};

TEST(JobLimitTest, KilnsSettingThenTorchsMaxJobsThenTheCpusThisProcessMayUse) {
  {
    ScopedEnv kiln("KILN_COMPILE_THREADS", "3"), torch("MAX_JOBS", "2");
    JobLimit limit = job_limit();
    EXPECT_EQ(limit.jobs, 3u);
    EXPECT_EQ(limit.source, "KILN_COMPILE_THREADS=3");
  }
  {
    ScopedEnv kiln("KILN_COMPILE_THREADS", nullptr), torch("MAX_JOBS", "2");
    JobLimit limit = job_limit();
    EXPECT_EQ(limit.jobs, 2u);
    EXPECT_EQ(limit.source, "MAX_JOBS=2");
    EXPECT_TRUE(limit.warning.empty());
  }
  {
    // A value that is not a count is said and ignored; the next source decides.
    ScopedEnv kiln("KILN_COMPILE_THREADS", "lots"), torch("MAX_JOBS", "5");
    JobLimit limit = job_limit();
    EXPECT_EQ(limit.jobs, 5u);
    EXPECT_NE(limit.warning.find("KILN_COMPILE_THREADS=lots"), std::string::npos) << limit.warning;
  }
  {
    ScopedEnv kiln("KILN_COMPILE_THREADS", "0"), torch("MAX_JOBS", nullptr);
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
    JobLimit limit = job_limit();
    EXPECT_EQ(limit.jobs, static_cast<unsigned>(CPU_COUNT(&set)));
    EXPECT_NE(limit.source.find("CPUs this process may use"), std::string::npos) << limit.source;
    EXPECT_FALSE(limit.warning.empty());  // 0 is not a count of jobs
  }
}

TEST(JobSlotsTest, NoMoreJobsThanTheLimitRunAtOnce) {
  JobSlots slots(JobLimit{2, "test", ""});
  std::atomic<int> running{0}, most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      JobSlots::Held slot(slots);
      int now = ++running;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      --running;
    });
  for (auto& t : threads) t.join();
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(slots.peak(), static_cast<unsigned>(most.load()));
}

TEST(JobSlotsTest, AThreadsSlotsNestAsOne) {
  JobSlots slots(JobLimit{1, "test", ""});
  JobSlots::Held outer(slots);
  JobSlots::Held inner(slots);  // would wait for ever if it took a second slot
  EXPECT_EQ(slots.peak(), 1u);
}

TEST(JobSlotsTest, AThreadWaitingForOtherJobsLetsItsSlotGo) {
  // A host pass holds the only slot, then waits for its device pass, which needs one.
  JobSlots slots(JobLimit{1, "test", ""});
  bool device_ran = false;
  {
    JobSlots::Held host(slots);
    JobSlots::Released waiting(slots);
    std::thread device([&] {
      JobSlots::Held slot(slots);
      device_ran = true;
    });
    device.join();
  }
  EXPECT_TRUE(device_ran);
  EXPECT_EQ(slots.peak(), 1u);
}

TEST(JobSlotsTest, SlotsGoInTheOrderTheyWereAskedFor) {
  JobSlots slots(JobLimit{1, "test", ""});
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread> threads;
  {
    JobSlots::Held first(slots);
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] {
        JobSlots::Held slot(slots);
        std::lock_guard lock(mutex);
        order.push_back(i);
      });
      // Each thread asks before the next starts (it then waits for the slot this scope holds).
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace kiln::jit::stages
