// CPU kernels written the way frameworks write theirs, through the kiln command: half types,
// OpenMP SIMD pragmas, intrinsics behind instruction-set flags, and checks too big to run.
#include <gtest/gtest.h>

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

// y = a * x in a half type, with a reference in the same type.
void write_scale_op(const testing::TempDir& dir, const std::string& name, const std::string& type, const std::string& ctype) {
  dir.write(name + ".toml", "name = \"" + name + "\"\nlanguage = \"cpp\"\nsources = [\"" + name + ".cpp\"]\n"
            "[[entry]]\nname = \"" + name + "\"\nparams = [\"const " + type + "* x\", \"" + type + "* y\", \"" + type +
            " a\", \"int64_t n\"]\n[check]\ndims = { n = 1000 }\nblock = 64\ngrid = \"cdiv(n, block)\"\nreference = \"" + name +
            "_reference\"\nbuffers = [{ name = \"x\", type = \"" + type + "\", count = \"n\" }, { name = \"y\", type = \"" + type +
            "\", count = \"n\", init = \"zero\", output = true }]\nargs = [\"x\", \"y\", \"1.5\", \"n\"]\nrtol = 1e-2\natol = 1e-3\n");
  dir.write(name + ".cpp", "#include <kiln/cpu_kernel.h>\n"
            "void " + name + "(const kiln::cpu::Block& b, const " + ctype + "* x, " + ctype + "* y, " + ctype + " a, int64_t n) {\n"
            "  for (int64_t i = kiln::cpu::first_thread(b); i < n && i < int64_t(kiln::cpu::first_thread(b) + b.block_dim.x); ++i)\n"
            "    y[i] = " + ctype + "(float(a) * float(x[i]));\n}\n"
            "void " + name + "_reference(const " + ctype + "* x, " + ctype + "* y, " + ctype + " a, int64_t n) {\n"
            "  for (int64_t i = 0; i < n; ++i) y[i] = " + ctype + "(double(a) * double(x[i]));\n}\n");
}

TEST(CpuKernelsTest, HalfAndBfloat16OpsRunAndPassTheirChecks) {
  testing::TempDir specs, cache;
  write_scale_op(specs, "scale_half", "half", "kiln::cpu::half");
  write_scale_op(specs, "scale_bf16", "bfloat16", "__bf16");
  for (const char* op : {"scale_half", "scale_bf16"}) {
    auto r = run_process(kiln({"--cache-dir", cache.path(), "run", op, "--spec-dir", specs.path()}));
    EXPECT_EQ(r.exit_code, 0) << op << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(": ok (1000 elements within tolerance)"), std::string::npos) << r.out;
  }
}

TEST(CpuKernelsTest, OpenMpSimdPragmasWork) {
  testing::TempDir specs, cache;
  specs.write("saxpy_simd.toml", R"toml(name = "saxpy_simd"
language = "cpp"
sources = ["k.cpp"]
flags = ["-fopenmp-simd"]
[[entry]]
name = "saxpy_simd"
params = ["const float* x", "float* y", "float a", "int64_t n"]
[check]
dims = { n = 100003 }
block = 1024
grid = "cdiv(n, block)"
reference = "saxpy_reference"
buffers = [{ name = "x", type = "float", count = "n" }, { name = "y", type = "float", count = "n", output = true }]
args = ["x", "y", "2.5", "n"]
)toml");
  specs.write("k.cpp", R"(#include <kiln/cpu_kernel.h>
void saxpy_simd(const kiln::cpu::Block& b, const float* x, float* y, float a, int64_t n) {
  int64_t begin = kiln::cpu::first_thread(b), end = begin + b.block_dim.x < n ? begin + b.block_dim.x : n;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) y[i] += a * x[i];
}
void saxpy_reference(const float* x, float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
)");
  auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "saxpy_simd", "--spec-dir", specs.path()}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
}

// An op built with -mavx512f is an x86-64-v4 artifact whatever level was asked: a CPU without
// AVX-512 (played here with KILN_CPU_LEVEL) refuses it before loading instead of dying of SIGILL.
TEST(CpuKernelsTest, AnAvx512ArtifactIsNeverLoadedOnACpuWithoutAvx512) {
  testing::TempDir specs, cache;
  specs.write("add512.toml", R"toml(name = "add512"
language = "cpp"
sources = ["k.cpp"]
flags = ["-mavx512f"]
[[entry]]
name = "add512"
params = ["const float* x", "float* y", "int64_t n"]
[check]
dims = { n = 4096 }
block = 16
grid = "n / 16"
reference = "add512_reference"
buffers = [{ name = "x", type = "float", count = "n" }, { name = "y", type = "float", count = "n", output = true }]
args = ["x", "y", "n"]
)toml");
  specs.write("k.cpp", R"(#include <immintrin.h>
#include <kiln/cpu_kernel.h>
void add512(const kiln::cpu::Block& b, const float* x, float* y, int64_t n) {
  int64_t i = kiln::cpu::first_thread(b);
  _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
}
void add512_reference(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
)");
  // Asked for v2, built for v4, and said so.
  auto b = run_process(kiln({"--cache-dir", cache.path(), "build", specs / "add512.toml", "--target", "cpu:x86-64-v2", "--json"}));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("\"target\":\"cpu:x86-64-v4\""), std::string::npos) << b.out;
  EXPECT_NE(b.err.find("built for cpu:x86-64-v4, not cpu:x86-64-v2"), std::string::npos) << b.err;
  // A v3 CPU refuses it, whichever target is asked.
  for (const char* target : {"cpu", "cpu:x86-64-v2"}) {
    auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "add512", "--spec-dir", specs.path(), "--target", target}),
                         {{"KILN_CPU_LEVEL", "x86-64-v3"}});
    EXPECT_EQ(r.exit_code, 1) << target << r.out;
    EXPECT_NE(r.err.find("artifact built for x86-64-v4, but this CPU supports only x86-64-v3"), std::string::npos) << r.err;
  }
  // Where AVX-512 is there, it runs.
  auto here = run_process(kiln({"doctor", "--json"}));
  if (here.out.find("cpu:x86-64-v4") == std::string::npos) GTEST_SKIP() << "this CPU has no AVX-512 to run it on";
  auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "add512", "--spec-dir", specs.path()}));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(CpuKernelsTest, ACheckLargerThanMemoryIsRefusedAtOnceWithItsSizes) {
  testing::TempDir cache;
  // 3e10 floats in each of three buffers: more than any machine this runs on has.
  auto r = run_process(kiln({"--cache-dir", cache.path(), "run", "vector_add", "--dim", "n=30000000000"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(buffers take 335\.3 GiB \(a 111\.8 GiB, b 111\.8 GiB, out 111\.8 GiB\))")))
      << r.err;
  EXPECT_NE(r.err.find("available; give smaller sizes with --dim"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kiln
