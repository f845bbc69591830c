// Precompiled headers as cache artifacts: which lines a PCH stands for, that a second op with
// the same includes compiles with it, that it changes nothing the key or artifact says, and
// that it follows the headers' content.
#include "builders/precompiled_headers.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "builders/ops.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

TEST(IncludePrefixTest, LeadingSystemIncludesOnlyNormalised) {
  testing::TempDir own, kiln;
  own.write("mine/ops.h", "");
  kiln.write("kiln/cpu_kernel.h", "");
  std::vector<std::string> own_dirs = {own.path()}, kiln_dirs = {kiln.path()};
  auto prefix = [&](const std::string& text) { return include_prefix(text, own_dirs, kiln_dirs); };
  EXPECT_EQ(prefix("#pragma once\n// a comment\n/* a\n   block */\n#include <cmath>\n  #  include   <vector>  // why\n\nint x;\n"
                   "#include <map>\n"),
            "#include <cmath>\n#include <vector>\n");
  // kiln's device headers are passed over; the op's own headers end the prefix.
  EXPECT_EQ(prefix("#include <kiln/cpu_kernel.h>\n#include <cmath>\n#include <mine/ops.h>\n#include <vector>\n"),
            "#include <cmath>\n");
  EXPECT_EQ(prefix("#include \"local.h\"\n#include <cmath>\n"), "");
  EXPECT_EQ(prefix("#define _USE_MATH_DEFINES\n#include <cmath>\n"), "");  // a macro before: not safe to move
  EXPECT_EQ(prefix("#include <cmath> extra\n"), "");
  EXPECT_EQ(prefix("#include <cmath>\\\n"), "");
  EXPECT_EQ(prefix(""), "");
}

// A host library's CUDA source (DeepSpeed's custom_cuda_layers.h) reaches torch's headers
// through its own: with its folder given, guarded own headers stay in the prefix by absolute path.
TEST(IncludePrefixTest, OwnGuardedHeadersStayWhenTheSourceFolderIsGiven) {
  testing::TempDir src, inc;
  src.write("near.h", "// near\n#pragma once\n#include <vector>\n");
  inc.write("layers.h", "/* a\n  licence */\n#ifndef LAYERS_H\n#define LAYERS_H\n#include <cmath>\n#endif\n");
  inc.write("loose.h", "#include <cmath>\nint loose;\n");  // no guard: a second include would redefine
  inc.write("sys/mine.h", "#pragma once\n");
  std::vector<std::string> own_dirs = {inc.path()}, kiln_dirs;
  const std::string dir = src.path();
  auto prefix = [&](const std::string& text) { return include_prefix(text, own_dirs, kiln_dirs, &dir); };
  EXPECT_EQ(prefix("#include <math.h>\n#include \"near.h\"\n#include \"layers.h\"\n#include <sys/mine.h>\n#include \"loose.h\"\n"
                   "#include <vector>\n"),
            "#include <math.h>\n#include \"" + src.path() + "/near.h\"\n#include \"" + inc.path() + "/layers.h\"\n#include \"" +
                inc.path() + "/sys/mine.h\"\n");
  EXPECT_EQ(prefix("#include \"missing.h\"\n#include <cmath>\n"), "");
  // Without the folder, as for C++ sources and kernel ops: the op's own headers end it.
  EXPECT_EQ(include_prefix("#include <cmath>\n#include \"near.h\"\n", own_dirs, kiln_dirs), "#include <cmath>\n");
}

TEST(IncludeGuardTest, PragmaOnceOrAnIfndefDefinePairOpensTheHeader) {
  EXPECT_TRUE(has_include_guard("#pragma once\nint x;\n"));
  EXPECT_TRUE(has_include_guard("// Copyright\n/* more\n */\n  #  pragma   once\n"));
  EXPECT_TRUE(has_include_guard("#ifndef A_H\n#define A_H\n#endif\n"));
  EXPECT_TRUE(has_include_guard("#ifndef A_H\n# define A_H 1\n#endif\n"));
  EXPECT_FALSE(has_include_guard("#ifndef A_H\n#define B_H\n#endif\n"));
  EXPECT_FALSE(has_include_guard("#include <cmath>\n#pragma once\n"));
  EXPECT_FALSE(has_include_guard("int x;\n#pragma once\n"));
  EXPECT_FALSE(has_include_guard("#ifdef A_H\n#define A_H\n#endif\n"));
  EXPECT_FALSE(has_include_guard(""));
}

// A kernel that includes what framework kernels include.
std::string heavy_kernel(const std::string& name, const std::string& body) {
  return "#include <cmath>\n#include <vector>\n#include <immintrin.h>\n#include <kiln/cpu_kernel.h>\n"
         "void " + name + "(const kiln::cpu::Block& b, const float* x, float* y, int64_t n) {\n"
         "  int64_t begin = int64_t(b.block_idx.x) * b.block_dim.x, end = std::min<int64_t>(n, begin + b.block_dim.x);\n"
         "  std::vector<float> t(x + begin, x + end);\n"
         "  for (int64_t i = begin; i < end; ++i) y[i] = " + body + ";\n}\n";
}

void write_heavy_op(const testing::TempDir& specs, const std::string& name, const std::string& body) {
  specs.write(name + ".toml", "name = \"" + name + "\"\nlanguage = \"cpp\"\nsources = [\"" + name + ".cpp\"]\n"
                              "[[entry]]\nname = \"" + name + "\"\nparams = [\"const float* x\", \"float* y\", \"int64_t n\"]\n");
  specs.write(name + ".cpp", heavy_kernel(name, body));
}

class PrecompiledHeadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_heavy_op(specs, "heavy_tanh", "std::tanh(t[i - begin])");
    write_heavy_op(specs, "heavy_sin", "std::sin(t[i - begin])");
  }
  std::unique_ptr<Ops> ops_for(const std::string& cache_dir) {
    OpsOptions o;
    o.cache_dir = cache_dir;
    o.spec_dirs = {specs.path()};
    o.accelerator = "cpu";
    return Ops::create(o).value();
  }
  BuildOutcome build(Ops& ops, const std::string& op) {
    auto r = ops.build(ops.find_spec(op).value(), parse_target("cpu").value());
    EXPECT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r->success) << r->diagnostics_text();
    return r.value();
  }
  testing::TempDir specs, cache;
};

TEST_F(PrecompiledHeadersTest, ASecondOpWithTheSameIncludesUsesTheStoredPchAndGetsTheSameArtifact) {
  // Without a PCH: the first compile of these includes, in a cache of its own.
  testing::TempDir plain_cache;
  BuildOutcome plain = build(*ops_for(plain_cache.path()), "heavy_sin");
  EXPECT_EQ(plain.pch_used, 0u);

  auto ops = ops_for(cache.path());
  BuildOutcome first = build(*ops, "heavy_tanh");
  EXPECT_EQ(first.pch_used, 0u);
  EXPECT_EQ(first.pch_building, 1u);  // made beside it, for the next compile
  ops->wait_background();
  BuildOutcome second = build(*ops, "heavy_sin");
  EXPECT_EQ(second.pch_used, 1u);
  EXPECT_EQ(second.pch_building, 0u);
  // Whether a PCH was at hand changes neither the key nor the bytes.
  EXPECT_EQ(second.key, plain.key);
  EXPECT_EQ(second.artifact, plain.artifact);
  // Another process finds the PCH in the cache too (and the op itself is a plain hit).
  write_heavy_op(specs, "heavy_cos", "std::cos(t[i - begin])");
  BuildOutcome third = build(*ops_for(cache.path()), "heavy_cos");
  EXPECT_EQ(third.pch_used, 1u);
}

TEST_F(PrecompiledHeadersTest, ThePchFollowsTheContentOfItsHeaders) {
  // A "system" header outside the op's folders, on the include path through CPATH.
  testing::TempDir system;
  system.write("scale_factor.h", "#pragma once\nconstexpr float k_scale = 2.0f;\n");
  ::setenv("CPATH", system.path().c_str(), 1);
  specs.write("scaled_a.toml", "name = \"scaled_a\"\nlanguage = \"cpp\"\nsources = [\"a.cpp\"]\n[[entry]]\nname = \"scaled_a\"\nparams = [\"float* y\"]\n");
  specs.write("scaled_b.toml", "name = \"scaled_b\"\nlanguage = \"cpp\"\nsources = [\"b.cpp\"]\n[[entry]]\nname = \"scaled_b\"\nparams = [\"float* y\"]\n");
  specs.write("a.cpp", "#include <scale_factor.h>\n#include <kiln/cpu_kernel.h>\nvoid scaled_a(const kiln::cpu::Block&, float* y) { y[0] = k_scale; }\n");
  specs.write("b.cpp", "#include <scale_factor.h>\n#include <kiln/cpu_kernel.h>\nvoid scaled_b(const kiln::cpu::Block&, float* y) { y[0] = k_scale; }\n");
  auto ops = ops_for(cache.path());
  build(*ops, "scaled_a");
  ops->wait_background();
  BuildOutcome before = build(*ops, "scaled_b");
  EXPECT_EQ(before.pch_used, 1u);
  // The header changes: a new PCH, a new key for the op, and the new value in its code.
  system.write("scale_factor.h", "#pragma once\nconstexpr float k_scale = 3.0f;\n");
  auto fresh = ops_for(cache.path());
  BuildOutcome after = build(*fresh, "scaled_b");
  ::unsetenv("CPATH");
  EXPECT_NE(after.key, before.key);
  EXPECT_EQ(after.cache, CacheOutcome::kCompiled);
  EXPECT_EQ(after.pch_used, 0u);  // the stored PCH no longer matches its headers
  EXPECT_EQ(after.pch_building, 1u);
  float three = 3.0f;
  EXPECT_NE(after.artifact.find(std::string(reinterpret_cast<char*>(&three), 4)), std::string::npos);
}

}  // namespace
}  // namespace kiln::builders
