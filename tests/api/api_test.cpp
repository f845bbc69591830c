// <kiln/kiln.h> as an application uses it, through libkiln.so: ops found by name or given as
// text, lazy and ahead-of-time builds, typed launches checked against the spec (every wrong
// argument an Error naming the parameter, never a crash), streams, and compile errors that
// carry the compiler's diagnostics.
#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>
#include <vector>

#include "tests/test_util.h"

namespace {

using TempDir = kiln::testing::TempDir;

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override { ::setenv("KILN_CACHE_DIR", m_cache.path().c_str(), 1); }
  void TearDown() override { ::unsetenv("KILN_CACHE_DIR"); }
  TempDir m_cache;
};

// What `call` threw: its code and message ("" when it threw nothing).
template <class F>
kiln::Error thrown(F&& call) {
  try {
    call();
  } catch (const kiln::Error& e) {
    return e;
  }
  return kiln::Error("", "");
}

TEST_F(ApiTest, ABundledOpIsFoundByNameBuiltLazilyAndComputes) {
  kiln::Context ctx;
  EXPECT_EQ(ctx.accelerator(), "cpu");
  kiln::Op add = ctx.op("vector_add");
  EXPECT_FALSE(add.loaded()) << "finding an op compiles nothing";
  ASSERT_EQ(add.params().size(), 4u);
  EXPECT_EQ(add.params()[3].type, "int64_t");
  EXPECT_EQ(add.params()[3].name, "n");
  const int n = 1000;  // an int where the spec says int64_t: widening loses nothing, so it is taken
  std::vector<float> ha(n), hb(n);
  for (int i = 0; i < n; ++i) ha[i] = float(i), hb[i] = float(2 * i);
  auto a = ctx.buffer<float>(n), b = ctx.buffer<float>(n), out = ctx.buffer<float>(n);
  a.upload(ha);
  b.upload(hb);
  add.launch({kiln::cdiv(n, 256), 256}, a.data(), b.data(), out.data(), n);
  ctx.synchronize();
  EXPECT_TRUE(add.loaded());
  EXPECT_EQ(add.cache_source(), "compiled");
  auto result = out.download();
  for (int i = 0; i < n; ++i) ASSERT_EQ(result[i], float(3 * i)) << i;

  // Another context (another process, as far as the cache knows) builds ahead of time: a hit.
  kiln::Context other;
  kiln::Op again = other.op("vector_add");
  again.build();
  EXPECT_EQ(again.cache_source(), "disk");
}

TEST_F(ApiTest, EveryWrongArgumentIsAnErrorNamingTheParameter) {
  kiln::Context ctx;
  kiln::Op add = ctx.op("vector_add");  // (const float* a, const float* b, float* out, int64_t n)
  auto f = ctx.buffer<float>(16);
  auto d = ctx.buffer<double>(16);
  const float* read_only = f.data();
  struct Case {
    const char* what;
    kiln::Error error;
    const char* expect;
  };
  std::vector<Case> cases = {
      {"too few", thrown([&] { add.launch({1, 16}, f.data(), f.data(), f.data()); }), "takes 4 arguments"},
      {"too many", thrown([&] { add.launch({1, 16}, f.data(), f.data(), f.data(), int64_t(16), 1); }), "not 5"},
      {"double*", thrown([&] { add.launch({1, 16}, d.data(), f.data(), f.data(), int64_t(16)); }),
       "parameter 1 'const float* a' points to float; the argument is a double*"},
      {"const output", thrown([&] { add.launch({1, 16}, f.data(), f.data(), read_only, int64_t(16)); }),
       "parameter 3 'float* out' is written by the kernel"},
      {"scalar for pointer", thrown([&] { add.launch({1, 16}, 1.0f, f.data(), f.data(), int64_t(16)); }),
       "parameter 1 'const float* a' is a pointer; the argument is a float"},
      {"pointer for scalar", thrown([&] { add.launch({1, 16}, f.data(), f.data(), f.data(), f.data()); }),
       "parameter 4 'int64_t n' takes int64_t; the argument is a float*"},
      {"narrowing", thrown([&] { add.launch({1, 16}, f.data(), f.data(), f.data(), 16.0); }),
       "parameter 4 'int64_t n' takes int64_t; the argument is a double"},
      {"unknown entry", thrown([&] { add.launch_entry("nope", {1, 16}, f.data()); }), "has no entry nope (it has vector_add)"},
  };
  for (auto& c : cases) {
    EXPECT_EQ(c.error.code(), c.expect[0] == 'h' ? "not_found" : "invalid_argument") << c.what << ": " << c.error.what();
    EXPECT_NE(std::string(c.error.what()).find(c.expect), std::string::npos) << c.what << ": " << c.error.what();
  }
  // Checked before anything compiles: none of those built the op.
  EXPECT_FALSE(add.loaded());
  // void* (memory from allocate) is taken by any pointer parameter.
  void* raw = ctx.allocate(16 * sizeof(float));
  EXPECT_NO_THROW(add.launch({1, 16}, raw, raw, raw, int64_t(16)));
  ctx.synchronize();
  ctx.deallocate(raw);
}

TEST_F(ApiTest, UnknownOpsBadSpecsAndCompileErrorsSayWhatAndWhere) {
  TempDir dir;
  kiln::Context ctx;
  auto missing = thrown([&] { ctx.op("no_such_op"); });
  EXPECT_EQ(missing.code(), "not_found") << missing.what();
  EXPECT_NE(std::string(missing.what()).find("no_such_op"), std::string::npos) << missing.what();

  auto bad_spec = thrown([&] { ctx.op_from_spec("name = \"x\"\nlanguage = \"cpp\"\nsources = 3\n", dir.path()); });
  EXPECT_EQ(bad_spec.code(), "invalid_argument") << bad_spec.what();
  EXPECT_NE(std::string(bad_spec.what()).find(":3"), std::string::npos) << "the line of the mistake: " << bad_spec.what();

  dir.write("k.cpp", "#include <kiln/cpu_kernel.h>\nvoid k(const kiln::cpu::Block& b, float* y) {\n  y[0] = not_declared;\n}\n");
  kiln::Op op = ctx.op_from_spec(
      "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"k.cpp\"]\n[[entry]]\nname = \"k\"\nparams = [\"float* y\"]\n", dir.path());
  auto y = ctx.buffer<float>(1);
  auto error = thrown([&] { op.launch({1, 1}, y.data()); });
  EXPECT_EQ(error.code(), "compile_error") << error.what();
  ASSERT_FALSE(error.diagnostics().empty()) << error.what();
  const kiln::Diagnostic& d = error.diagnostics().front();
  EXPECT_EQ(d.severity, "error");
  EXPECT_NE(d.file.find("k.cpp"), std::string::npos) << d.file;
  EXPECT_EQ(d.line, 3u);
  EXPECT_EQ(d.column, 10u);
  EXPECT_NE(d.message.find("not_declared"), std::string::npos) << d.message;
  // The same error again, without compiling again.
  EXPECT_EQ(thrown([&] { op.build(); }).code(), "compile_error");
}

TEST_F(ApiTest, AnOpGivenAsTextRunsOnAStreamOfItsOwn) {
  TempDir dir;
  dir.write("fill.cpp",
            "#include <kiln/cpu_kernel.h>\n"
            "void fill(const kiln::cpu::Block& b, int32_t* y, int32_t value, int64_t n) {\n"
            "  for (int64_t i = int64_t(b.block_idx.x) * b.block_dim.x; i < n && i < int64_t(b.block_idx.x + 1) * b.block_dim.x; ++i)"
            " y[i] = value;\n}\n");
  kiln::Context ctx;
  kiln::Op fill = ctx.op_from_spec(
      "name = \"fill\"\nlanguage = \"cpp\"\nsources = [\"fill.cpp\"]\n[[entry]]\nname = \"fill\"\n"
      "params = [\"int32_t* y\", \"int32_t value\", \"int64_t n\"]\n",
      dir.path());
  auto stream = ctx.create_stream();
  auto y = ctx.buffer<int32_t>(300);
  fill.launch({kiln::cdiv(300, 128), 128, 0, stream.get()}, y.data(), int32_t(7), int64_t(300));
  stream->synchronize();
  for (int32_t v : y.download()) ASSERT_EQ(v, 7);
  // int16_t widens to int32_t; int64_t does not narrow to it.
  EXPECT_NO_THROW(fill.launch({1, 1, 0, stream.get()}, y.data(), int16_t(1), int64_t(1)));
  EXPECT_EQ(thrown([&] { fill.launch({1, 1}, y.data(), int64_t(1), int64_t(1)); }).code(), "invalid_argument");
  stream->synchronize();
}

}  // namespace
