// The kiln command as a user runs it: exit codes, help, the warm table, errors with
// positions, keys that agree across processes and cache folders.
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::run_process;

std::vector<std::string> kiln(std::initializer_list<std::string> args) {
  std::vector<std::string> argv{testing::kiln_binary()};
  argv.insert(argv.end(), args);
  return argv;
}

TEST(CliTest, HelpForEveryCommand) {
  auto top = run_process(kiln({"--help"}));
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("usage: kiln"), std::string::npos);
  for (const char* cmd : {"build", "run", "warm", "doctor"}) {
    auto r = run_process(kiln({cmd, "--help"}));
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_NE(r.out.find(std::string("usage: kiln ") + cmd), std::string::npos) << r.out;
  }
}

TEST(CliTest, BadUsageExitsWithTwo) {
  EXPECT_EQ(run_process(kiln({"frobnicate"})).exit_code, 2);
  EXPECT_EQ(run_process(kiln({})).exit_code, 2);
  auto r = run_process(kiln({"build", "--target"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--target needs a value"), std::string::npos) << r.err;
}

TEST(CliTest, WarmTwiceSecondRunIsAllHits) {
  testing::TempDir cache;
  auto first = run_process(kiln({"--cache-dir", cache.path(), "warm", "--check"}));
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  auto second = run_process(kiln({"--cache-dir", cache.path(), "warm", "--check"}));
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  for (const std::string& op : testing::bundled_op_names()) {
    std::regex miss_row("(^|\n)" + op + " +cpu:x86-64[-v0-9]* +miss +[0-9.]+ +ok");
    std::regex hit_row("(^|\n)" + op + " +cpu:x86-64[-v0-9]* +hit +0\\.0 +ok");
    EXPECT_TRUE(std::regex_search(first.out, miss_row)) << first.out;
    EXPECT_TRUE(std::regex_search(second.out, hit_row)) << second.out;
  }
  EXPECT_EQ(second.out.find("miss"), std::string::npos);
}

TEST(CliTest, KeyIsTheSameInAnotherProcessAndCacheFolder) {
  testing::TempDir c1, c2;
  std::string spec = testing::bundled_spec_dir() + "/axpby.toml";
  auto a = run_process(kiln({"--cache-dir", c1.path(), "build", spec, "--json"}));
  auto b = run_process(kiln({"--cache-dir", c2.path(), "build", spec, "--json"}));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  std::regex key("\"key\":\"([0-9a-f]{32})\"");
  std::smatch ma, mb;
  ASSERT_TRUE(std::regex_search(a.out, ma, key)) << a.out;
  ASSERT_TRUE(std::regex_search(b.out, mb, key)) << b.out;
  EXPECT_EQ(ma[1], mb[1]);
  EXPECT_NE(a.out.find("\"cache\":\"miss\""), std::string::npos);
  auto again = run_process(kiln({"--cache-dir", c1.path(), "build", spec, "--json"}));
  EXPECT_NE(again.out.find("\"cache\":\"hit\""), std::string::npos) << again.out;
}

// A node without LLVM (no kiln-spirv) finds OpenCL artifacts built elsewhere when it is told
// the spirv identity that `kiln toolchains` prints on a node that compiles; untold, it says why.
TEST(CliTest, ANodeWithoutTheSpirvEmitterFindsOpenClArtifactsThroughTheGivenIdentity) {
  testing::TempDir cache;
  std::string spec = testing::bundled_spec_dir() + "/vector_add.toml";
  std::regex key("\"key\":\"([0-9a-f]{32})\"");
  std::smatch built_key, loaded_key, id;
  auto built = run_process(kiln({"--cache-dir", cache.path(), "build", spec, "--target", "opencl", "--json"}));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  ASSERT_TRUE(std::regex_search(built.out, built_key, key)) << built.out;
  auto toolchains = run_process(kiln({"toolchains", "--json"}));
  ASSERT_TRUE(std::regex_search(toolchains.out, id, std::regex("\"spirv\":\\{\"available\":true,\"identity\":\"([^\"]+)\""))) << toolchains.out;
  std::map<std::string, std::string> no_emitter = {{"KILN_SPIRV_HELPER", "/nonexistent/kiln-spirv"}};
  auto untold = run_process(kiln({"--cache-dir", cache.path(), "build", spec, "--target", "opencl"}), no_emitter);
  EXPECT_NE(untold.exit_code, 0);
  EXPECT_NE(untold.err.find("no SPIR-V emitter at /nonexistent/kiln-spirv"), std::string::npos) << untold.err;
  no_emitter["KILN_SPIRV_IDENTITY"] = id[1];
  auto told = run_process(kiln({"--cache-dir", cache.path(), "build", spec, "--target", "opencl", "--json"}), no_emitter);
  ASSERT_EQ(told.exit_code, 0) << told.err;
  ASSERT_TRUE(std::regex_search(told.out, loaded_key, key)) << told.out;
  EXPECT_EQ(loaded_key[1], built_key[1]);
  EXPECT_NE(told.out.find("\"cache\":\"hit\""), std::string::npos) << told.out;
}

TEST(CliTest, BadSpecPrintsFileLineColumn) {
  testing::TempDir specs, cache;
  specs.write("bad.toml", "name = \"bad\"\nlanguage = \"cpp\"\nsources = [\"nowhere.cpp\"]\n");
  auto r = run_process(kiln({"--cache-dir", cache.path(), "build", specs / "bad.toml"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(specs / "bad.toml" + ":3:12: source file 'nowhere.cpp' not found"), std::string::npos) << r.err;
}

TEST(CliTest, CompileErrorPrintsLikeACompilerAndExitsOne) {
  testing::TempDir specs, cache;
  specs.write("bad.toml", "name = \"bad\"\nlanguage = \"cpp\"\nsources = [\"bad.cpp\"]\n[[entry]]\nname = \"bad\"\nparams = []\n");
  specs.write("bad.cpp", "#include <kiln/cpu_kernel.h>\nvoid bad(const kiln::cpu::Block&) {\n  return 1 +;\n}\n");
  auto r = run_process(kiln({"--cache-dir", cache.path(), "build", specs / "bad.toml"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(specs / "bad.cpp" + ":3:13: error: expected expression"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the failure is cached until an input changes"), std::string::npos);
}

TEST(CliTest, AFailedBuildPutsItsDiagnosticsInTheJson) {
  testing::TempDir specs, cache;
  specs.write("bad.toml", "name = \"bad\"\nlanguage = \"cpp\"\nsources = [\"bad.cpp\"]\n[[entry]]\nname = \"bad\"\nparams = []\n");
  specs.write("bad.cpp", "#include <kiln/cpu_kernel.h>\nvoid bad(const kiln::cpu::Block&) {\n  return 1 +;\n}\n");
  for (const char* word : {"miss", "hit"}) {  // the first compile, then the cached failure
    auto r = run_process(kiln({"--cache-dir", cache.path(), "build", specs / "bad.toml", "--json"}));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.out.find("\"success\":false,\"cache\":\"" + std::string(word) + "\""), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("{\"severity\":\"error\",\"file\":\"" + specs / "bad.cpp" +
                         "\",\"line\":3,\"column\":13,\"message\":\"expected expression\"}"),
              std::string::npos)
        << r.out;
  }
}

// What a cpu artifact depends on is Clang, LLVM and lld, never the CUDA toolkit: its key is the
// same with no toolkit, this one, or another (a folder whose libdevice and nvJitLink differ),
// and it changes when the Clang toolchain library does (a copy with another build id).
TEST(CliTest, CpuKeysDependOnTheClangLibraryAndNotOnTheCudaToolkit) {
  testing::TempDir cache, other_cuda, jit;
  other_cuda.write("nvvm/libdevice/libdevice.10.bc", "another libdevice");
  other_cuda.write("lib64/libnvJitLink.so.13", "another nvJitLink");
  std::string spec = testing::bundled_spec_dir() + "/vector_add.toml";
  auto key_with = [&](const std::map<std::string, std::string>& env) {
    auto r = run_process(kiln({"--cache-dir", cache.path(), "build", spec, "--json"}), env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::smatch m;
    std::regex key("\"key\":\"([0-9a-f]{32})\"");
    return std::regex_search(r.out, m, key) ? m[1].str() : std::string();
  };
  std::string here = key_with({});
  EXPECT_FALSE(here.empty());
  EXPECT_EQ(key_with({{"CUDA_HOME", "/nonexistent"}, {"CUDA_PATH", "/nonexistent"}}), here);
  EXPECT_EQ(key_with({{"CUDA_HOME", other_cuda.path()}}), here);
  // The toolchain library, with one byte of its build id changed: another toolchain.
  auto toolchains = run_process(kiln({"toolchains", "--json"}));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(toolchains.out, m, std::regex("libkiln_jit_clang.so=([0-9a-f]+)"))) << toolchains.out;
  std::string id_hex = m[1];
  std::string id_bytes;
  for (size_t i = 0; i + 1 < id_hex.size(); i += 2) id_bytes += static_cast<char>(std::stoi(id_hex.substr(i, 2), nullptr, 16));
  std::string bytes = testing::read_text(testing::kiln_binary().substr(0, testing::kiln_binary().rfind("/bin/")) +
                                         "/lib/libkiln_jit_clang.so");
  auto at = bytes.find(id_bytes);
  ASSERT_NE(at, std::string::npos);
  bytes[at] = static_cast<char>(bytes[at] ^ 0xff);
  jit.write("libkiln_jit_clang.so", bytes);
  std::string changed = key_with({{"KILN_JIT_LIBRARY", jit / "libkiln_jit_clang.so"}});
  EXPECT_FALSE(changed.empty());
  EXPECT_NE(changed, here);
}

TEST(CliTest, ArtifactForALevelTheCpuLacksIsRefusedNotRun) {
  testing::TempDir cache;
  // KILN_CPU_LEVEL makes this CPU report baseline x86-64; the op is asked for at v2.
  auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "vector_add", "--target", "cpu:x86-64-v2"}),
                       {{"KILN_CPU_LEVEL", "x86-64"}});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("artifact built for x86-64-v2, but this CPU supports only x86-64"), std::string::npos) << r.err;
  // Building it (ahead of time, for another machine) is fine.
  auto b = run_process(kiln({"--cache-dir", cache.path(), "build", testing::bundled_spec_dir() + "/vector_add.toml",
                             "--target", "cpu:x86-64-v2"}),
                       {{"KILN_CPU_LEVEL", "x86-64"}});
  EXPECT_EQ(b.exit_code, 0) << b.err;
}

TEST(CliTest, RunChecksAnOpAtTheGivenSize) {
  testing::TempDir cache;
  auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "row_softmax", "--dim", "rows=5", "--dim", "cols=3"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("5 blocks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": ok (15 elements within tolerance)"), std::string::npos) << r.out;
  auto bad = run_process(kiln({"--cache-dir", cache.path(), "run", "row_softmax", "--dim", "depth=5"}));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("no dim named 'depth'"), std::string::npos) << bad.err;
}

TEST(CliTest, ColdBuildStartsNoCompilerOrLinkerProcess) {
  if (::system("strace -f -o /dev/null true > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "strace is not installed or cannot trace here (scripts/setup installs it)";
  testing::TempDir cache, trace;
  auto r = run_process({"strace", "-f", "-e", "trace=execve", "-o", trace / "log", testing::kiln_binary(), "--cache-dir",
                        cache.path(), "build", testing::bundled_spec_dir() + "/row_softmax.toml"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_NE(r.out.find("cache    miss"), std::string::npos) << r.out;
  std::string log = testing::read_text(trace / "log");
  size_t execs = 0;
  for (size_t pos = 0; (pos = log.find("execve(", pos)) != std::string::npos; ++pos) ++execs;
  EXPECT_EQ(execs, 1u) << "only kiln itself may be executed:\n" << log;
}

TEST(CliTest, WarmInParallelBuildsEachPairOnceAndKeepsTheTableInOrder) {
  testing::TempDir cache;
  auto r = run_process(kiln({"--cache-dir", cache.path(), "warm", "-j3", "--check", "--target", "cpu", "--target",
                             "cpu:x86-64-v2"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Sorted by op, then targets in the order given, whatever order the jobs finished in.
  std::smatch axpby, row_softmax;
  ASSERT_TRUE(std::regex_search(r.out, axpby, std::regex("\naxpby +cpu:x86-64[-v0-9]* +miss.*\naxpby +cpu:x86-64-v2 +miss.*\n")))
      << r.out;
  ASSERT_TRUE(std::regex_search(
      r.out, row_softmax, std::regex("\nrow_softmax +cpu:x86-64[-v0-9]* +miss.*\nrow_softmax +cpu:x86-64-v2 +miss.*\n")))
      << r.out;
  EXPECT_LT(axpby.position(0), row_softmax.position(0));
  auto again = run_process(kiln({"--cache-dir", cache.path(), "warm", "--jobs", "2", "--target", "cpu:x86-64-v2"}));
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_EQ(again.out.find("miss"), std::string::npos) << again.out;
  for (const char* bad : {"-j0", "-jmany", "-j"}) {
    auto b = run_process(kiln({"warm", bad}));
    EXPECT_EQ(b.exit_code, 2) << bad << b.err;
  }
}

TEST(CliTest, DoctorReportsAcceleratorsToolchainsCacheAndEveryOp) {
  testing::TempDir cache;
  // vector_add cached for the native cpu target, the others not.
  ASSERT_EQ(run_process(kiln({"--cache-dir", cache.path(), "run", "vector_add", "--dim", "n=100"})).exit_code, 0);
  auto r = run_process(kiln({"--cache-dir", cache.path(), "doctor", "--target", "cuda:sm_50"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\* cpu +priority 0, built in: cpu:x86-64)"))) << r.out;
  EXPECT_NE(r.out.find("cuda  priority 100"), std::string::npos) << r.out;  // registered, shown even without a GPU
  EXPECT_NE(r.out.find("clang: clang 22"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("identity (enters keys): clang-inproc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("folder: " + cache.path()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("remote tiers: none configured"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(vector_add +cpu:x86-64[-v0-9]* +yes +yes)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(axpby +cpu:x86-64[-v0-9]* +no +yes)"))) << r.out;
  // sum_reduce needs sm_60 (its min_sm): incompatible for sm_50, with the reason.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(sum_reduce +cuda:sm_50 +no +no: .*capability 60)"))) << r.out;

  auto j = run_process(kiln({"--cache-dir", cache.path(), "doctor", "--json"}));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  for (const char* key : {"\"accelerators\":[", "\"chosen\":\"cpu\"", "\"toolchains\":[", "\"cache\":{", "\"ops\":[",
                          "\"remote_tiers\":[]", "\"cached\":\"yes\""})
    EXPECT_NE(j.out.find(key), std::string::npos) << key << "\n" << j.out;
}

}  // namespace
}  // namespace kiln
