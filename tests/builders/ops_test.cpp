// The ops API end to end: real specs, the real in-process compiler, a real cache folder,
// kernels launched on the CPU accelerator and checked against their references.
#include "builders/ops.h"

#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "builders/self_check.h"
#include "runtime/host_cpu.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

std::unique_ptr<Ops> make_ops(const std::string& cache, std::vector<std::string> spec_dirs = {}) {
  OpsOptions o;
  o.cache_dir = cache;
  o.spec_dirs = spec_dirs.empty() ? std::vector<std::string>{testing::bundled_spec_dir()} : spec_dirs;
  auto ops = Ops::create(o);
  EXPECT_TRUE(ops.ok()) << ops.status().message();
  return std::move(ops).value();
}

// A templated kernel as an entry, instantiated as the spec says, and each block of the launch
// with its own dynamic shared memory (blocks run concurrently on the worker pool).
TEST(OpsTest, ATemplatedEntryWithDynamicSharedMemoryRunsAndPassesItsCheck) {
  testing::TempDir cache, specs;
  testing::write_block_sum_spec(specs);
  auto ops = make_ops(cache.path(), {specs.path()});
  auto op = ops->get("block_sum_f32");
  ASSERT_TRUE(op.ok()) << op.status().message();
  for (int64_t n : {1, 128, 100003, 1 << 20}) {
    auto report = run_self_check(*ops, **op, {{{"n", n}}, 3});
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->passed) << "n=" << n << ": " << report->message;
  }
  // An instance that names nothing is a compile error that says where the entry comes from.
  std::string toml = testing::read_text(specs / "block_sum_f32.toml");
  toml.replace(toml.find("block_sum<float, 128>"), 21, "block_summ<float, 128>");
  specs.write("block_sum_f32.toml", toml);
  auto bad = ops->build(ops->find_spec("block_sum_f32").value(), parse_target("cpu").value()).value();
  EXPECT_FALSE(bad.success);
  EXPECT_NE(bad.diagnostics_text().find("kiln: entry points of op block_sum_f32 (generated):"), std::string::npos)
      << bad.diagnostics_text();
}

TEST(OpsTest, SeveralSourcesAreLinkedIntoOneModule) {
  testing::TempDir cache, specs;
  testing::write_two_source_spec(specs);
  auto ops = make_ops(cache.path(), {specs.path()});
  auto op = ops->get("two_sources");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto report = run_self_check(*ops, **op);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->passed) << report->message;
}

TEST(OpsTest, MissThenHitFromDiskThenFromMemory) {
  testing::TempDir cache;
  auto first = make_ops(cache.path());
  auto spec = first->find_spec("vector_add").value();
  auto target = parse_target("cpu").value();
  auto cold = first->build(spec, target).value();
  ASSERT_TRUE(cold.success) << cold.diagnostics_text();
  EXPECT_EQ(cold.cache, CacheOutcome::kCompiled);
  EXPECT_GT(cold.compile_ms, 0);
  EXPECT_EQ(first->compile_count(), 1u);

  auto second = make_ops(cache.path());  // a fresh Ops: nothing in memory
  auto warm = second->build(spec, target).value();
  EXPECT_EQ(warm.cache, CacheOutcome::kDisk);
  EXPECT_EQ(warm.key, cold.key);
  EXPECT_EQ(warm.artifact, cold.artifact);
  EXPECT_EQ(second->compile_count(), 0u);

  auto a = second->get("vector_add").value();
  auto b = second->get("vector_add").value();
  EXPECT_EQ(a.get(), b.get());  // the second get is a map lookup
  EXPECT_EQ(second->compile_count(), 0u);
}

struct SizeCase {
  std::string op;
  std::map<std::string, int64_t> dims;
};

TEST(OpsTest, EveryBundledOpMatchesItsReferenceAtSeveralSizes) {
  testing::TempDir cache;
  auto ops = make_ops(cache.path());
  const std::vector<SizeCase> cases = {
      {"vector_add", {{"n", 1}}},        {"vector_add", {{"n", 255}}},    {"vector_add", {{"n", 256}}},
      {"vector_add", {{"n", 257}}},      {"vector_add", {{"n", 100003}}}, {"axpby", {{"n", 1}}},
      {"axpby", {{"n", 511}}},           {"axpby", {{"n", 513}}},         {"axpby", {{"n", 77777}}},
      {"row_softmax", {{"rows", 1}, {"cols", 1}}},  {"row_softmax", {{"rows", 3}, {"cols", 1000}}},
      {"row_softmax", {{"rows", 257}, {"cols", 33}}}, {"sum_reduce", {{"n", 1}}}, {"sum_reduce", {{"n", 4095}}},
      {"sum_reduce", {{"n", 4097}}},     {"sum_reduce", {{"n", 1000003}}},
      // The real ops, at sizes that do not divide their blocks, groups or chunks.
      {"adamw", {{"n", 1}}},             {"adamw", {{"n", 4097}}},        {"adamw_bf16", {{"n", 8191}}},
      {"layer_norm", {{"rows", 1}, {"cols", 1}}}, {"layer_norm", {{"rows", 3}, {"cols", 4099}}},
      {"softmax_online", {{"rows", 2}, {"cols", 1}}}, {"softmax_online", {{"rows", 5}, {"cols", 17}}},
      {"softmax_online", {{"rows", 1}, {"cols", 100003}}},
      {"gelu", {{"n", 1}}},              {"gelu", {{"n", 4095}}},         {"gelu_bf16", {{"n", 4097}}},
      {"quantize_int8", {{"n", 1}, {"group", 128}}},   {"quantize_int8", {{"n", 129}, {"group", 128}}},
      {"quantize_int8", {{"n", 1000}, {"group", 64}}}, {"dequantize_int8", {{"n", 257}, {"group", 128}}},
      {"reduce_sum", {{"n", 1}, {"chunk", 4096}}},     {"reduce_sum", {{"n", 4097}, {"chunk", 4096}}},
  };
  for (const auto& c : cases) {
    auto op = ops->get(c.op);
    ASSERT_TRUE(op.ok()) << op.status().message();
    for (uint64_t seed : {1, 2}) {
      CheckOptions options{c.dims, seed};
      auto report = run_self_check(*ops, **op, options);
      ASSERT_TRUE(report.ok()) << report.status().message();
      std::string dims;
      for (auto& [k, v] : c.dims) dims += k + "=" + std::to_string(v) + " ";
      EXPECT_TRUE(report->passed) << c.op << " " << dims << ": " << report->message;
      EXPECT_GT(report->elements_compared, 0u);
    }
  }
  // The defaults from the specs as well.
  for (const std::string& name : testing::bundled_op_names()) {
    auto report = run_self_check(*ops, *ops->get(name).value());
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->passed) << name << ": " << report->message;
  }
}

TEST(OpsTest, ABrokenKernelFailsItsCheck) {
  // The check must be able to fail: a kernel that skips the last element of every block.
  testing::TempDir specs, cache;
  testing::copy_bundled_specs(specs.path());
  std::string src = testing::read_text(specs / "kernels/vector_add.cpp");
  auto pos = src.find("i < r.end;");
  ASSERT_NE(pos, std::string::npos);
  src.replace(pos, 10, "i + 1 < r.end;");
  specs.write("kernels/vector_add.cpp", src);
  auto ops = make_ops(cache.path(), {specs.path()});
  auto report = run_self_check(*ops, *ops->get("vector_add").value());
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->passed);
  EXPECT_NE(report->message.find("out[255]"), std::string::npos) << report->message;
}

// A CPU op is one source for every x86-64 level: built for v2 (SSE4.2), v3 (AVX2) and v4
// (AVX-512) it must give its reference's results at each, with the vector width and the code
// paths each level picks (tails of loops, tiles of rows, tables made on first use).
TEST(OpsTest, EveryBundledCpuOpMatchesItsReferenceAtEveryCpuLevelThisHostRuns) {
  testing::TempDir cache;
  auto ops = make_ops(cache.path());
  const int host = runtime::host_x86_level();
  if (host < 2) GTEST_SKIP() << "this CPU runs no x86-64-v2 code";
  const std::vector<SizeCase> odd_sizes = {
      {"adamw", {{"n", 4097}}},           {"adamw_bf16", {{"n", 8191}}},     {"gelu", {{"n", 4095}}},
      {"gelu_bf16", {{"n", 4097}}},       {"gelu_bf16", {{"n", 1}}},         {"row_softmax", {{"rows", 3}, {"cols", 1}}},
      {"softmax_online", {{"rows", 5}, {"cols", 17}}}, {"softmax_online", {{"rows", 1}, {"cols", 100003}}},
      {"row_softmax", {{"rows", 2}, {"cols", 100003}}}, {"layer_norm", {{"rows", 3}, {"cols", 4099}}},
      {"sum_reduce", {{"n", 4097}}},      {"reduce_sum", {{"n", 4097}, {"chunk", 4096}}},
  };
  for (int level = 2; level <= host; ++level) {
    const std::string target = "cpu:" + runtime::x86_level_name(level);
    for (const std::string& name : testing::bundled_op_names()) {
      auto op = ops->get(name, target);
      ASSERT_TRUE(op.ok()) << name << " " << target << ": " << op.status().message();
      auto report = run_self_check(*ops, **op);
      ASSERT_TRUE(report.ok()) << report.status().message();
      EXPECT_TRUE(report->passed) << name << " " << target << ": " << report->message;
    }
    for (const auto& c : odd_sizes) {
      auto op = ops->get(c.op, target);
      ASSERT_TRUE(op.ok()) << op.status().message();
      auto report = run_self_check(*ops, **op, {c.dims, 3});
      ASSERT_TRUE(report.ok()) << report.status().message();
      EXPECT_TRUE(report->passed) << c.op << " " << target << ": " << report->message;
    }
  }
}

TEST(OpsTest, EightThreadsAskingAtOnceCompileOnce) {
  testing::TempDir cache;
  auto ops = make_ops(cache.path());
  std::latch start(8);
  std::vector<std::shared_ptr<LoadedOp>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      auto op = ops->get("row_softmax");
      if (op.ok()) got[t] = op.value();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ops->compile_count(), 1u);
  for (auto& g : got) {
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g.get(), got[0].get());
  }
}

constexpr const char* k_broken_spec = R"(name = "broken"
language = "cpp"
sources = ["broken.cpp"]
[[entry]]
name = "broken"
params = ["float* x", "int64_t n"]
)";

// Loadable artifacts in the store (cached failures are entries too, of kind compile-error).
size_t loadable_artifacts(Ops& ops) {
  size_t n = 0;
  for (auto& r : ops.store()->list().value()) n += (r.kind != "compile-error") ? 1 : 0;
  return n;
}

TEST(OpsTest, CompileErrorIsReportedWithItsLineCachedAsAFailureAndFixedByANewKey) {
  testing::TempDir specs, cache;
  specs.write("broken.toml", k_broken_spec);
  specs.write("broken.cpp",
              "#include <kiln/cpu_kernel.h>\n"
              "void broken(const kiln::cpu::Block& b, float* x, int64_t n) {\n"
              "  x[0] = undeclared_name;\n"
              "}\n");
  auto ops = make_ops(cache.path(), {specs.path()});
  auto outcome = ops->build(ops->find_spec("broken").value(), parse_target("cpu").value());
  ASSERT_TRUE(outcome.ok());
  EXPECT_FALSE(outcome->success);
  ASSERT_FALSE(outcome->diagnostics.empty());
  const auto& d = outcome->diagnostics[0];
  EXPECT_EQ(d.file, specs / "broken.cpp");
  EXPECT_EQ(d.line, 3u);
  EXPECT_EQ(d.column, 10u);
  EXPECT_EQ(d.severity, jit::Diagnostic::Severity::kError);
  EXPECT_NE(d.message.find("undeclared_name"), std::string::npos);
  EXPECT_NE(outcome->log.find("x[0] = undeclared_name;"), std::string::npos);  // printed like a compiler
  EXPECT_EQ(loadable_artifacts(*ops), 0u);

  // Asking again, here or in another process, gets the same error from the cache.
  auto op = ops->get("broken");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), StatusCode::kCompileError);
  EXPECT_NE(op.status().message().find("broken.cpp:3:10: error:"), std::string::npos) << op.status().message();
  EXPECT_EQ(ops->compile_count(), 1u);
  auto other = make_ops(cache.path(), {specs.path()});
  auto again = other->build(other->find_spec("broken").value(), parse_target("cpu").value()).value();
  EXPECT_FALSE(again.success);
  EXPECT_EQ(again.cache, CacheOutcome::kDisk);
  EXPECT_EQ(again.diagnostics_text(), outcome->diagnostics_text());
  EXPECT_EQ(other->compile_count(), 0u);
  EXPECT_EQ(loadable_artifacts(*ops), 0u);

  // Fixing the source is a new key: it compiles, and loads.
  specs.write("broken.cpp",
              "#include <kiln/cpu_kernel.h>\n"
              "void broken(const kiln::cpu::Block& b, float* x, int64_t n) {\n"
              "  x[0] = 1;\n"
              "}\n");
  auto fixed = other->get("broken");
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(other->compile_count(), 1u);
  EXPECT_EQ(loadable_artifacts(*ops), 1u);
}

TEST(OpsTest, EntryWhoseSignatureDiffersFromTheSpecIsALinkError) {
  testing::TempDir specs, cache;
  specs.write("broken.toml", k_broken_spec);
  // int n instead of the spec's int64_t n: a different function, so the entry is undefined.
  specs.write("broken.cpp", "#include <kiln/cpu_kernel.h>\nvoid broken(const kiln::cpu::Block& b, float* x, int n) {}\n");
  auto ops = make_ops(cache.path(), {specs.path()});
  auto outcome = ops->build(ops->find_spec("broken").value(), parse_target("cpu").value()).value();
  EXPECT_FALSE(outcome.success);
  EXPECT_NE(outcome.diagnostics_text().find("undefined hidden symbol: broken("), std::string::npos)
      << outcome.diagnostics_text();
  EXPECT_EQ(loadable_artifacts(*ops), 0u);
}

TEST(OpsTest, UnknownOpSaysWhereItLooked) {
  testing::TempDir cache;
  auto ops = make_ops(cache.path());
  auto op = ops->get("no_such_op");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), StatusCode::kNotFound);
  EXPECT_NE(op.status().message().find(testing::bundled_spec_dir()), std::string::npos);
}

TEST(OpsTest, OpBuildersByNameAnswerBuildAndLoad) {
  testing::TempDir cache;
  auto ops = make_ops(cache.path());
  auto b = ops->create_op_builder("vector_add");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->name(), "vector_add");
  EXPECT_EQ(b->target().str(), ops->accelerator().native_target());
  EXPECT_TRUE(b->is_compatible().ok());
  auto built = b->build();  // ahead of time: compiled, not loaded
  ASSERT_TRUE(built.ok() && built->success) << built.status().message();
  EXPECT_EQ(built->cache, CacheOutcome::kCompiled);
  auto loaded = b->load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  EXPECT_EQ((*loaded)->outcome().cache, CacheOutcome::kDisk);  // found what build() stored
  EXPECT_EQ(ops->compile_count(), 1u);
  EXPECT_EQ(loaded->get(), ops->get("vector_add").value().get());

  auto old_gpu = ops->create_op_builder("sum_reduce", "cuda:sm_50");
  ASSERT_TRUE(old_gpu.ok());
  Status st = old_gpu->is_compatible();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("compute capability 60"), std::string::npos) << st.message();
  auto missing = ops->create_op_builder("no_such_op");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ops->create_op_builder("vector_add", "tpu:v5").ok());
}

}  // namespace
}  // namespace kiln::builders
