// CUDA written the way frameworks write it, not the way kiln's own kernels are: each kernel of
// tests/builders/cuda_corpus (llm.c-style cache-hinted bf16 layer norm with cooperative groups'
// reduce, every cache hint on every type, half/bfloat16 conversions, inline PTX, cuda::std, CUB
// block primitives, two translation units sharing extern __device__ state, warp and atomic
// intrinsics, the math API, WMMA, asynchronous copies, FP8, sm_90 clusters, CUDA 12.8's scoped
// atomics) compiles through the default CUDA route ("auto") for sm_80 and for sm_90, and the test
// prints which route took each: where the route "auto" chose first cannot compile a kernel (NVRTC
// has no <cstdint>; Clang has no __nv_atomic_*), the other one does.
// Every one of them compiles with nvcc 13.0 for both (checked when they were written).
//
// Needs a CUDA toolkit's headers and nvJitLink, not a GPU: nothing here launches.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "builders/ops.h"
#include "jit/nvrtc/nvjitlink.h"
#include "jit/toolchain_loader.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"
#include "tests/test_util.h"

#ifndef KILN_CUDA_CORPUS_DIR
#error "KILN_CUDA_CORPUS_DIR must name tests/builders/cuda_corpus"
#endif

namespace kiln::builders {
namespace {

struct CorpusKernel {
  std::string name;                  // the op, and its entry (an extern "C" kernel)
  std::vector<std::string> sources;  // in tests/builders/cuda_corpus
  std::string params;                // the entry's parameters, as a spec writes them
};

const std::vector<CorpusKernel>& corpus() {
  static const std::vector<CorpusKernel> kernels = {
      {"llmc_layernorm", {"llmc_layernorm.cu"},
       R"("void* out", "float* mean", "float* rstd", "const void* inp", "const void* weight", "const void* bias", "int n", "int c")"},
      {"cache_hints", {"cache_hints.cu"}, R"("float* y", "const int* q")"},
      {"conversions", {"conversions.cu"}, R"("const float* x", "void* h", "void* b", "int* n", "float* y")"},
      {"inline_ptx", {"inline_ptx.cu"}, R"("const void* x", "float* y", "int8_t* q", "uint32_t* w")"},
      {"cuda_std", {"cuda_std.cu"}, R"("const float* x", "float* y", "int64_t n")"},
      {"cub_block", {"cub_block.cu"}, R"("const float* x", "float* prefix", "float* totals", "float* warp_max")"},
      {"extern_kernel", {"extern_state.cu", "extern_kernel.cu"}, R"("const float* x", "float* y", "float a", "int n")"},
      {"warp_atomics", {"warp_atomics.cu"},
       R"("const float* x", "float* sum", "double* dsum", "void* h2", "void* b2", "unsigned* counts", "void* tags", "uint64_t* when")"},
      {"math_intrinsics", {"math_intrinsics.cu"},
       R"("const float* x", "float* y", "const unsigned* u", "unsigned* w", "const int* a", "int* b")"},
      {"wmma_tile", {"wmma_tile.cu"}, R"("const void* a", "const void* b", "float* c")"},
      {"async_copy", {"async_copy.cu"}, R"("const void* x", "float* y")"},
      {"fp8_quant", {"fp8_quant.cu"}, R"("const void* x", "void* q", "void* g", "float* scale", "float* back")"},
      {"hopper_cluster", {"hopper_cluster.cu"}, R"("void* p")"},
      {"scoped_atomic", {"scoped_atomic.cu"}, R"("int* counter", "int* flag", "int* y")"},
  };
  return kernels;
}

// A spec for `k` in `dir`, its sources copied beside it.
void write_spec(const testing::TempDir& dir, const CorpusKernel& k) {
  std::string sources;
  for (auto& s : k.sources) {
    sources += (sources.empty() ? "\"" : ", \"") + s + "\"";
    dir.write(s, testing::read_text(std::string(KILN_CUDA_CORPUS_DIR) + "/" + s));
  }
  dir.write(k.name + ".toml", "name = \"" + k.name + "\"\nlanguage = \"cpp\"\nsources = [\"" + k.name + ".cpp\"]\n[[entry]]\nname = \"" +
                                   k.name + "\"\nparams = [" + k.params + "]\n[cuda]\nsources = [" + sources + "]\n");
  dir.write(k.name + ".cpp", "\n");
}

class CudaCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("KILN_CUDA_TOOLCHAIN");  // the default route
    if (!jit::clang_toolchain_present()) GTEST_SKIP() << "kiln was built without the Clang toolchain";
    if (!cuda_headers_at(cuda_toolkit_root())) GTEST_SKIP() << "no CUDA toolkit headers at " << cuda_toolkit_root();
    if (!jit::nvjitlink_available()) GTEST_SKIP() << "no nvJitLink here to make cubins";
  }
  testing::TempDir specs, cache;
};

TEST_F(CudaCorpusTest, EveryKernelCompilesForSm80AndSm90ThroughTheDefaultRoute) {
  for (auto& k : corpus()) write_spec(specs, k);
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto ops = Ops::create(o).value();
  std::string table = "kernel            target       route                  result      ms\n";
  for (auto& k : corpus()) {
    for (const char* target : {"cuda:sm_80", "cuda:sm_90"}) {
      SCOPED_TRACE(k.name + " for " + target);
      auto spec = ops->find_spec(k.name);
      ASSERT_TRUE(spec.ok()) << spec.status().message();
      auto r = ops->build(*spec, parse_target(target).value());
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_TRUE(r->success) << r->diagnostics_text() << r->log;
      // The route that made it, and the one "auto" chose first when that one failed.
      std::string route = r->success ? r->route + (r->fallback_from.empty() ? "" : " (" + r->fallback_from + " failed)") : "-";
      if (r->success) {  // stored under the key of the route that made it
        auto record = ops->store()->record(r->key);
        ASSERT_TRUE(record.ok() && record->has_value());
        EXPECT_EQ((*record)->toolchain.rfind(r->route == "clang" ? "clang" : "nvrtc", 0), 0u) << (*record)->toolchain;
      }
      if (r->success) {
        auto image = decode_cuda_module(r->artifact);
        ASSERT_TRUE(image.ok()) << image.status().message();
        int sm = std::string(target) == "cuda:sm_80" ? 80 : 90;
        ASSERT_EQ(image->cubins.count(sm), 1u);  // nvJitLink's ptxas took the PTX
        EXPECT_NE(image->ptx.find(k.name), std::string::npos);
      }
      char line[160];
      std::snprintf(line, sizeof line, "%-17s %-12s %-22s %-8s %6.0f\n", k.name.c_str(), target, route.c_str(),
                    r->success ? "ok" : "FAILED", r->total_ms);
      table += line;
    }
  }
  std::printf("CUDA corpus through the default route (KILN_CUDA_TOOLCHAIN unset):\n%s", table.c_str());
  std::fflush(stdout);
}

// A route that failed for some inputs is not tried again for them: another process on the same
// cache goes straight to the route that compiled them, and finds its artifact stored (no compile).
// A route forced by KILN_CUDA_TOOLCHAIN is never replaced: its failure is the answer.
TEST_F(CudaCorpusTest, AFailedRouteIsRememberedAndAForcedRouteIsNotReplaced) {
  const CorpusKernel& k = corpus()[3];  // inline_ptx: NVRTC has no <cstdint>
  ASSERT_EQ(k.name, "inline_ptx");
  write_spec(specs, k);
  auto ops_for = [&] {
    OpsOptions o;
    o.cache_dir = cache.path();
    o.spec_dirs = {specs.path()};
    o.accelerator = "cpu";
    return Ops::create(o).value();
  };
  const Target sm90 = parse_target("cuda:sm_90").value();
  {
    auto ops = ops_for();
    auto first = ops->build(ops->find_spec(k.name).value(), sm90);
    ASSERT_TRUE(first.ok() && first->success) << (first.ok() ? first->diagnostics_text() : first.status().message());
    EXPECT_EQ(first->route, "clang");
    EXPECT_EQ(first->fallback_from, "nvrtc");
    EXPECT_EQ(ops->compile_count(), 2u);  // NVRTC's attempt, then Clang's
  }
  auto ops = ops_for();
  auto again = ops->build(ops->find_spec(k.name).value(), sm90);
  ASSERT_TRUE(again.ok() && again->success);
  EXPECT_EQ(again->route, "clang");
  EXPECT_EQ(again->fallback_from, "nvrtc");
  EXPECT_EQ(again->cache, CacheOutcome::kDisk);
  EXPECT_EQ(ops->compile_count(), 0u);  // NVRTC was not asked again

  ::setenv("KILN_CUDA_TOOLCHAIN", "nvrtc", 1);
  auto forced = ops->build(ops->find_spec(k.name).value(), sm90);
  ::unsetenv("KILN_CUDA_TOOLCHAIN");
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->success);
  EXPECT_EQ(forced->route, "nvrtc");
  EXPECT_NE(forced->diagnostics_text().find("cstdint"), std::string::npos) << forced->diagnostics_text();
}

}  // namespace
}  // namespace kiln::builders
