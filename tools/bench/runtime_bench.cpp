// What the runtime costs on the CPU backend, next to what it is compared with in the same run:
//   BM_CpuLaunchEmpty        one launch of an empty kernel, queued: 1,000 launches then one
//                            synchronize, time per launch (the stream's thread runs them as
//                            they come, so this is the sustained launch rate)
//   BM_Cpu100Launches        100 empty launches + synchronize
//   BM_CpuGraphOf100Launches the same 100 launches captured once, replayed + synchronize
//   BM_EventRecordQuery      record an event on an idle stream and query it
//   BM_VectorAdd256MiBVsBandwidth
//                            kiln's bundled vector_add over three 256 MiB arrays, in turn with
//                            the same sum as a plain threaded C++ loop (STREAM's "add") and a
//                            threaded memcpy of 256 MiB, one thread per core: the machine's
//                            measured memory bandwidth is the better of those two
//   BM_OpThroughput/<op>     each bundled op at ~256 MiB per array (AdamW at 16 Mi and 256 Mi
//                            parameters), in turn with a threaded STREAM triad (a = b + s c)
//                            and copy (a = b) over 256 MiB arrays: GB/s of each, and the op's
//                            fraction of the triad's (a store to a line not read first costs
//                            the line's read too, which STREAM does not count: an op that
//                            writes only what it read, as AdamW does, can pass 100%)
// Bytes are counted as STREAM counts them (2 reads + 1 write per element for add and triad;
// for the ops, every byte an element must be read or written, in k_ops below).
// Run: build/bin/kiln_runtime_bench, or tools/bench/compare for every figure in the README;
// KILN_SPEC_PATH=<folder of specs> measures those ops instead of the bundled ones.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "tools/bench/bench_util.h"

namespace kiln {
namespace {

constexpr size_t k_vector_bytes = size_t{256} << 20;
constexpr int64_t k_vector_floats = k_vector_bytes / sizeof(float);

struct Fixture {
  bench::TempCacheDir cache;
  std::unique_ptr<builders::Ops> ops;
  runtime::Accelerator* acc = nullptr;
  runtime::Kernel* empty = nullptr;
  runtime::Kernel* vector_add = nullptr;
  float* scratch = nullptr;

  Fixture() {
    builders::OpsOptions o;
    o.cache_dir = cache.path;
    o.accelerator = "cpu";
    // The bundled specs, or those $KILN_SPEC_PATH names (another version of the ops, to compare).
    o.spec_dirs = builders::Ops::default_spec_dirs();
    o.spec_dirs.insert(o.spec_dirs.begin(), KILN_BENCH_SPEC_DIR);
    ops = builders::Ops::create(o).value();
    acc = &ops->accelerator();
    empty = ops->get("empty").value()->kernel().value();
    vector_add = ops->get("vector_add").value()->kernel().value();
    scratch = static_cast<float*>(acc->allocate(64).value());
  }
  Status launch_empty(runtime::Stream& s) {
    const void* args[] = {&scratch};
    return empty->launch(s, {1, 1, 1}, {1, 1, 1}, args, 1);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

auto launch_empty = [](runtime::Stream& s) { return fixture().launch_empty(s); };

void BM_CpuLaunchEmpty(benchmark::State& state) {
  auto stream = fixture().acc->create_stream().value();
  bench::launches_then_synchronize(state, *stream, launch_empty, 1000);
  state.SetItemsProcessed(state.iterations() * 1000);
  state.counters["ns_per_launch"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 1000, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CpuLaunchEmpty)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Cpu100Launches(benchmark::State& state) {
  auto stream = fixture().acc->create_stream().value();
  bench::launches_then_synchronize(state, *stream, launch_empty, 100);
}
BENCHMARK(BM_Cpu100Launches)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CpuGraphOf100Launches(benchmark::State& state) {
  auto stream = fixture().acc->create_stream().value();
  bench::graph_of_launches(state, *stream, launch_empty, 100);
}
BENCHMARK(BM_CpuGraphOf100Launches)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_EventRecordQuery(benchmark::State& state) {
  auto& f = fixture();
  auto stream = f.acc->create_stream().value();
  auto event = f.acc->create_event().value();
  for (auto _ : state) {
    (void)stream->record(*event);
    benchmark::DoNotOptimize(event->query());
  }
  (void)stream->synchronize();
}
BENCHMARK(BM_EventRecordQuery)->UseRealTime();

// Three 256 MiB arrays, touched once so page faults are not timed.
struct Vectors {
  std::vector<float*> p;
  explicit Vectors(runtime::Accelerator* acc) {
    for (int i = 0; i < 3; ++i) {
      p.push_back(static_cast<float*>(acc->allocate(k_vector_bytes).value()));
      std::memset(p.back(), 0, k_vector_bytes);
    }
  }
};

// Splits [0, n) over one thread per core and runs fn(begin, end) on each.
template <typename Fn>
void on_every_core(int64_t n, Fn fn) {
  unsigned t = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < t; ++i) threads.emplace_back([&, i] { fn(n * i / t, n * (i + 1) / t); });
  for (auto& th : threads) th.join();
}

double seconds_of(auto&& fn) {
  auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// kiln's vector_add and the two baselines, taken in turn within each iteration so that the
// drift of a shared VM's memory bandwidth (it moved by a third between runs minutes apart
// here) falls on all three alike. Counters in GB/s (1e9 bytes), and kiln's fraction of the
// better baseline. Iteration time is all three together.
void BM_VectorAdd256MiBVsBandwidth(benchmark::State& state) {
  auto& f = fixture();
  Vectors v(f.acc);
  auto& stream = f.acc->default_stream();
  int64_t n = k_vector_floats;
  const void* args[] = {&v.p[0], &v.p[1], &v.p[2], &n};
  uint32_t blocks = static_cast<uint32_t>((n + 4095) / 4096);
  const float* __restrict a = v.p[0];
  const float* __restrict b = v.p[1];
  float* __restrict c = v.p[2];
  double kiln_s = 0, add_s = 0, copy_s = 0;
  for (auto _ : state) {
    kiln_s += seconds_of([&] {
      (void)f.vector_add->launch(stream, {blocks, 1, 1}, {4096, 1, 1}, args, 4);
      (void)stream.synchronize();
    });
    add_s += seconds_of([&] {
      on_every_core(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
      });
    });
    copy_s += seconds_of([&] {
      on_every_core(static_cast<int64_t>(k_vector_bytes), [&](int64_t begin, int64_t end) {
        std::memcpy(reinterpret_cast<char*>(c) + begin, reinterpret_cast<const char*>(a) + begin,
                    static_cast<size_t>(end - begin));
      });
    });
  }
  double it = static_cast<double>(state.iterations());
  double kiln = 3.0 * k_vector_bytes * it / kiln_s / 1e9, add = 3.0 * k_vector_bytes * it / add_s / 1e9,
         copy = 2.0 * k_vector_bytes * it / copy_s / 1e9;
  state.counters["kiln_GBps"] = kiln;
  state.counters["stream_add_GBps"] = add;
  state.counters["memcpy_GBps"] = copy;
  state.counters["fraction"] = kiln / std::max(add, copy);
  for (auto* p : v.p) f.acc->deallocate(p);
}
BENCHMARK(BM_VectorAdd256MiBVsBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(3.0);

// A bandwidth-bound op at a size like the baselines', and the bytes one pass of it must move.
struct ThroughputCase {
  const char* op;
  std::map<std::string, int64_t> dims;
  double bytes;      // read + written, counted as STREAM counts
  const char* name;  // the benchmark's name when one op is measured at several sizes
};
const ThroughputCase k_ops[] = {
    // p, m, v read and written (4 bytes each), g read (4, or 2 in bf16). 16 Mi parameters is the
    // size issue 19 quotes DeepSpeed's CPU Adam at (448 MB moved: 14x this machine's 32 MiB L3);
    // 256 Mi (7.5 GB moved) is far beyond any L3.
    {"adamw", {{"n", 16 << 20}}, (16 << 20) * 28.0, "adamw_16M"},
    {"adamw", {{"n", 256 << 20}}, (256.0 * (1 << 20)) * 28.0, "adamw_256M"},
    {"adamw_bf16", {{"n", 16 << 20}}, (16 << 20) * 26.0, nullptr},
    // x read, y written.
    {"gelu", {{"n", 64 << 20}}, (64 << 20) * 8.0, nullptr},
    {"gelu_bf16", {{"n", 64 << 20}}, (64 << 20) * 4.0, nullptr},
    // x read (4), q written (1), a 4-byte scale per 128 elements.
    {"quantize_int8", {{"n", 64 << 20}, {"group", 128}}, (64 << 20) * (5.0 + 4.0 / 128), nullptr},
    {"dequantize_int8", {{"n", 64 << 20}, {"group", 128}}, (64 << 20) * (5.0 + 4.0 / 128), nullptr},
    // Rows of 4096: x read, y written (the passes over a row after the first hit the cache).
    {"layer_norm", {{"rows", 16384}, {"cols", 4096}}, (64 << 20) * 8.0, nullptr},
    {"softmax_online", {{"rows", 16384}, {"cols", 4096}}, (64 << 20) * 8.0, nullptr},
    {"row_softmax", {{"rows", 16384}, {"cols", 4096}}, (64 << 20) * 8.0, nullptr},
    // x read; one float per chunk of 4096 written (negligible).
    {"reduce_sum", {{"n", 64 << 20}, {"chunk", 4096}}, (64 << 20) * 4.0, nullptr},
    {"sum_reduce", {{"n", 64 << 20}}, (64 << 20) * 4.0, nullptr},
    // x read, y read and written.
    {"axpby", {{"n", 64 << 20}}, (64 << 20) * 12.0, nullptr},
    // a, b read, out written (at the spec's launch shape; BM_VectorAdd256MiBVsBandwidth launches 4096 a block).
    {"vector_add", {{"n", 64 << 20}}, (64 << 20) * 12.0, nullptr},
};

void op_throughput(benchmark::State& state, const ThroughputCase& c) {
  auto& f = fixture();
  auto op = f.ops->get(c.op);
  if (!op.ok()) return state.SkipWithError(op.status().message().c_str());
  auto launch = builders::CheckLaunch::prepare(**op, {c.dims, 1});
  if (!launch.ok()) return state.SkipWithError(launch.status().message().c_str());
  Vectors v(f.acc);
  int64_t n = k_vector_floats;
  const float* __restrict b = v.p[0];
  const float* __restrict d = v.p[1];
  float* __restrict a = v.p[2];
  auto& stream = f.acc->default_stream();
  (void)(*launch)->launch(stream);  // once untimed: the outputs' pages are touched
  (void)stream.synchronize();
  double op_s = 0, triad_s = 0, copy_s = 0;
  for (auto _ : state) {
    op_s += seconds_of([&] {
      (void)(*launch)->launch(stream);
      (void)stream.synchronize();
    });
    triad_s += seconds_of([&] {
      on_every_core(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * d[i];
      });
    });
    copy_s += seconds_of([&] {
      on_every_core(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) a[i] = b[i];
      });
    });
  }
  double it = static_cast<double>(state.iterations());
  double op_gbps = c.bytes * it / op_s / 1e9, triad = 3.0 * k_vector_bytes * it / triad_s / 1e9;
  state.counters["op_GBps"] = op_gbps;
  state.counters["triad_GBps"] = triad;
  state.counters["copy_GBps"] = 2.0 * k_vector_bytes * it / copy_s / 1e9;
  state.counters["fraction"] = op_gbps / triad;
  for (auto* p : v.p) f.acc->deallocate(p);
}

[[maybe_unused]] const bool k_registered = [] {
  for (const auto& c : k_ops)
    benchmark::RegisterBenchmark((std::string("BM_OpThroughput/") + (c.name ? c.name : c.op)).c_str(), [&c](benchmark::State& s) { op_throughput(s, c); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  return true;
}();

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
