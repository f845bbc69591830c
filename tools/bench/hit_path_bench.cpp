// What an op costs in a resident process, from the fastest tier to a compile:
//   memory hit   Ops::get of an op already loaded (a hash-map lookup under a mutex)
//   disk hit     Ops::build: input key, manifest lookup, re-hash of the headers, index
//                lookup, blob read, zstd decode, hash check
//   disk + load  the same plus dlopen of the artifact from a memfd
//   compile      the in-process Clang + lld compile of the same op, warm
//   CUDA compile each bundled CUDA op to PTX and to cubin, through NVRTC and through Clang
// Run: build/bin/kiln_bench (or tools/bench/run for this and the whole-process figures).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "builders/ops.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "jit/toolchain_loader.h"
#include "tools/bench/bench_util.h"

namespace kiln::builders {
namespace {

struct Fixture {
  bench::TempCacheDir cache;
  std::unique_ptr<Ops> ops;
  OpSpec spec;
  Target target;

  Fixture() {
    OpsOptions o;
    o.cache_dir = cache.path;
    ops = Ops::create(o).value();
    spec = ops->find_spec("vector_add").value();
    target = parse_target("cpu").value();
    if (!ops->build(spec, target).value().success) std::abort();  // fills the cache
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_MemoryHit(benchmark::State& state) {
  auto& f = fixture();
  auto first = f.ops->get("vector_add").value();
  for (auto _ : state) benchmark::DoNotOptimize(f.ops->get("vector_add").value().get());
}
BENCHMARK(BM_MemoryHit);

void BM_DiskHit(benchmark::State& state) {
  auto& f = fixture();
  for (auto _ : state) {
    auto outcome = f.ops->build(f.spec, f.target).value();
    if (outcome.cache != CacheOutcome::kDisk) state.SkipWithError("not a disk hit");
    benchmark::DoNotOptimize(outcome.artifact.data());
  }
}
BENCHMARK(BM_DiskHit)->Unit(benchmark::kMicrosecond);

void BM_DiskHitAndLoad(benchmark::State& state) {
  auto& f = fixture();
  for (auto _ : state) {
    auto outcome = f.ops->build(f.spec, f.target).value();
    runtime::ModuleImage image{outcome.kind, outcome.target, outcome.artifact, outcome.kernels, "op vector_add"};
    auto module = f.ops->accelerator().load_module(image).value();
    benchmark::DoNotOptimize(module.get());
  }
}
BENCHMARK(BM_DiskHitAndLoad)->Unit(benchmark::kMicrosecond);

// Compiles one request over and over with an already-loaded toolchain.
void compile_repeatedly(benchmark::State& state, Result<jit::Toolchain*> toolchain, const BuildRequest& request) {
  if (!toolchain.ok()) return state.SkipWithError(toolchain.status().message().c_str());
  for (auto _ : state) {
    auto result = (*toolchain)->compile(request.compile);
    if (!result.success) state.SkipWithError("compile failed");
  }
}

void BM_WarmCompile(benchmark::State& state) {
  auto& f = fixture();
  compile_repeatedly(state, jit::load_clang_toolchain(), make_build_request(f.spec, f.target).value());
}
BENCHMARK(BM_WarmCompile)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// Each bundled CUDA op compiled in a resident process (the toolchain already loaded, as in
// a kiln process serving ops), to PTX only (cuda:compute_90) and to a cubin for sm_90 plus
// PTX (cuda:sm_90), through NVRTC and through Clang's NVPTX back end (kiln's prelude, no CUDA
// headers); nvJitLink makes the cubins. tools/bench/run times `nvcc -ptx` and `nvcc -cubin`
// subprocesses on the same sources next to these. Named BM_CudaCompile/<op>/<path>/<output>.
void register_cuda_compiles() {
  for (const char* op : {"axpby", "row_softmax", "sum_reduce", "vector_add"})
    for (const char* path : {"nvrtc", "clang"})
      for (const char* output : {"ptx", "cubin"}) {
        std::string name = std::string("BM_CudaCompile/") + op + "/" + path + "/" + output;
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
          auto spec = fixture().ops->find_spec(op).value();
          spec.cuda->toolchain = path;
          auto target = parse_target(std::string(output) == "ptx" ? "cuda:compute_90" : "cuda:sm_90").value();
          auto request = make_build_request(spec, target).value();
          compile_repeatedly(state, std::string(path) == "nvrtc" ? jit::load_nvrtc_toolchain() : jit::load_clang_toolchain(),
                             request);
        })->Unit(benchmark::kMillisecond)->MinTime(1.0);
      }
}

}  // namespace
}  // namespace kiln::builders

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kiln::builders::register_cuda_compiles();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
