// What an op costs in a resident process, from the fastest tier to a compile:
//   memory hit   Ops::get of an op already loaded (a hash-map lookup under a mutex)
//   disk hit     Ops::build: input key, manifest lookup, re-hash of the headers, index
//                lookup, blob read, zstd decode, hash check
//   disk + load  the same plus dlopen of the artifact from a memfd
//   compile      the in-process Clang + lld compile of the same op, warm
//   CUDA compile each bundled CUDA op to PTX and to cubin, through NVRTC and through Clang
//   CPU compile  each bundled op (and tools/bench/specs/system_headers) compiled for the CPU,
//                without a precompiled header and, where its first source starts with system
//                includes, with the one kiln would have stored for them
// Run: build/bin/kiln_bench (or tools/bench/compare for these and the whole-process figures).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "builders/ops.h"
#include "builders/precompiled_headers.h"
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
    o.spec_dirs = {Ops::bundled_spec_dir(), KILN_BENCH_SPEC_DIR};
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

// Each bundled op compiled for the running CPU in a resident process (the toolchain loaded):
// "plain" parses every header; "pch" is handed the precompiled header of its first source's
// include prefix, as a compile is once that PCH is stored. Named BM_CpuCompile/<op>/<how>.
void register_cpu_compiles() {
  std::vector<std::string> names;
  for (auto& file : fixture().ops->spec_files()) names.push_back(file.substr(file.find_last_of('/') + 1, file.size() - file.find_last_of('/') - 6));
  for (const std::string& op : names) {
    if (op == "empty") continue;
    for (const char* how : {"plain", "pch"}) {
      auto spec = std::make_shared<OpSpec>(fixture().ops->find_spec(op).value());
      auto request = std::make_shared<BuildRequest>(make_build_request(*spec, parse_target("cpu").value()).value());
      request->spec = spec.get();
      auto toolchain = jit::load_clang_toolchain();
      auto pch = std::make_shared<std::string>();
      if (std::string(how) == "pch") {
        if (!toolchain.ok()) continue;
        auto made = make_precompiled_header(**toolchain, *request, 0);
        if (!made.ok()) continue;  // no system includes at the top of its source
        *pch = std::move(made).value();
        request->compile.precompiled_headers[0] = *pch;
      }
      std::string name = "BM_CpuCompile/" + op + "/" + how;
      benchmark::RegisterBenchmark(name.c_str(), [spec, request, pch, toolchain](benchmark::State& state) {
        compile_repeatedly(state, toolchain, *request);
      })->Unit(benchmark::kMillisecond)->MinTime(1.0);
    }
  }
}

// Each bundled CUDA op compiled in a resident process (the toolchain already loaded, as in
// a kiln process serving ops), to PTX only (cuda:compute_90) and to a cubin for sm_90 plus
// PTX (cuda:sm_90), through NVRTC and through Clang's NVPTX back end; nvJitLink makes the
// cubins. For a kernel that includes the toolkit's headers, "clang-pch" is Clang handed the
// precompiled header kiln would have stored for them. tools/bench/compare times `nvcc -ptx` and
// `nvcc -cubin` subprocesses on the same sources next to these.
// Named BM_CudaCompile/<op>/<path>/<output>.
void register_cuda_compiles() {
  std::vector<std::string> ops;
  for (auto& file : fixture().ops->spec_files()) {
    auto spec = parse_spec_file(file);
    if (spec.ok() && spec->cuda) ops.push_back(spec->name);
  }
  for (const std::string& op : ops)
    for (std::string path : {"nvrtc", "clang", "clang-pch"})
      for (std::string output : {"ptx", "cubin"}) {
        auto spec = std::make_shared<OpSpec>(fixture().ops->find_spec(op).value());
        spec->cuda->toolchain = path == "nvrtc" ? "nvrtc" : "clang";
        auto target = parse_target(output == "ptx" ? "cuda:compute_90" : "cuda:sm_90").value();
        auto request = std::make_shared<BuildRequest>(make_build_request(*spec, target).value());
        request->spec = spec.get();
        auto toolchain = path == "nvrtc" ? jit::load_nvrtc_toolchain() : jit::load_clang_toolchain();
        auto pch = std::make_shared<std::string>();
        if (path == "clang-pch") {
          if (!toolchain.ok() || !request->compile.cuda_toolkit_headers) continue;  // the prelude needs none
          auto made = make_precompiled_header(**toolchain, *request, 0);
          if (!made.ok()) continue;
          *pch = std::move(made).value();
          request->compile.precompiled_headers[0] = *pch;
        }
        std::string name = "BM_CudaCompile/" + op + "/" + path + "/" + output;
        benchmark::RegisterBenchmark(name.c_str(), [spec, request, pch, toolchain](benchmark::State& state) {
          compile_repeatedly(state, toolchain, *request);
        })->Unit(benchmark::kMillisecond)->MinTime(1.0);
      }
}

}  // namespace
}  // namespace kiln::builders

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kiln::builders::register_cpu_compiles();
  kiln::builders::register_cuda_compiles();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
