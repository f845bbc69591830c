// The OpenCL backend on PoCL beside the CPU backend, in one run, on the same bundled ops:
//   BM_LaunchOverhead/<backend>     vector_add over 256 elements (one block), 1,000 launches
//                                   then one synchronize: time per launch
//   BM_Throughput/<backend>/<op>    a bandwidth-bound bundled op at 16-32 Mi elements: GB/s
//                                   moved (every byte an element must be read or written)
//   BM_ProgramLoad/opencl/<how>     loading gelu on PoCL in a fresh Ops: with the device binary
//                                   built from OpenCL C source (an empty cache) or reloaded from
//                                   the store (a warm cache), compile and lookup included
// The OpenCL rows skip, saying why, where no OpenCL device is.
// Run: build/bin/kiln_device_bench, or tools/bench/compare --only targets.
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "tools/bench/bench_util.h"

namespace kiln {
namespace {

struct Backend {
  bench::TempCacheDir cache;
  std::unique_ptr<builders::Ops> ops;
  Status status;
  explicit Backend(const std::string& name) {
    builders::OpsOptions o;
    o.cache_dir = cache.path;
    o.accelerator = name;
    o.spec_dirs = {builders::Ops::bundled_spec_dir()};
    auto made = builders::Ops::create(o);
    if (made.ok()) ops = std::move(made).value();
    else status = made.status();
  }
};

Backend& backend(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Backend>> made;
  auto& b = made[name];
  if (!b) b = std::make_unique<Backend>(name);
  return *b;
}

Result<std::unique_ptr<builders::CheckLaunch>> prepare(const std::string& acc, const std::string& op,
                                                       const std::map<std::string, int64_t>& dims) {
  Backend& b = backend(acc);
  if (!b.ops) return b.status;
  KILN_ASSIGN_OR_RETURN(auto loaded, b.ops->get(op));
  return builders::CheckLaunch::prepare(*loaded, {dims, 1});
}

void launch_overhead(benchmark::State& state, const std::string& acc) {
  auto launch = prepare(acc, "vector_add", {{"n", 256}});
  if (!launch.ok()) return state.SkipWithError(launch.status().message().c_str());
  auto& stream = backend(acc).ops->accelerator().default_stream();
  for (auto _ : state) {
    for (int i = 0; i < 1000; ++i) (void)(*launch)->launch(stream);
    (void)stream.synchronize();
  }
  state.counters["us_per_launch"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 1000 / 1e6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

struct ThroughputCase {
  const char* op;
  std::map<std::string, int64_t> dims;
  double bytes;
};
const ThroughputCase k_ops[] = {
    {"vector_add", {{"n", 32 << 20}}, (32 << 20) * 12.0},
    {"gelu", {{"n", 32 << 20}}, (32 << 20) * 8.0},
    {"adamw", {{"n", 16 << 20}}, (16 << 20) * 28.0},
    {"quantize_int8", {{"n", 32 << 20}, {"group", 128}}, (32 << 20) * (5.0 + 4.0 / 128)},
    {"softmax_online", {{"rows", 8192}, {"cols", 4096}}, (32 << 20) * 8.0},
};

void throughput(benchmark::State& state, const std::string& acc, const ThroughputCase& c) {
  auto launch = prepare(acc, c.op, c.dims);
  if (!launch.ok()) return state.SkipWithError(launch.status().message().c_str());
  auto& stream = backend(acc).ops->accelerator().default_stream();
  (void)(*launch)->launch(stream);  // once untimed: pages touched, the program warm
  (void)stream.synchronize();
  for (auto _ : state) {
    (void)(*launch)->launch(stream);
    (void)stream.synchronize();
  }
  state.counters["GBps"] = benchmark::Counter(c.bytes / 1e9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void program_load(benchmark::State& state, bool warm) {
  if (!backend("opencl").ops) return state.SkipWithError(backend("opencl").status.message().c_str());
  bench::TempCacheDir warm_cache;
  auto make = [](const std::string& dir) {
    builders::OpsOptions o;
    o.cache_dir = dir;
    o.accelerator = "opencl";
    o.spec_dirs = {builders::Ops::bundled_spec_dir()};
    return builders::Ops::create(o).value();
  };
  if (warm) (void)make(warm_cache.path)->get("gelu");  // compiled and the device binary kept
  for (auto _ : state) {
    state.PauseTiming();
    bench::TempCacheDir cold_cache;
    auto ops = make(warm ? warm_cache.path : cold_cache.path);
    state.ResumeTiming();
    auto op = ops->get("gelu");
    if (!op.ok()) return state.SkipWithError(op.status().message().c_str());
  }
}

[[maybe_unused]] const bool k_registered = [] {
  for (std::string acc : {"cpu", "opencl"}) {
    benchmark::RegisterBenchmark(("BM_LaunchOverhead/" + acc).c_str(), [acc](benchmark::State& s) { launch_overhead(s, acc); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    for (const auto& c : k_ops)
      benchmark::RegisterBenchmark(("BM_Throughput/" + acc + "/" + c.op).c_str(), [acc, &c](benchmark::State& s) { throughput(s, acc, c); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(1.0);
  }
  benchmark::RegisterBenchmark("BM_ProgramLoad/opencl/built_from_source", [](benchmark::State& s) { program_load(s, false); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("BM_ProgramLoad/opencl/device_binary_reloaded", [](benchmark::State& s) { program_load(s, true); })
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  return true;
}();

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
