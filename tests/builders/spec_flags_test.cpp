// A spec's flags are code-generation options from an explicit list (builders/spec_parser.cpp):
// anything else, above all an option that writes or reads a file, is a spec error naming it at
// file:line:col, and nothing is compiled (issue 44: `-Wp,-MD,PATH` wrote a file outside the spec's
// folder).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "builders/spec.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

using testing::TempDir;

class SpecFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override { m_dir.write("kernels/k.cpp", "void k(const kiln::cpu::Block&, float* x, int64_t n) {}\n"); }
  // The spec text with `flag` as its one flag (on line 4, the flag's string at column 10).
  static std::string spec_with(const std::string& flag) {
    return "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\nflags = [\"" + flag +
           "\"]\n[[entry]]\nname = \"k\"\nparams = [\"float* x\", \"int64_t n\"]\n";
  }
  Result<OpSpec> parse(const std::string& flag) {
    m_dir.write("op.toml", spec_with(flag));
    return parse_spec_file(m_dir / "op.toml");
  }
  TempDir m_dir;
};

TEST_F(SpecFlagsTest, EveryFlagThatWritesOrReadsAFileOrHandsOptionsOnIsASpecErrorNamingIt) {
  std::string out = m_dir / "written";
  for (const std::string& flag : std::vector<std::string>{"-Wp,-MD," + out, "-Wp,-MMD," + out, "-Wl,-o," + out, "-Wa,-adhln=" + out, "-o", "-MD", "-MF" + out,
                           "-MMD", "-include", "-include" + out, "@" + out, "--sysroot=/", "-B/tmp", "-specs=" + out, "-fplugin=" + out,
                           "-fpass-plugin=" + out, "-fprofile-generate", "-fprofile-generate=" + out, "-fprofile-use=" + out,
                           "-fprofile-instr-generate=" + out, "-fprofile-sample-use=" + out, "-save-temps", "-save-temps=obj",
                           "-gsplit-dwarf", "-Xclang", "-Xlinker", "-mllvm", "-ftime-trace", "-ftime-trace=" + out, "-fstack-usage",
                           "-I/etc", "-isystem/etc", "-fdebug-prefix-map=/a=/b", "-fcrash-diagnostics-dir=/tmp",
                           "-fmodules-cache-path=/tmp", "-fsave-optimization-record", "-foptimization-record-file=" + out,
                           "-fvisibility=/etc/x", "-Werror=/x", "-march=native", "-mcpu=native", "-target", "-std=c++17",
                           "-DX=1", "-fno-fast-math=x", "-W", "-fopenmp"}) {
    auto r = parse(flag);
    ASSERT_FALSE(r.ok()) << flag << " was allowed";
    std::string where = m_dir / "op.toml:4:10: flag '" + flag + "' is not allowed";
    EXPECT_EQ(r.status().message().rfind(where, 0), 0u) << r.status().message();
    EXPECT_FALSE(refused_spec_flag(flag).empty()) << flag;
  }
  EXPECT_NE(parse("-Wp,-MD," + out).status().message().find("hands options to another tool"), std::string::npos);
  EXPECT_NE(::access(out.c_str(), F_OK), 0);
}

TEST_F(SpecFlagsTest, CodeGenerationAndWarningFlagsStayAllowed) {
  for (const char* flag : {"-O0", "-O2", "-O3", "-Ofast", "-Os", "-g", "-g1", "-gline-tables-only", "-w", "-Wall", "-Wextra",
                           "-Werror", "-Wno-unused-parameter", "-Werror=vla", "-Wno-error=deprecated", "-Wframe-larger-than=4096",
                           "-pedantic", "-ffast-math", "-fno-fast-math", "-fno-math-errno", "-ffp-contract=fast",
                           "-fdenormal-fp-math=preserve-sign,preserve-sign", "-fvisibility=hidden", "-fno-exceptions", "-fno-rtti",
                           "-fopenmp-simd", "-funroll-loops", "-fno-unroll-loops", "-fPIC", "-fno-omit-frame-pointer",
                           "-fstack-protector-strong", "-fcf-protection=full", "-fdiagnostics-color=always", "-mavx2", "-mavx512f",
                           "-msse4.2", "-mprefer-vector-width=512", "-mno-avx512f", "-mfma"}) {
    auto r = parse(flag);
    EXPECT_TRUE(r.ok()) << flag << ": " << r.status().message();
    EXPECT_EQ(refused_spec_flag(flag), "") << flag;
  }
}

// Every spec in the tree (bundled ops, the tests', the benchmarks', the examples') still parses.
TEST_F(SpecFlagsTest, EverySpecInTheTreeStillParses) {
  namespace fs = std::filesystem;
  fs::path root = fs::path(testing::bundled_spec_dir()).parent_path();
  int parsed = 0;
  for (const char* folder : {"specs", "tests/specs", "tools/bench/specs", "examples"}) {
    for (auto& entry : fs::recursive_directory_iterator(root / folder)) {
      if (entry.path().extension() != ".toml") continue;
      auto r = parse_spec_file(entry.path().string());
      EXPECT_TRUE(r.ok()) << entry.path() << ": " << r.status().message();
      ++parsed;
    }
  }
  EXPECT_GE(parsed, 18);  // 13 bundled ops, 2 of the tests, 2 of the benchmarks, 1 example
}

TEST_F(SpecFlagsTest, TheCliRefusesWpMdWithTheSpecsPositionAndWritesNoFile) {
  std::string out = m_dir / "dependencies.d";
  m_dir.write("op.toml", spec_with("-Wp,-MD," + out));
  auto refused = testing::run_process({testing::kiln_binary(), "--cache-dir", m_dir / "cache", "build", m_dir / "op.toml"});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find(m_dir / "op.toml:4:10: flag '-Wp,-MD," + out + "' is not allowed"), std::string::npos)
      << refused.out << refused.err;
  EXPECT_NE(::access(out.c_str(), F_OK), 0) << out << " was written";
}

}  // namespace
}  // namespace kiln::builders
