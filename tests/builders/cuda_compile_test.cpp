// CUDA compiles through NVRTC: no GPU needed, so these run wherever the CUDA toolkit is
// installed, and skip (saying why) where it is not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "builders/ops.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "support/cuda_module_format.h"
#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

class CudaCompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto nvrtc = jit::load_nvrtc_toolchain();
    if (!nvrtc.ok()) GTEST_SKIP() << "NVRTC is not installed here: " << nvrtc.status().message();
    OpsOptions o;
    o.cache_dir = cache.path();
    o.spec_dirs = {testing::bundled_spec_dir()};
    o.accelerator = "cpu";
    ops = Ops::create(o).value();
  }
  // Writes a one-off op `name` into `specs` (its parameters as a TOML array's items, its CUDA
  // source `cu`, an empty CPU source) and builds it for cuda:sm_90.
  BuildOutcome build_one_off(const testing::TempDir& specs, const std::string& name, const std::string& params,
                             const std::string& cu) {
    specs.write(name + ".toml", "name = \"" + name + "\"\nlanguage = \"cpp\"\nsources = [\"" + name + ".cpp\"]\n[[entry]]\n" +
                                    "name = \"" + name + "\"\nparams = [" + params + "]\n[cuda]\nsources = [\"" + name + ".cu\"]\n");
    specs.write(name + ".cpp", "\n");
    specs.write(name + ".cu", cu);
    OpsOptions o;
    o.cache_dir = cache.path();
    o.spec_dirs = {specs.path()};
    o.accelerator = "cpu";
    auto local = Ops::create(o).value();
    return local->build(local->find_spec(name).value(), parse_target("cuda:sm_90").value()).value();
  }
  testing::TempDir cache;
  std::unique_ptr<Ops> ops;
};

TEST_F(CudaCompileTest, EveryBundledOpCompilesToCubinAndPtxThenHits) {
  for (const std::string& name : testing::bundled_op_names()) {
    for (const char* arch : {"cuda:sm_80", "cuda:sm_90"}) {
      auto spec = ops->find_spec(name).value();
      auto outcome = ops->build(spec, parse_target(arch).value());
      ASSERT_TRUE(outcome.ok()) << outcome.status().message();
      ASSERT_TRUE(outcome->success) << name << " " << arch << "\n" << outcome->diagnostics_text();
      EXPECT_EQ(outcome->kind, "cuda-module");
      auto image = decode_cuda_module(outcome->artifact);
      ASSERT_TRUE(image.ok());
      int sm = std::atoi(arch + 8);
      ASSERT_EQ(image->cubins.size(), 1u);
      EXPECT_EQ(image->cubins.begin()->first, sm);
      EXPECT_EQ(image->cubins.begin()->second.substr(1, 3), "ELF");
      EXPECT_EQ(image->ptx_sm, sm);
      // A templated entry is in the module under its instance's symbol.
      const std::string& symbol = outcome->kernels[0].symbol.empty() ? name : outcome->kernels[0].symbol;
      EXPECT_NE(image->ptx.find(".entry " + symbol), std::string::npos) << name;
      auto again = ops->build(spec, parse_target(arch).value()).value();
      EXPECT_EQ(again.cache, CacheOutcome::kDisk);
      EXPECT_EQ(again.key, outcome->key);
    }
  }
  EXPECT_EQ(ops->compile_count(), 2 * testing::bundled_op_names().size());
}

TEST_F(CudaCompileTest, TheArchitectureAndTheCudaSourceAreInTheKey) {
  auto spec = ops->find_spec("axpby").value();
  auto a = ops->build(spec, parse_target("cuda:sm_80").value()).value();
  auto b = ops->build(spec, parse_target("cuda:sm_90").value()).value();
  EXPECT_NE(a.key, b.key);
  auto cpu = ops->build(spec, parse_target("cpu").value());
  if (!cpu.ok()) GTEST_SKIP() << "no cpu toolchain here to compare with: " << cpu.status().message();
  EXPECT_NE(a.key, cpu->key);
}

TEST_F(CudaCompileTest, AnArchitectureListGivesACubinPerArchitectureAndPtxForTheOldest) {
  auto target = parse_target("cuda:sm_100,sm_80,sm_90,sm_80").value();
  EXPECT_EQ(target.str(), "cuda:sm_80,sm_90,sm_100");  // sorted, duplicates dropped: one key
  auto outcome = ops->build(ops->find_spec("row_softmax").value(), target).value();
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  auto image = decode_cuda_module(outcome.artifact).value();
  ASSERT_EQ(image.cubins.size(), 3u);
  EXPECT_EQ(image.ptx_sm, 80);
  // What each GPU would load: its own cubin, a same-major one, or the PTX.
  bool cubin = false;
  int used = 0;
  EXPECT_FALSE(pick_cuda_code(image, 90, &cubin, &used).empty());
  EXPECT_TRUE(cubin);
  EXPECT_EQ(used, 90);
  pick_cuda_code(image, 86, &cubin, &used);
  EXPECT_TRUE(cubin);
  EXPECT_EQ(used, 80);
  pick_cuda_code(image, 120, &cubin, &used);
  EXPECT_FALSE(cubin);
  EXPECT_EQ(used, 80);
  EXPECT_TRUE(pick_cuda_code(image, 75, &cubin, &used).empty());
}

TEST_F(CudaCompileTest, AComputeTargetIsPtxOnly) {
  auto target = parse_target("cuda:compute_90");
  ASSERT_TRUE(target.ok()) << target.status().message();
  EXPECT_EQ(target->str(), "cuda:compute_90");
  EXPECT_FALSE(parse_target("cuda:compute_9x").ok());
  EXPECT_FALSE(parse_target("cuda:compute_").ok());
  for (const char* toolchain : {"nvrtc", "clang"}) {
    ::setenv("KILN_CUDA_TOOLCHAIN", toolchain, 1);
    auto outcome = ops->build(ops->find_spec("row_softmax").value(), *target);
    ::unsetenv("KILN_CUDA_TOOLCHAIN");
    if (!outcome.ok()) {
      EXPECT_STREQ(toolchain, "clang") << outcome.status().message();  // a node without the Clang library
      continue;
    }
    ASSERT_TRUE(outcome->success) << toolchain << "\n" << outcome->diagnostics_text();
    auto image = decode_cuda_module(outcome->artifact);
    ASSERT_TRUE(image.ok());
    EXPECT_TRUE(image->cubins.empty()) << toolchain;
    EXPECT_EQ(image->ptx_sm, 90);
    EXPECT_NE(image->ptx.find(".target sm_90"), std::string::npos) << toolchain;
  }
}

TEST_F(CudaCompileTest, ACompileErrorComesBackWithItsLine) {
  testing::TempDir specs;
  auto outcome = build_one_off(specs, "bad", "\"float* x\"",
                               "extern \"C\" __global__ void bad(float* x) {\n  x[0] = undefined_thing;\n}\n");
  EXPECT_FALSE(outcome.success);
  ASSERT_FALSE(outcome.diagnostics.empty());
  EXPECT_EQ(outcome.diagnostics[0].file, specs / "bad.cu");
  EXPECT_EQ(outcome.diagnostics[0].line, 2u);
  EXPECT_NE(outcome.diagnostics[0].message.find("undefined_thing"), std::string::npos);
  // NVRTC compiles twice (--minimal, then without) before it gives up: the error is told once.
  EXPECT_EQ(outcome.diagnostics.size(), 1u) << outcome.diagnostics_text();
}

TEST_F(CudaCompileTest, AKernelThatNeedsWhatMinimalLeavesOutStillCompiles) {
  // Textures are among what NVRTC's --minimal omits: kiln compiles again without it.
  testing::TempDir specs;
  auto outcome = build_one_off(specs, "tex", "\"uint64_t t\", \"float* out\"",
                               "extern \"C\" __global__ void tex(cudaTextureObject_t t, float* out) {\n"
                               "  out[threadIdx.x] = tex1Dfetch<float>(t, threadIdx.x);\n}\n");
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  EXPECT_TRUE(outcome.diagnostics.empty()) << outcome.diagnostics_text();
  auto image = decode_cuda_module(outcome.artifact);
  ASSERT_TRUE(image.ok());
  EXPECT_NE(image->ptx.find("tex.1d"), std::string::npos);
}

TEST_F(CudaCompileTest, AnOlderGpuIsRefusedBeforeCompiling) {
  auto spec = ops->find_spec("sum_reduce").value();  // min_sm = 60: double atomicAdd
  auto old = ops->build(spec, parse_target("cuda:sm_52").value());
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("needs compute capability 60 or newer; cuda:sm_52 is 52"), std::string::npos)
      << old.status().message();
  EXPECT_EQ(ops->compile_count(), 0u);
  EXPECT_FALSE(parse_target("cuda").ok());
  EXPECT_FALSE(parse_target("cuda:sm_9x").ok());
}

// The second CUDA path: Clang's NVPTX back end in this process, kiln's prelude instead of the
// CUDA headers, cubins from nvJitLink. No NVRTC involved.
TEST_F(CudaCompileTest, TheClangPathCompilesEveryBundledOpToo) {
  testing::TempDir specs;
  testing::copy_bundled_specs(specs.path());
  for (const std::string& name : testing::bundled_op_names()) {
    std::string text = testing::read_text(specs / (name + ".toml"));
    text.replace(text.find("[cuda]\n"), 7, "[cuda]\ntoolchain = \"clang\"\n");
    specs.write(name + ".toml", text);
  }
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto clang_ops = Ops::create(o).value();
  for (const std::string& name : testing::bundled_op_names()) {
    auto spec = clang_ops->find_spec(name).value();
    auto target = parse_target("cuda:sm_80,sm_90").value();
    auto outcome = clang_ops->build(spec, target);
    if (!outcome.ok()) GTEST_SKIP() << outcome.status().message();
    ASSERT_TRUE(outcome->success) << name << "\n" << outcome->diagnostics_text();
    auto image = decode_cuda_module(outcome->artifact).value();
    EXPECT_NE(image.ptx.find("Generated by LLVM NVPTX Back-End"), std::string::npos);
    const std::string& symbol = outcome->kernels[0].symbol.empty() ? name : outcome->kernels[0].symbol;
    EXPECT_NE(image.ptx.find(".entry " + symbol), std::string::npos) << name;
    ASSERT_EQ(image.cubins.size(), 2u);
    EXPECT_EQ(image.cubins.at(90).substr(1, 3), "ELF");
    // Not the NVRTC artifact's key, and a hit the second time.
    ::setenv("KILN_CUDA_TOOLCHAIN", "nvrtc", 1);
    auto nvrtc = ops->build(ops->find_spec(name).value(), target).value();
    ::unsetenv("KILN_CUDA_TOOLCHAIN");
    EXPECT_NE(nvrtc.key, outcome->key);
    EXPECT_EQ(clang_ops->build(spec, target)->cache, CacheOutcome::kDisk);
  }
}

TEST_F(CudaCompileTest, ATemplatedEntryIsFoundThroughItsNameExpression) {
  testing::TempDir specs;
  testing::write_templated_spec(specs);
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  auto spec = local->find_spec("scale_f32").value();
  auto outcome = local->build(spec, parse_target("cuda:sm_90").value()).value();
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  ASSERT_EQ(outcome.kernels.size(), 1u);
  EXPECT_EQ(outcome.kernels[0].name, "scale_f32");
  EXPECT_EQ(outcome.kernels[0].symbol, "_Z5scaleIfEvPT_S0_x");
  auto image = decode_cuda_module(outcome.artifact).value();
  EXPECT_NE(image.ptx.find(".entry _Z5scaleIfEvPT_S0_x"), std::string::npos);
  // The symbol survives the cache.
  auto again = local->build(spec, parse_target("cuda:sm_90").value()).value();
  EXPECT_EQ(again.cache, CacheOutcome::kDisk);
  EXPECT_EQ(again.kernels[0].symbol, "_Z5scaleIfEvPT_S0_x");
  // An expression that names nothing is an error with the expression in it.
  specs.write("scale_f32.toml", testing::read_text(specs / "scale_f32.toml").replace(
                                    testing::read_text(specs / "scale_f32.toml").find("scale<float>"), 12, "scal<float>"));
  auto bad = local->build(local->find_spec("scale_f32").value(), parse_target("cuda:sm_90").value()).value();
  EXPECT_FALSE(bad.success);
}

// Kernels written the way frameworks write them: the toolkit's half types, cooperative groups
// with their reduce, CUB, and libcu++, with the toolkit's own headers (through NVRTC when asked:
// by default CUB and cooperative groups take Clang's path, tests/builders/cuda_headers_test.cpp).
constexpr const char* k_toolkit_kernel = R"(#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/limits>
namespace cg = cooperative_groups;
extern "C" __global__ void toolkit(const float* x, float* y, __nv_bfloat16* z) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  float s = cg::reduce(warp, x[threadIdx.x], cg::plus<float>{});
  using BlockReduce = cub::BlockReduce<float, 256>;
  __shared__ typename BlockReduce::TempStorage scratch;
  float t = BlockReduce(scratch).Sum(x[threadIdx.x]);
  __half h = __float2half(s);
  z[threadIdx.x] = __float2bfloat16(t + __half2float(h) + cuda::std::numeric_limits<float>::epsilon());
  if (warp.thread_rank() == 0) y[blockIdx.x] = s;
}
)";

TEST_F(CudaCompileTest, ToolkitHeadersCompileThroughNvrtc) {
  testing::TempDir specs;
  ::setenv("KILN_CUDA_TOOLCHAIN", "nvrtc", 1);
  auto outcome = build_one_off(specs, "toolkit", "\"const float* x\", \"float* y\", \"void* z\"", k_toolkit_kernel);
  ::unsetenv("KILN_CUDA_TOOLCHAIN");
  EXPECT_EQ(outcome.headers_parsed, std::nullopt);  // NVRTC does not say
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  auto image = decode_cuda_module(outcome.artifact).value();
  EXPECT_NE(image.ptx.find(".entry toolkit"), std::string::npos);
  EXPECT_EQ(image.cubins.at(90).substr(1, 3), "ELF");
  // NVRTC does not say which headers it read: the toolkit's headers are in its identity.
  auto identity = jit::nvrtc_toolchain_identity().value();
  EXPECT_NE(identity.find(";cuda-headers=13."), std::string::npos) << identity;
}

TEST_F(CudaCompileTest, AMissingHeaderIsNamedAndTheFailureIsNotCached) {
  testing::TempDir specs;
  specs.write("include/.keep", "");
  specs.write("late.toml", "name = \"late\"\nlanguage = \"cpp\"\nsources = [\"late.cpp\"]\ninclude_dirs = [\"include\"]\n"
                           "[[entry]]\nname = \"late\"\nparams = [\"float* x\"]\n[cuda]\nsources = [\"late.cu\"]\n");
  specs.write("late.cpp", "\n");
  specs.write("late.cu", "#include \"late_value.h\"\nextern \"C\" __global__ void late(float* x) { x[0] = LATE_VALUE; }\n");
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  auto target = parse_target("cuda:sm_90").value();
  auto missing = local->build(local->find_spec("late").value(), target).value();
  ASSERT_FALSE(missing.success);
  EXPECT_NE(missing.diagnostics_text().find("late_value.h"), std::string::npos) << missing.diagnostics_text();
  EXPECT_TRUE(missing.warnings.empty());  // no "cannot hash header" about a file that is not there
  // The header appears; no input of the key changed, yet this compiles now.
  specs.write("include/late_value.h", "#define LATE_VALUE 2.0f\n");
  auto found = local->build(local->find_spec("late").value(), target).value();
  EXPECT_TRUE(found.success) << found.diagnostics_text();
  EXPECT_EQ(found.cache, CacheOutcome::kCompiled);
}

TEST_F(CudaCompileTest, ToolkitHeadersCompileThroughClangToo) {
  testing::TempDir specs;
  ::setenv("KILN_CUDA_TOOLCHAIN", "clang", 1);
  auto outcome = build_one_off(specs, "toolkit", "\"const float* x\", \"float* y\", \"void* z\"", k_toolkit_kernel);
  ::unsetenv("KILN_CUDA_TOOLCHAIN");
  if (!outcome.success && outcome.diagnostics.empty()) GTEST_SKIP() << "no Clang toolchain here";
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  auto image = decode_cuda_module(outcome.artifact).value();
  EXPECT_NE(image.ptx.find("Generated by LLVM NVPTX Back-End"), std::string::npos);
  EXPECT_NE(image.ptx.find(".entry toolkit"), std::string::npos);
  // Clang reports the toolkit headers it read: they are in the manifest, so in the key.
  auto manifest = ops->store()->get_manifest(outcome.input_key).value();
  ASSERT_TRUE(manifest.has_value());
  EXPECT_NE(manifest->find("/include/cuda_fp16.h\t"), std::string::npos) << *manifest;
  EXPECT_NE(manifest->find("/include/cccl/cub/block/block_reduce.cuh\t"), std::string::npos);
}

// Clang parses the toolkit's headers once per machine: the PCH of a kernel's includes is
// kept in the cache and the next kernel that starts with the same includes compiles with it.
TEST_F(CudaCompileTest, TheClangPathKeepsTheToolkitHeadersPrecompiled) {
  testing::TempDir specs;
  for (const char* name : {"first", "second"}) {
    std::string cu = k_toolkit_kernel;
    cu.replace(cu.find("void toolkit("), 13, std::string("void ") + name + "(");
    specs.write(std::string(name) + ".toml", "name = \"" + std::string(name) + "\"\nlanguage = \"cpp\"\nsources = [\"k.cpp\"]\n"
                "[[entry]]\nname = \"" + name + "\"\nparams = [\"const float* x\", \"float* y\", \"void* z\"]\n"
                "[cuda]\nsources = [\"" + name + ".cu\"]\ntoolchain = \"clang\"\n");
    specs.write(std::string(name) + ".cu", cu);
  }
  specs.write("k.cpp", "\n");
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  auto target = parse_target("cuda:sm_80,sm_90").value();
  auto first = local->build(local->find_spec("first").value(), target);
  if (!first.ok()) GTEST_SKIP() << first.status().message();
  ASSERT_TRUE(first->success) << first->diagnostics_text();
  EXPECT_EQ(first->pch_building, 1u);
  local->wait_background();
  auto second = local->build(local->find_spec("second").value(), target).value();
  ASSERT_TRUE(second.success) << second.diagnostics_text();
  EXPECT_EQ(second.pch_used, 1u);
  auto image = decode_cuda_module(second.artifact).value();
  EXPECT_NE(image.ptx.find(".entry second"), std::string::npos);
  EXPECT_EQ(image.cubins.size(), 2u);
}

TEST_F(CudaCompileTest, ATemplatedEntryWithExternSharedMemoryCompilesThroughBothPaths) {
  testing::TempDir specs;
  testing::write_block_sum_spec(specs);
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  for (const char* toolchain : {"nvrtc", "clang"}) {
    ::setenv("KILN_CUDA_TOOLCHAIN", toolchain, 1);
    auto outcome = local->build(local->find_spec("block_sum_f32").value(), parse_target("cuda:sm_80,sm_90").value());
    ::unsetenv("KILN_CUDA_TOOLCHAIN");
    if (!outcome.ok()) continue;  // no Clang library on this node
    ASSERT_TRUE(outcome->success) << toolchain << "\n" << outcome->diagnostics_text();
    EXPECT_EQ(outcome->kernels[0].symbol, "_Z9block_sumIfLi128EEvPKT_PS0_x") << toolchain;
    auto image = decode_cuda_module(outcome->artifact).value();
    EXPECT_NE(image.ptx.find(".extern .shared"), std::string::npos) << toolchain;
    EXPECT_EQ(image.cubins.size(), 2u);
  }
}

// Relocatable device code: a kernel calling a function and reading a variable of another
// source. NVRTC links LTO-IR through nvJitLink; Clang links LLVM modules in this process. Both
// give one PTX with the helper inlined into the kernel, and a cubin per architecture.
TEST_F(CudaCompileTest, SeveralCudaSourcesAreLinkedThroughBothPaths) {
  testing::TempDir specs;
  testing::write_two_source_spec(specs);
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  for (const char* toolchain : {"nvrtc", "clang"}) {
    ::setenv("KILN_CUDA_TOOLCHAIN", toolchain, 1);
    auto outcome = local->build(local->find_spec("two_sources").value(), parse_target("cuda:sm_80,sm_90").value());
    ::unsetenv("KILN_CUDA_TOOLCHAIN");
    if (!outcome.ok()) continue;  // no Clang library on this node
    ASSERT_TRUE(outcome->success) << toolchain << "\n" << outcome->diagnostics_text();
    auto image = decode_cuda_module(outcome->artifact).value();
    EXPECT_NE(image.ptx.find(".entry two_sources("), std::string::npos) << toolchain;
    EXPECT_EQ(image.ptx.find("call.uni"), std::string::npos) << toolchain << ": the helper was not inlined\n" << image.ptx;
    EXPECT_EQ(image.ptx.find(".extern"), std::string::npos) << toolchain << ": something was left unresolved";
    EXPECT_EQ(image.ptx_sm, 80);
    ASSERT_EQ(image.cubins.size(), 2u);
    EXPECT_EQ(image.cubins.at(90).substr(1, 3), "ELF");
  }
  // Both sources are in the key: editing the second one is a new artifact.
  auto before = local->build(local->find_spec("two_sources").value(), parse_target("cuda:sm_90").value()).value();
  specs.write("helper.cu", "__device__ float scale = 4.0f;\n__device__ float helper(float x) { return x * 3.0f + 1.0f; }\n");
  auto after = local->build(local->find_spec("two_sources").value(), parse_target("cuda:sm_90").value()).value();
  EXPECT_NE(after.key, before.key);
  EXPECT_EQ(after.cache, CacheOutcome::kCompiled);
}

// A self-contained kernel that uses what kiln's prelude lacks (here __popc and __brev) still
// compiles through Clang: against the toolkit's headers, the prelude kept in the manifest.
TEST_F(CudaCompileTest, AKernelBeyondThePreludeCompilesThroughClangWithTheToolkitHeaders) {
  testing::TempDir specs;
  ::setenv("KILN_CUDA_TOOLCHAIN", "clang", 1);
  auto outcome = build_one_off(specs, "bits", "\"unsigned* x\"",
                               "extern \"C\" __global__ void bits(unsigned* x) { x[threadIdx.x] = __popc(__brev(x[threadIdx.x])); }\n");
  ::unsetenv("KILN_CUDA_TOOLCHAIN");
  if (!outcome.success && outcome.diagnostics.empty()) GTEST_SKIP() << "no Clang toolchain here";
  ASSERT_TRUE(outcome.success) << outcome.diagnostics_text();
  EXPECT_TRUE(outcome.diagnostics.empty()) << outcome.diagnostics_text();  // the prelude's errors are not reported
  auto manifest = ops->store()->get_manifest(outcome.input_key).value();
  ASSERT_TRUE(manifest.has_value());
  EXPECT_NE(manifest->find("kiln-cuda:kiln/cuda_prelude.h\t"), std::string::npos) << *manifest;
  EXPECT_NE(manifest->find("/include/cuda_runtime.h\t"), std::string::npos);
}

TEST_F(CudaCompileTest, ATemplatedEntryCompilesThroughClangToo) {
  testing::TempDir specs;
  testing::write_templated_spec(specs);
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {specs.path()};
  o.accelerator = "cpu";
  auto local = Ops::create(o).value();
  ::setenv("KILN_CUDA_TOOLCHAIN", "clang", 1);
  auto outcome = local->build(local->find_spec("scale_f32").value(), parse_target("cuda:sm_90").value());
  ::unsetenv("KILN_CUDA_TOOLCHAIN");
  if (!outcome.ok()) GTEST_SKIP() << outcome.status().message();
  ASSERT_TRUE(outcome->success) << outcome->diagnostics_text();
  EXPECT_EQ(outcome->kernels[0].symbol, "_Z5scaleIfEvPT_S0_x");  // the same symbol NVRTC gives
  auto image = decode_cuda_module(outcome->artifact).value();
  EXPECT_NE(image.ptx.find(".entry _Z5scaleIfEvPT_S0_x("), std::string::npos);
  EXPECT_EQ(image.ptx.find("kiln_entry_ref"), std::string::npos);  // the helper variable is gone
  EXPECT_EQ(image.cubins.at(90).substr(1, 3), "ELF");
}

// The toolkit's headers are in every NVRTC key: a toolkit whose headers differ (here a copy of
// this one with one header edited, and NVRTC itself linked in) gives other keys.
TEST_F(CudaCompileTest, EditingAToolkitHeaderChangesNvrtcKeys) {
  std::string real = std::filesystem::canonical(jit::nvrtc_search_paths().front() + "/libnvrtc.so.13").string();
  testing::TempDir toolkit;
  std::filesystem::create_directories(toolkit / "lib64");
  std::error_code ec;
  std::filesystem::create_hard_link(real, toolkit / "lib64/libnvrtc.so.13", ec);
  if (ec) std::filesystem::copy_file(real, toolkit / "lib64/libnvrtc.so.13");
  std::filesystem::copy(dirname_of(dirname_of(real)) + "/include", toolkit / "include", std::filesystem::copy_options::recursive);
  auto key_with = [&](const std::map<std::string, std::string>& env) {
    auto r = testing::run_process({testing::kiln_binary(), "--cache-dir", cache.path(), "build",
                                   testing::bundled_spec_dir() + "/axpby.toml", "--target", "cuda:sm_90", "--json"},
                                  env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto pos = r.out.find("\"key\":\"");
    return pos == std::string::npos ? std::string() : r.out.substr(pos + 7, 32);
  };
  std::string original = key_with({});
  std::string copied = key_with({{"KILN_NVRTC_LIBRARY", toolkit / "lib64/libnvrtc.so.13"}});
  EXPECT_EQ(copied, original);  // the same bytes elsewhere: the same key
  std::string header = toolkit / "include/cuda_fp16.hpp";
  std::ofstream(header, std::ios::app) << "\n// patched\n";
  std::string patched = key_with({{"KILN_NVRTC_LIBRARY", toolkit / "lib64/libnvrtc.so.13"}});
  EXPECT_NE(patched, original);
}

// CUDA 12.0-12.7's NVRTC has no precompiled headers and fails a compile given -pch (a real 12.6
// answers NVRTC_ERROR_INVALID_OPTION). kiln asks NVRTC for a PCH only where it has them: a
// kernel whose first include is a toolkit header (cuda_bf16.h) compiles through such an NVRTC
// (tests/builders/nvrtc_without_pch.cpp, the real one behind it) to the same PTX.
TEST_F(CudaCompileTest, AnNvrtcWithoutPrecompiledHeadersCompilesWithoutThem) {
  std::string real = std::filesystem::canonical(jit::nvrtc_search_paths().front() + "/libnvrtc.so.13").string();
  auto build = [&](const std::map<std::string, std::string>& env, const std::string& out) {
    testing::TempDir own_cache;
    auto r = testing::run_process({testing::kiln_binary(), "--cache-dir", own_cache.path(), "build",
                                   testing::bundled_spec_dir() + "/adamw.toml", "--target", "cuda:sm_90", "-o", out},
                                  env);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    auto bytes = read_file(out);
    return bytes.ok() ? decode_cuda_module(bytes.value()) : Result<CudaModuleImage>(bytes.status());
  };
  auto with_pch = build({}, cache / "with.module");
  auto without = build({{"KILN_NVRTC_LIBRARY", KILN_NVRTC_WITHOUT_PCH}, {"KILN_TEST_REAL_NVRTC", real}}, cache / "without.module");
  ASSERT_TRUE(with_pch.ok() && without.ok());
  EXPECT_EQ(without->ptx, with_pch->ptx);
  EXPECT_EQ(without->cubins.size(), 1u);
}

TEST(CudaAbsentTest, MissingNvrtcIsOneClearMessage) {
  testing::TempDir cache;
  auto r = testing::run_process({testing::kiln_binary(), "--cache-dir", cache.path(), "build",
                                 testing::bundled_spec_dir() + "/vector_add.toml", "--target", "cuda:sm_90"},
                                {{"KILN_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("CUDA targets need NVRTC"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/libnvrtc.so.13"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln::builders
