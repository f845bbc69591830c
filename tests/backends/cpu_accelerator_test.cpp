// The CPU backend on its own: worker pool, streams, events, module loading failures.
// Launches of real compiled kernels are covered through the ops API (ops_test).
#include "backends/cpu/cpu_accelerator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/host_cpu.h"
#include "runtime/registry.h"

namespace kiln::backends::cpu {
namespace {

void count_index(void* ctx, uint64_t i) { static_cast<std::atomic<uint32_t>*>(ctx)[i].fetch_add(1); }

TEST(WorkerPoolTest, RunsEveryIndexExactlyOnce) {
  for (unsigned threads : {0u, 1u, 3u}) {
    WorkerPool pool(threads);
    for (uint64_t n : {1ull, 2ull, 7ull, 1000ull, 100003ull}) {
      std::vector<std::atomic<uint32_t>> hits(n);
      pool.run(n, count_index, hits.data());
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1u) << "threads " << threads << " n " << n << " i " << i;
    }
  }
}

TEST(WorkerPoolTest, ConcurrentCallersAreSerialisedSafely) {
  WorkerPool pool(2);
  std::vector<std::thread> callers;
  std::atomic<uint64_t> total{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int k = 0; k < 50; ++k)
        pool.run(
            97, [](void* ctx, uint64_t) { static_cast<std::atomic<uint64_t>*>(ctx)->fetch_add(1); }, &total);
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4u * 50u * 97u);
}

TEST(CpuAcceleratorTest, IsRegisteredAndSelectedByName) {
  auto acc = runtime::get_accelerator("cpu");
  ASSERT_TRUE(acc.ok()) << acc.status().message();
  EXPECT_EQ((*acc)->name(), "cpu");
  EXPECT_EQ((*acc)->device_count(), 1);
  EXPECT_FALSE((*acc)->device_name(0).empty());
  auto missing = runtime::get_accelerator("no-such-backend");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("registered: "), std::string::npos);
}

TEST(CpuAcceleratorTest, SecondRegistrationOfANameIsRefused) {
  runtime::BackendRegistration again{"cpu", 0, nullptr, [] { return Result<std::unique_ptr<runtime::Accelerator>>(
                                                                    unavailable("never made")); }};
  EXPECT_FALSE(runtime::register_backend(again).ok());
}

TEST(CpuAcceleratorTest, NativeTargetIsTheDetectedLevel) {
  CpuAccelerator acc;
  EXPECT_EQ(acc.native_target(), "cpu:" + runtime::x86_level_name(runtime::host_x86_level()));
  EXPECT_TRUE(acc.can_load("host-so", acc.native_target()).ok());
  EXPECT_TRUE(acc.can_load("host-so", "cpu:x86-64").ok());
  EXPECT_FALSE(acc.can_load("cubin", "cuda:sm_90").ok());
  EXPECT_FALSE(acc.can_load("host-so", "cpu:x86-64-v9").ok());
}

TEST(CpuAcceleratorTest, StreamRunsCopiesAndMemsetsInOrder) {
  CpuAccelerator acc;
  auto stream = acc.create_stream().value();
  std::vector<int> a(1000, 1), b(1000, 0);
  ASSERT_TRUE(stream->memset_async(a.data(), 0, a.size() * sizeof(int)).ok());
  ASSERT_TRUE(stream->copy_async(b.data(), a.data(), a.size() * sizeof(int)).ok());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(stream->memset_async(&a[i % 10], i & 0x7f, 1).ok());  // fills the ring
  ASSERT_TRUE(stream->synchronize().ok());
  for (int v : b) ASSERT_EQ(v, 0);
}

TEST(CpuAcceleratorTest, EventsMarkCompletionAcrossStreams) {
  CpuAccelerator acc;
  auto s1 = acc.create_stream().value(), s2 = acc.create_stream().value();
  auto event = acc.create_event().value();
  EXPECT_TRUE(event->query());  // never recorded
  std::vector<char> src(1 << 24, 7), mid(1 << 24, 0), dst(1 << 24, 0);
  ASSERT_TRUE(s1->copy_async(mid.data(), src.data(), src.size()).ok());
  ASSERT_TRUE(s1->record(*event).ok());
  ASSERT_TRUE(s2->wait(*event).ok());
  ASSERT_TRUE(s2->copy_async(dst.data(), mid.data(), mid.size()).ok());
  ASSERT_TRUE(s2->synchronize().ok());
  EXPECT_TRUE(event->query());
  EXPECT_EQ(dst[12345], 7);
  EXPECT_EQ(dst.back(), 7);
  ASSERT_TRUE(event->synchronize().ok());
}

TEST(CpuAcceleratorTest, EventsMeasureElapsedTime) {
  CpuAccelerator acc;
  auto stream = acc.create_stream().value();
  auto start = acc.create_event().value(), end = acc.create_event().value();
  EXPECT_FALSE(end->elapsed_ms_since(*start).ok());  // never recorded
  std::vector<char> a(64 << 20, 1), b(64 << 20, 0);
  ASSERT_TRUE(stream->record(*start).ok());
  ASSERT_TRUE(stream->copy_async(b.data(), a.data(), a.size()).ok());
  ASSERT_TRUE(stream->record(*end).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  auto ms = end->elapsed_ms_since(*start);
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_GT(*ms, 0.0);
}

TEST(CpuAcceleratorTest, ItsMultiprocessorsAreThePoolsThreadsAndTheStreams) {
  for (int helpers : {0, 3}) {
    CpuAccelerator acc(CpuOptions{helpers});
    EXPECT_EQ(acc.multiprocessor_count(), helpers + 1);
  }
}

TEST(CpuAcceleratorTest, AllocationsAreAlignedForVectors) {
  CpuAccelerator acc;
  for (size_t n : {1, 3, 64, 1000}) {
    void* p = acc.allocate(n).value();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    acc.deallocate(p);
  }
}

TEST(CpuAcceleratorTest, MemoryStatsFollowAllocationsAndTheirPeak) {
  CpuAccelerator acc;
  auto before = acc.memory_stats();
  EXPECT_EQ(before.allocated, 0u);
  EXPECT_GT(before.total, 0u);
  void* a = acc.allocate(1 << 20).value();
  void* b = acc.allocate(1 << 10).value();
  EXPECT_EQ(acc.memory_stats().allocated, (1u << 20) + (1u << 10));
  acc.deallocate(a);
  auto after = acc.memory_stats();
  EXPECT_EQ(after.allocated, 1u << 10);
  EXPECT_EQ(after.max_allocated, (1u << 20) + (1u << 10));
  acc.reset_peak_memory();
  EXPECT_EQ(acc.memory_stats().max_allocated, 1u << 10);
  acc.deallocate(b);
  void* pinned = acc.allocate_host(100).value();
  acc.deallocate_host(pinned);
  EXPECT_EQ(acc.memory_stats().allocated, 0u);
}

TEST(CpuAcceleratorTest, BytesThatAreNotASharedObjectFailToLoadWithAReason) {
  CpuAccelerator acc;
  std::string junk = "definitely not ELF";
  runtime::ModuleImage image{"host-so", acc.native_target(), junk, {}, "op junk"};
  auto m = acc.load_module(image);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cannot load op junk"), std::string::npos) << m.status().message();
}

// ---- launches whose caller waits (runtime::LaunchConfig::caller_waits)

// A kernel's blocks note the thread they ran on: args[0] is a std::thread::id[grid].
void note_thread(const kiln_cpu_block* b, void* const* args) {
  (*static_cast<std::thread::id**>(args[0]))[b->block_idx.x] = std::this_thread::get_id();
}

runtime::LaunchConfig blocks(uint32_t n, bool caller_waits) {
  runtime::LaunchConfig c{{n, 1, 1}, {1, 1, 1}};
  c.caller_waits = caller_waits;
  return c;
}

TEST(CpuStreamTest, ALaunchWhoseCallerWaitsRunsOnTheCallerWhenTheStreamIsIdle) {
  CpuAccelerator acc(CpuOptions{0});  // no helpers: every block runs on the thread that runs the launch
  auto stream = acc.create_stream().value();
  auto& cpu = dynamic_cast<CpuStream&>(*stream);
  runtime::KernelSignature sig{"note_thread", {8}, ""};
  for (bool caller_waits : {true, false}) {
    std::vector<std::thread::id> ran(16);
    std::thread::id* out = ran.data();
    const void* args[] = {&out};
    ASSERT_TRUE(cpu.launch(note_thread, sig, blocks(16, caller_waits), args, 1).ok());
    ASSERT_TRUE(stream->synchronize().ok());
    for (auto id : ran)
      EXPECT_EQ(id == std::this_thread::get_id(), caller_waits) << (caller_waits ? "caller" : "stream's thread");
  }
}

// One block that holds the stream until released: args[0] is a Gate*.
struct Gate {
  std::atomic<bool> started{false}, release{false}, finished{false};
  std::atomic<int> value{0};
  int plain = 0;  // written by the gated block after its release, and by a copy queued behind it
};
void gated(const kiln_cpu_block*, void* const* args) {
  Gate* g = *static_cast<Gate**>(args[0]);
  g->started = true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!g->release && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  g->value = 1;
  g->plain = 1;
  g->finished = true;
}
void set_two(const kiln_cpu_block*, void* const* args) { (*static_cast<Gate**>(args[0]))->value = 2; }

TEST(CpuStreamTest, WorkQueuedWhileACallerRunsItsLaunchWaitsForItAndSoDoesSynchronize) {
  CpuAccelerator acc(CpuOptions{1});
  auto stream = acc.create_stream().value();
  auto& cpu = dynamic_cast<CpuStream&>(*stream);
  runtime::KernelSignature sig{"gated", {8}, ""};
  Gate gate;
  Gate* g = &gate;
  const void* args[] = {&g};
  std::thread caller([&] { EXPECT_TRUE(cpu.launch(gated, sig, blocks(1, true), args, 1).ok()); });
  while (!gate.started) std::this_thread::yield();
  EXPECT_FALSE(stream->query());  // the caller's launch is this stream's work
  // Queued behind it: on its own thread the stream would run this copy at once (a launch would
  // wait for the worker pool, which the caller's launch holds), and the gated block's later
  // write would win.
  int two = 2;
  ASSERT_TRUE(stream->copy_async(&gate.plain, &two, sizeof two).ok());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release = true;
  });
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_TRUE(gate.finished.load()) << "synchronize returned while the caller's launch ran";
  EXPECT_EQ(gate.plain, 2) << "the queued copy ran before the caller's launch had finished";
  EXPECT_TRUE(stream->query());
  caller.join();
  releaser.join();
}

TEST(CpuStreamTest, ALaunchWhoseCallerWaitsIsQueuedBehindWorkAndCapturedInAGraph) {
  CpuAccelerator acc(CpuOptions{0});
  auto stream = acc.create_stream().value();
  auto& cpu = dynamic_cast<CpuStream&>(*stream);
  runtime::KernelSignature sig{"gated", {8}, ""};
  Gate first, second;
  Gate* g1 = &first;
  Gate* g2 = &second;
  const void* args1[] = {&g1};
  const void* args2[] = {&g2};
  // Busy with the gated block (queued): the next launch goes behind it, on the stream's thread.
  ASSERT_TRUE(cpu.launch(gated, sig, blocks(1, false), args1, 1).ok());
  while (!first.started) std::this_thread::yield();
  ASSERT_TRUE(cpu.launch(set_two, sig, blocks(1, true), args1, 1).ok());  // returns: queued, not run
  EXPECT_EQ(first.value.load(), 0);
  first.release = true;
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(first.value.load(), 2);
  // Capturing: recorded for the graph, run only when the graph is.
  ASSERT_TRUE(stream->begin_capture().ok());
  ASSERT_TRUE(cpu.launch(set_two, sig, blocks(1, true), args2, 1).ok());
  auto graph = stream->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  EXPECT_EQ(second.value.load(), 0);
  ASSERT_TRUE((*graph)->launch(*stream).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(second.value.load(), 2);
}

}  // namespace
}  // namespace kiln::backends::cpu
