// The CPU backend in a process with an OpenMP runtime (as torch's libgomp in a Python process):
// a launch whose caller waits runs on the caller's OpenMP team (backends/cpu/worker_pool.h).
// A program of its own, linked with OpenMP; cpu_backend_test has none and covers the rest.
#include <omp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "backends/cpu/cpu_accelerator.h"

namespace kiln::backends::cpu {
namespace {

// Each block notes the OpenMP team it ran in: args[0] is an int[grid] (0: none, else its size).
void note_team(const kiln_cpu_block* b, void* const* args) {
  (*static_cast<int**>(args[0]))[b->block_idx.x] = omp_in_parallel() ? omp_get_num_threads() : 0;
}

std::vector<int> teams_of_a_launch(CpuAccelerator& acc, bool caller_waits) {
  auto stream = acc.create_stream().value();
  std::vector<int> team(64, -1);
  int* out = team.data();
  const void* args[] = {&out};
  runtime::LaunchConfig config{{64, 1, 1}, {1, 1, 1}};
  config.caller_waits = caller_waits;
  EXPECT_TRUE(dynamic_cast<CpuStream&>(*stream).launch(note_team, {"note_team", {8}, ""}, config, args, 1).ok());
  EXPECT_TRUE(stream->synchronize().ok());
  return team;
}

TEST(CpuOpenMpTest, ALaunchWhoseCallerWaitsRunsOnTheCallersTeamAtItsSize) {
  // The team's size, not kiln's (3 workers here): torch.set_num_threads sets the caller's.
  CpuAccelerator acc(CpuOptions{2, 1});
  for (int size : {2, 3}) {
    omp_set_num_threads(size);
    for (int t : teams_of_a_launch(acc, true)) EXPECT_EQ(t, size);
  }
  omp_set_num_threads(1);  // a team of one is no team: kiln's own threads
  for (int t : teams_of_a_launch(acc, true)) EXPECT_EQ(t, 0);
  omp_set_num_threads(2);
}

TEST(CpuOpenMpTest, QueuedLaunchesAndTheSwitchedOffPoolKeepKilnsThreads) {
  omp_set_num_threads(2);
  CpuAccelerator on(CpuOptions{1, 1}), off(CpuOptions{1, 0});
  for (int t : teams_of_a_launch(on, false)) EXPECT_EQ(t, 0) << "a queued launch runs on the stream's thread";
  for (int t : teams_of_a_launch(off, true)) EXPECT_EQ(t, 0) << "use_openmp = 0 (KILN_CPU_OPENMP=0)";
}

TEST(CpuOpenMpTest, ACallerInsideAParallelRegionFallsBackToKilnsThreadsAndRunsEveryBlockOnce) {
  // A nested team would be one thread: kiln's own pool runs it instead.
  omp_set_num_threads(2);
  CpuAccelerator acc(CpuOptions{1, 1});
  for (int outer : {2, 1}) {  // an active region, and an inactive one (a team of one)
    std::vector<int> team;
#pragma omp parallel num_threads(outer)
    {
#pragma omp master
      team = teams_of_a_launch(acc, true);
    }
    ASSERT_EQ(team.size(), 64u);
    // Blocks on the caller see the outer team (its size, or none when inactive), those on
    // kiln's helper none; a nested team of the launch's own (1) would mean it went to OpenMP.
    for (int t : team) EXPECT_TRUE(t == 0 || t == outer) << "outer team " << outer << ", block saw " << t;
  }
}

}  // namespace
}  // namespace kiln::backends::cpu
