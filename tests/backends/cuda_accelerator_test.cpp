// The CUDA accelerator on a real GPU: every bundled op launched and checked against its
// host reference at several sizes, streams and events, and refusals. Skips, saying why,
// where there is no driver or no GPU (CI always).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "builders/ops.h"
#include "backends/cuda/cuda_accelerator.h"
#include "backends/cuda/nvtx.h"
#include "builders/self_check.h"
#include "runtime/registry.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

class CudaAcceleratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto acc = runtime::get_accelerator("cuda");
    if (!acc.ok()) GTEST_SKIP() << "no CUDA accelerator here: " << acc.status().message();
    cuda = acc.value();
    builders::OpsOptions o;
    // On a GPU node without LLVM (tools/gpu-check), the host references come from the cache
    // it carries: KILN_CACHE_DIR.
    const char* carried = std::getenv("KILN_CACHE_DIR");
    o.cache_dir = carried && *carried ? carried : cache.path();
    o.spec_dirs = {testing::bundled_spec_dir()};
    o.accelerator = "cuda";
    auto made = builders::Ops::create(o);
    ASSERT_TRUE(made.ok()) << made.status().message();
    ops = std::move(made).value();
  }
  runtime::Accelerator* cuda = nullptr;
  testing::TempDir cache;
  std::unique_ptr<builders::Ops> ops;
};

TEST_F(CudaAcceleratorTest, EveryBundledOpMatchesTheHostReference) {
  const std::vector<std::pair<std::string, std::map<std::string, int64_t>>> cases = {
      {"vector_add", {{"n", 1}}},          {"vector_add", {{"n", 257}}},         {"vector_add", {{"n", 1000003}}},
      {"axpby", {{"n", 1}}},               {"axpby", {{"n", 513}}},              {"axpby", {{"n", 777777}}},
      {"row_softmax", {{"rows", 1}, {"cols", 1}}}, {"row_softmax", {{"rows", 3}, {"cols", 1000}}},
      {"row_softmax", {{"rows", 1023}, {"cols", 1000}}}, {"sum_reduce", {{"n", 1}}}, {"sum_reduce", {{"n", 4097}}},
      {"sum_reduce", {{"n", 1048573}}},
  };
  for (auto& [name, dims] : cases) {
    auto op = ops->get(name);
    ASSERT_TRUE(op.ok()) << op.status().message();
    EXPECT_EQ((*op)->accelerator().name(), "cuda");
    auto report = builders::run_self_check(*ops, **op, {dims, 1});
    ASSERT_TRUE(report.ok()) << name << ": " << report.status().message();
    EXPECT_TRUE(report->passed) << name << ": " << report->message;
  }
}

TEST_F(CudaAcceleratorTest, PtxOfAnOlderArchitectureLoadsThroughTheDriver) {
  auto op = ops->get("vector_add", "cuda:sm_80");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto report = builders::run_self_check(*ops, **op);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->passed) << report->message;
}

TEST_F(CudaAcceleratorTest, ANewerArchitectureIsRefused) {
  auto op = ops->get("vector_add", "cuda:sm_120");
  if (cuda->native_target() == "cuda:sm_120") GTEST_SKIP() << "this GPU is sm_120";
  ASSERT_FALSE(op.ok());
  EXPECT_NE(op.status().message().find("artifact built for sm_120"), std::string::npos) << op.status().message();
}

TEST_F(CudaAcceleratorTest, StreamsCopyAndEventsOrderWork) {
  const size_t n = 1 << 20;
  std::vector<int> host(n, 7), back(n, 0);
  void* a = cuda->allocate(n * sizeof(int)).value();
  void* b = cuda->allocate(n * sizeof(int)).value();
  auto s1 = cuda->create_stream().value(), s2 = cuda->create_stream().value();
  auto done = cuda->create_event().value();
  ASSERT_TRUE(s1->copy_async(a, host.data(), n * sizeof(int)).ok());
  ASSERT_TRUE(s1->record(*done).ok());
  ASSERT_TRUE(s2->wait(*done).ok());
  ASSERT_TRUE(s2->copy_async(b, a, n * sizeof(int)).ok());
  ASSERT_TRUE(s2->memset_async(b, 0, sizeof(int)).ok());
  ASSERT_TRUE(s2->synchronize().ok());
  ASSERT_TRUE(cuda->copy(back.data(), b, n * sizeof(int)).ok());
  EXPECT_EQ(back[0], 0);
  EXPECT_EQ(back[1], 7);
  EXPECT_EQ(back[n - 1], 7);
  EXPECT_TRUE(done->query());
  auto before = cuda->create_event().value(), after = cuda->create_event().value();
  ASSERT_TRUE(s1->record(*before).ok());
  ASSERT_TRUE(s1->copy_async(b, a, n * sizeof(int)).ok());
  ASSERT_TRUE(s1->record(*after).ok());
  ASSERT_TRUE(s1->synchronize().ok());
  auto ms = after->elapsed_ms_since(*before);
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_GT(*ms, 0.0);
  cuda->deallocate(a);
  cuda->deallocate(b);
}

TEST_F(CudaAcceleratorTest, PinnedMemoryAndMemoryStats) {
  auto before = cuda->memory_stats();
  EXPECT_GT(before.total, before.available);
  void* d = cuda->allocate(64 << 20).value();
  auto during = cuda->memory_stats();
  EXPECT_EQ(during.allocated, before.allocated + (64u << 20));
  EXPECT_LT(during.available, before.available);
  void* pinned = cuda->allocate_host(1 << 20).value();
  std::memset(pinned, 3, 1 << 20);
  auto stream = cuda->create_stream().value();
  ASSERT_TRUE(stream->copy_async(d, pinned, 1 << 20).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  std::memset(pinned, 0, 1 << 20);
  ASSERT_TRUE(stream->copy_async(pinned, d, 1 << 20).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  EXPECT_EQ(static_cast<unsigned char*>(pinned)[12345], 3);
  cuda->deallocate_host(pinned);
  cuda->deallocate(d);
  auto after = cuda->memory_stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.max_allocated, before.allocated + (64u << 20));
}

TEST_F(CudaAcceleratorTest, ATemplatedKernelLaunchesThroughItsNameExpression) {
  testing::TempDir specs, local_cache;
  testing::write_templated_spec(specs);
  builders::OpsOptions o;
  o.cache_dir = local_cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cuda";
  auto local = builders::Ops::create(o).value();
  auto op = local->get("scale_f32");
  ASSERT_TRUE(op.ok()) << op.status().message();
  const long long n = 1000;
  std::vector<float> x(n);
  for (long long i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  void* dx = cuda->allocate(n * sizeof(float)).value();
  ASSERT_TRUE(cuda->copy(dx, x.data(), n * sizeof(float)).ok());
  float a = 0.5f;
  const void* args[] = {&dx, &a, &n};
  auto& stream = cuda->default_stream();
  ASSERT_TRUE((*op)->kernel().value()->launch(stream, {4, 1, 1}, {256, 1, 1}, args, 3).ok());
  ASSERT_TRUE(stream.synchronize().ok());
  std::vector<float> out(n);
  ASSERT_TRUE(cuda->copy(out.data(), dx, n * sizeof(float)).ok());
  for (long long i = 0; i < n; ++i) ASSERT_EQ(out[i], 0.5f * static_cast<float>(i)) << i;
  cuda->deallocate(dx);
}

TEST_F(CudaAcceleratorTest, ACapturedGraphReplaysItsLaunches) {
  // y += x, 100 times, captured once and replayed twice: y = y0 + 200 x.
  auto op = ops->get("axpby");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto* kernel = (*op)->kernel().value();
  const long long n = 10000;
  std::vector<float> x(n), y(n);
  for (long long i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 7);
    y[i] = static_cast<float>(i % 3);
  }
  void* dx = cuda->allocate(n * sizeof(float)).value();
  void* dy = cuda->allocate(n * sizeof(float)).value();
  ASSERT_TRUE(cuda->copy(dx, x.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(cuda->copy(dy, y.data(), n * sizeof(float)).ok());
  auto stream = cuda->create_stream().value();
  float one = 1.f;
  const void* args[] = {&one, &dx, &one, &dy, &n};
  ASSERT_TRUE(stream->begin_capture().ok());
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(kernel->launch(*stream, {static_cast<uint32_t>((n + 255) / 256), 1, 1}, {256, 1, 1}, args, 5).ok());
  auto graph = stream->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  std::vector<float> mid(n);
  ASSERT_TRUE(cuda->copy(mid.data(), dy, n * sizeof(float)).ok());
  EXPECT_EQ(mid[5], y[5]);  // captured, not run
  ASSERT_TRUE((*graph)->launch(*stream).ok());
  ASSERT_TRUE((*graph)->launch(*stream).ok());
  ASSERT_TRUE(stream->synchronize().ok());
  std::vector<float> out(n);
  ASSERT_TRUE(cuda->copy(out.data(), dy, n * sizeof(float)).ok());
  for (long long i = 0; i < n; ++i) ASSERT_EQ(out[i], y[i] + 200.f * x[i]) << i;
  cuda->deallocate(dx);
  cuda->deallocate(dy);
}

// These two need no GPU: they run here and in CI.
TEST(CudaWithoutAGpuTest, DetectionSaysWhyWithoutInitialisingTheDriver) {
  Status present = backends::cuda::CudaAccelerator::present_without_initialising();
  if (present.ok()) GTEST_SKIP() << "a GPU is present: the GPU tests above cover it";
  EXPECT_EQ(present.code(), StatusCode::kUnavailable);
  EXPECT_FALSE(present.message().empty());
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  Status hidden = backends::cuda::CudaAccelerator::present_without_initialising();
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_NE(hidden.message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << hidden.message();
}

TEST(CudaWithoutAGpuTest, NvtxRangesLoadFromTheToolkitAndCostNothingWithoutAProfiler) {
  auto nvtx = backends::cuda::nvtx();
  if (!nvtx.ok()) GTEST_SKIP() << nvtx.status().message();
  EXPECT_FALSE((*nvtx)->library.empty());
  // No profiler is attached: the calls return at once (the depth, or a negative number).
  (*nvtx)->range_push("kiln-test");
  (*nvtx)->range_pop();
}

}  // namespace
}  // namespace kiln
