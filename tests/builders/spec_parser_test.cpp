#include <gtest/gtest.h>

#include "builders/spec.h"
#include "builders/target.h"
#include <filesystem>

#include "tests/test_util.h"

namespace kiln::builders {
namespace {

// A spec folder with one kernel source, and a valid spec text to break in each test.
class SpecParserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir.write("kernels/k.cpp", "void k(const kiln::cpu::Block&, float* x, int64_t n) {}\n");
    dir.write("include/h.h", "\n");
  }
  Result<OpSpec> parse(const std::string& text) {
    dir.write("op.toml", text);
    return parse_spec_file(dir / "op.toml");
  }
  // Asserts a parse error at line:col whose message contains `what`.
  void expect_error(const std::string& text, int line, int col, const std::string& what) {
    auto r = parse(text);
    ASSERT_FALSE(r.ok()) << "parsed:\n" << text;
    std::string where = dir / "op.toml" + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
    EXPECT_EQ(r.status().message().rfind(where, 0), 0u) << r.status().message() << "\nexpected to start with " << where;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().message();
  }
  testing::TempDir dir;
};

constexpr const char* k_valid = R"(name = "k"
version = 3
language = "cpp"
sources = ["kernels/k.cpp"]
include_dirs = ["include"]
defines = ["A=1", "B"]
flags = ["-ffast-math"]

[[entry]]
name = "k"
params = ["float * x", "int64_t n"]
)";

TEST_F(SpecParserTest, ParsesAValidSpec) {
  auto r = parse(k_valid);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->name, "k");
  EXPECT_EQ(r->version, 3);
  ASSERT_EQ(r->sources.size(), 1u);
  EXPECT_EQ(r->sources[0].rel_path, "kernels/k.cpp");
  EXPECT_EQ(r->sources[0].path, dir / "kernels/k.cpp");
  EXPECT_EQ(r->include_dirs, std::vector<std::string>{dir / "include"});
  ASSERT_EQ(r->entries.size(), 1u);
  ASSERT_EQ(r->entries[0].params.size(), 2u);
  EXPECT_EQ(r->entries[0].params[0].type, "float*");
  EXPECT_TRUE(r->entries[0].params[0].is_pointer);
  EXPECT_EQ(r->entries[0].params[1].size, 8u);
  EXPECT_FALSE(r->check.has_value());
}

TEST_F(SpecParserTest, BundledSpecsAllParse) {
  EXPECT_GE(testing::bundled_op_names().size(), 13u);
  for (const std::string& op : testing::bundled_op_names()) {
    auto r = parse_spec_file(testing::bundled_spec_dir() + "/" + op + ".toml");
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->name, op);
    EXPECT_TRUE(r->check.has_value());
  }
}

TEST_F(SpecParserTest, MalformedTomlPointsAtTheError) {
  expect_error("name = \"k\"\nlanguage = \"cpp\n", 2, 16, "invalid TOML");
  // A NUL inside a table header crashed toml++ 3.3 (found by the spec fuzzer).
  expect_error(std::string("name = \"k\"\n[[\0\0enr update, ", 17), 2, 3, "NUL byte");
  // Non-ASCII reached __builtin_unreachable() in toml++ 3.3's whitespace tables: specs are
  // ASCII, and escapes still give any character.
  expect_error("name = \"k\"\n\xef\xbb\xb7 = 1\n", 2, 1, "a spec must be ASCII");
  expect_error("name = \"k\" # \xc2\xb5s\n", 1, 14, "a spec must be ASCII");
  auto escaped = parse("description = \"\\u00b5s\"\n" + std::string(k_valid));
  ASSERT_TRUE(escaped.ok()) << escaped.status().message();
  EXPECT_EQ(escaped->description, "\xc2\xb5s");
}

TEST_F(SpecParserTest, UnknownKeyIsAnError) {
  expect_error(std::string(k_valid) + "optimise = true\n", 12, 1, "unknown key 'optimise'");
  expect_error(std::string(k_valid) + "[[entry]]\nname = \"j\"\nparams = []\nthreads = 4\n", 15, 1, "unknown key 'threads'");
}

TEST_F(SpecParserTest, MissingSourceFileIsAnError) {
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\", \"kernels/missing.cpp\"]\n", 3, 29,
               "source file 'kernels/missing.cpp' not found");
}

TEST_F(SpecParserTest, SourceEscapingTheSpecFolderIsAnError) {
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"../outside.cpp\"]\n", 3, 12, "escapes the spec's folder");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"/etc/passwd\"]\n", 3, 12, "must be relative");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\ninclude_dirs = [\"kernels/../..\"]\n", 4, 17,
               "escapes the spec's folder");
}

TEST_F(SpecParserTest, SymlinkOutOfTheSpecFolderIsAnError) {
  testing::TempDir outside;
  outside.write("evil.cpp", "\n");
  std::filesystem::create_symlink(outside / "evil.cpp", dir / "kernels/link.cpp");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/link.cpp\"]\n", 3, 12, "escapes the spec's folder");
}

TEST_F(SpecParserTest, MissingRequiredKeysAreErrors) {
  expect_error("language = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n", 1, 1, "missing required key 'name'");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n", 1, 1, "missing [[entry]]");
}

TEST_F(SpecParserTest, BadValuesAreErrors) {
  expect_error("name = \"my op\"\n", 1, 8, "must be an identifier");
  expect_error("name = \"k\"\nlanguage = \"fortran\"\n", 2, 12, "unknown language 'fortran'");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\nflags = [\"-o\", \"x\"]\n", 4, 10,
               "flag '-o' is not allowed");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\nflags = [\"-march=native\"]\n", 4, 10,
               "is not allowed");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\ndefines = [\"1X\"]\n", 4, 12,
               "must be NAME or NAME=VALUE");
}

TEST_F(SpecParserTest, BadParametersAreErrors) {
  std::string head = "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n[[entry]]\nname = \"k\"\n";
  expect_error(head + "params = [\"std::vector<float> v\"]\n", 6, 11, "unsupported parameter type");
  expect_error(head + "params = [\"float** x\"]\n", 6, 11, "unsupported parameter type");
  expect_error(head + "params = [\"float\"]\n", 6, 11, "must be a type followed by a name");
  expect_error(head + "params = [\"void x\"]\n", 6, 11, "unsupported parameter type");
  expect_error(head + "params = [\"int n\", \"float n\"]\n", 6, 20, "named twice");
}

TEST_F(SpecParserTest, CheckSectionIsValidated) {
  std::string head = std::string(k_valid) + "\n[check]\ndims = { n = 100 }\nreference = \"k_ref\"\n";
  auto ok = parse(head + "grid = \"cdiv(n, block)\"\nbuffers = [{ name = \"x\", type = \"float\", count = \"n\", output = true }]\n"
                         "args = [\"x\", \"n\"]\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->check->dims.at("n"), 100);
  EXPECT_EQ(ok->check->block, 256u);

  expect_error(head + "grid = \"cdiv(m, block)\"\n", 16, 8, "unknown name 'm'");
  expect_error(head + "grid = \"n\"\nbuffers = [{ name = \"x\", type = \"float\", count = \"n\" }]\nargs = [\"x\"]\n", 18, 8,
               "check.args has 1 items");
  expect_error(head + "grid = \"n\"\nbuffers = [{ name = \"x\", type = \"float\", count = \"n\" }]\nargs = [\"n\", \"x\"]\n", 18,
               9, "needs a buffer name");
  expect_error(head + "grid = \"n\"\nbuffers = [{ name = \"x\", type = \"string\", count = \"n\" }]\n", 17, 33,
               "buffer type 'string'");
}

// [cuda] grid: an expression over the check's dims, the entries' integer parameters, block and
// the device's sm_count, checked when the spec is read.
TEST_F(SpecParserTest, CudaGridReadsTheSmCountAndIsValidated) {
  dir.write("k.cu", "\n");
  std::string check = "\n[check]\ndims = { n = 100 }\nreference = \"k_ref\"\ngrid = \"cdiv(n, block)\"\n"
                      "buffers = [{ name = \"x\", type = \"float\", count = \"n\", output = true }]\nargs = [\"x\", \"n\"]\n";
  auto ok = parse(std::string(k_valid) + check + "[cuda]\nsources = [\"k.cu\"]\nblock = 128\ngrid = \"min(cdiv(n, block * 8), sm_count * 4)\"\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->cuda->grid, "min(cdiv(n, block * 8), sm_count * 4)");
  EXPECT_EQ(ok->cuda->block, 128u);
  // Without a [check], the entries' integer parameters are the names.
  EXPECT_TRUE(parse(std::string(k_valid) + "[cuda]\nsources = [\"k.cu\"]\ngrid = \"cdiv(n, sm_count)\"\n").ok());
  // Line 21 is [cuda]'s grid.
  expect_error(std::string(k_valid) + check + "[cuda]\nsources = [\"k.cu\"]\ngrid = \"cdiv(rows, block)\"\n", 21, 8,
               "unknown name 'rows'");
  expect_error(std::string(k_valid) + check + "[cuda]\nsources = [\"k.cu\"]\ngrid = \"cdiv(rows, block)\"\n", 21, 8,
               "the check's dims, the entries' integer parameters, block and sm_count");
  expect_error(std::string(k_valid) + "\n[check]\ndims = { sm_count = 4 }\n", 14, 21, "other than 'block' and 'sm_count'");
}

TEST_F(SpecParserTest, HalfTypesAreParametersAndBuffers) {
  std::string head = "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n[[entry]]\nname = \"k\"\n";
  auto r = parse(head + "params = [\"const half* x\", \"bfloat16* y\", \"_Float16 a\", \"__bf16 b\", \"int64_t n\"]\n"
                        "[check]\nreference = \"k_ref\"\ngrid = \"1\"\nbuffers = [{ name = \"x\", type = \"half\", count = \"4\" },"
                        " { name = \"y\", type = \"bfloat16\", count = \"4\", output = true }]\nargs = [\"x\", \"y\", \"1.5\", \"2\", \"4\"]\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto& p = r->entries[0].params;
  // Clang's spelling in the generated entry; two bytes by value.
  EXPECT_EQ(p[0].type, "const _Float16*");
  EXPECT_EQ(p[1].type, "__bf16*");
  EXPECT_EQ(p[2].type, "_Float16");
  EXPECT_EQ(p[2].size, 2u);
  EXPECT_EQ(p[3].scalar, ScalarType::kBFloat16);
  EXPECT_EQ(r->check->buffers[0].type, ScalarType::kFloat16);
  EXPECT_EQ(r->check->buffers[1].type, ScalarType::kBFloat16);
}

TEST_F(SpecParserTest, OpenMpThreadsAreRefusedAndSimdIsAllowed) {
  std::string head = "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n";
  expect_error(head + "flags = [\"-O3\", \"-fopenmp\"]\n", 4, 17, "OpenMP threads inside a kernel would fight its workers");
  expect_error(head + "flags = [\"-fopenmp=libomp\"]\n", 4, 10, "use -fopenmp-simd");
  auto ok = parse(head + "flags = [\"-fopenmp-simd\"]\n[[entry]]\nname = \"k\"\nparams = []\n");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

TEST_F(SpecParserTest, InstructionSetFlagsAreKnownOrRefused) {
  std::string head = "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"kernels/k.cpp\"]\n";
  std::string entry = "[[entry]]\nname = \"k\"\nparams = []\n";
  for (const char* ok : {"-mavx512f", "-mavx2", "-mno-avx512f", "-mprefer-vector-width=512", "-msse4.2"}) {
    auto r = parse(head + "flags = [\"" + ok + "\"]\n" + entry);
    EXPECT_TRUE(r.ok()) << ok << ": " << r.status().message();
  }
  expect_error(head + "flags = [\"-mamx-tile\"]\n", 4, 10, "not in the x86-64 levels kiln targets");
  expect_error(head + "flags = [\"-mamx-tile\"]\n", 4, 10, "__attribute__((target(\"amx-tile\")))");
  expect_error(head + "flags = [\"-mavx512fp16\"]\n", 4, 10, "__builtin_cpu_supports(\"avx512fp16\")");
  expect_error(head + "flags = [\"-mfrobnicate\"]\n", 4, 10, "flag '-mfrobnicate'");
  // The level an op's flags need: the highest of theirs and the target asked.
  EXPECT_EQ(effective_target({"-mavx512f"}, parse_target("cpu:x86-64-v2").value()).str(), "cpu:x86-64-v4");
  EXPECT_EQ(effective_target({"-mavx2", "-mno-avx512f"}, parse_target("cpu:x86-64-v2").value()).str(), "cpu:x86-64-v3");
  EXPECT_EQ(effective_target({"-msse4.2"}, parse_target("cpu:x86-64-v3").value()).str(), "cpu:x86-64-v3");
  EXPECT_EQ(effective_target({"-mavx512f"}, parse_target("cuda:sm_90").value()).str(), "cuda:sm_90");
}

TEST_F(SpecParserTest, InlineSourcesNeedAFileName) {
  auto r = parse("name = \"k\"\nlanguage = \"cpp\"\nsources = [{ name = \"k.cpp\", code = \"void f() {}\" }]\n"
                 "[[entry]]\nname = \"k\"\nparams = []\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->sources[0].path, dir / "k.cpp");
  EXPECT_EQ(*r->sources[0].inline_text, "void f() {}");
  expect_error("name = \"k\"\nlanguage = \"cpp\"\nsources = [{ name = \"../k.cpp\", code = \"x\" }]\n", 3, 21, "without folders");
}

}  // namespace
}  // namespace kiln::builders
