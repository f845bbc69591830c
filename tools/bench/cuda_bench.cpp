// Launch overhead on a GPU: kiln's Kernel::launch against a bare cuLaunchKernel of the
// same function, both queued on one stream and synchronised once per 1,000 launches.
// The kernel is vector_add with n = 0 (one block of one thread that returns at once), so
// the figure is the launch path, not the kernel. Skips where there is no GPU.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>

#include "backends/cuda/cuda_driver.h"
#include "builders/ops.h"
#include "support/cuda_module_format.h"
#include "tools/bench/bench_util.h"

namespace kiln {
namespace {

struct Setup {
  std::unique_ptr<builders::Ops> ops;
  std::shared_ptr<builders::LoadedOp> op;
  runtime::Kernel* kernel = nullptr;
  std::unique_ptr<runtime::Stream> stream;
  void* bare_function = nullptr;
  void* bare_stream = nullptr;
  std::string error;

  Setup() {
    builders::OpsOptions o;
    o.accelerator = "cuda";
    auto made = builders::Ops::create(o);
    if (!made.ok()) {
      error = made.status().message();
      return;
    }
    ops = std::move(made).value();
    auto got = ops->get("vector_add");
    if (!got.ok()) {
      error = got.status().message();
      return;
    }
    op = got.value();
    kernel = op->kernel().value();
    stream = op->accelerator().create_stream().value();
    // The same code loaded a second time, straight through the driver.
    auto spec = ops->find_spec("vector_add").value();
    auto built = ops->build(spec, builders::parse_target(op->accelerator().native_target()).value()).value();
    auto image = decode_cuda_module(built.artifact).value();
    const auto& d = *backends::cuda::driver().value();
    void* module = nullptr;
    d.cuModuleLoadData(&module, image.cubins.rbegin()->second.c_str());
    d.cuModuleGetFunction(&bare_function, module, "vector_add");
    d.cuStreamCreate(&bare_stream, 1);
  }
  // vector_add with n = 0: one block of one thread that returns at once.
  Status launch_empty(runtime::Stream& s) const {
    void* null = nullptr;
    long long n = 0;
    const void* args[] = {&null, &null, &null, &n};
    return kernel->launch(s, {1, 1, 1}, {1, 1, 1}, args, 4);
  }
};

Setup& setup() {
  static Setup s;
  return s;
}

auto launch_empty = [](runtime::Stream& stream) { return setup().launch_empty(stream); };

void BM_KilnLaunch(benchmark::State& state) {
  auto& s = setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  int i = 0;
  for (auto _ : state) {
    if (!s.launch_empty(*s.stream).ok()) return state.SkipWithError("launch failed");
    if (++i % 1000 == 0) (void)s.stream->synchronize();
  }
  (void)s.stream->synchronize();
}
BENCHMARK(BM_KilnLaunch);

void BM_BareCuLaunchKernel(benchmark::State& state) {
  auto& s = setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  const auto& d = *backends::cuda::driver().value();
  void* null = nullptr;
  long long n = 0;
  void* args[] = {&null, &null, &null, &n};
  int i = 0;
  for (auto _ : state) {
    d.cuLaunchKernel(s.bare_function, 1, 1, 1, 1, 1, 1, 0, s.bare_stream, args, nullptr);
    if (++i % 1000 == 0) d.cuStreamSynchronize(s.bare_stream);
  }
  d.cuStreamSynchronize(s.bare_stream);
}
BENCHMARK(BM_BareCuLaunchKernel);

// 100 launches of the empty kernel, issued one by one or replayed as one captured graph;
// each iteration ends with a synchronize.
void BM_100Launches(benchmark::State& state) {
  auto& s = setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  bench::launches_then_synchronize(state, *s.stream, launch_empty, 100);
}
BENCHMARK(BM_100Launches)->Unit(benchmark::kMicrosecond);

void BM_GraphOf100Launches(benchmark::State& state) {
  auto& s = setup();
  if (!s.error.empty()) return state.SkipWithError(s.error.c_str());
  bench::graph_of_launches(state, *s.stream, launch_empty, 100);
}
BENCHMARK(BM_GraphOf100Launches)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
