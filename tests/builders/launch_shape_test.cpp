// The launch a spec gives an op: [cuda] block and grid on cuda and hip (sized by sm_count),
// the [check]'s elsewhere, for the sizes a caller names.
#include "builders/launch_shape.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace kiln::builders {
namespace {

class LaunchShapeTest : public ::testing::Test {
 protected:
  OpSpec parse(const std::string& cuda_table) {
    dir.write("k.cpp", "\n");
    dir.write("k.cu", "\n");
    dir.write("op.toml", "name = \"k\"\nlanguage = \"cpp\"\nsources = [\"k.cpp\"]\n[[entry]]\nname = \"k\"\n"
                         "params = [\"float* x\", \"int64_t n\", \"int64_t chunk\"]\n"
                         "[check]\ndims = { n = 1000, chunk = 64 }\nblock = 4096\nreference = \"k_ref\"\ngrid = \"cdiv(n, block)\"\n"
                         "shared_bytes = \"block / 32 * 8\"\n"
                         "buffers = [{ name = \"x\", type = \"float\", count = \"n\", output = true }]\nargs = [\"x\", \"n\", \"chunk\"]\n" +
                             cuda_table);
    auto spec = parse_spec_file(dir / "op.toml");
    EXPECT_TRUE(spec.ok()) << spec.status().message();
    return spec.value();
  }
  testing::TempDir dir;
};

TEST_F(LaunchShapeTest, CudaTakesItsOwnBlockAndAGridSizedToTheDevice) {
  OpSpec spec = parse("[cuda]\nsources = [\"k.cu\"]\nblock = 256\ngrid = \"min(cdiv(n, block * 8), sm_count * 4)\"\n");
  // 2^24 elements want 8192 blocks; 132 SMs cap them at 528.
  auto big = spec_launch(spec, "cuda", 132, {{"n", int64_t{1} << 24}});
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(big->config.grid.x, 528u);
  EXPECT_EQ(big->config.block.x, 256u);
  EXPECT_EQ(big->config.shared_bytes, 64u);  // block / 32 * 8, with cuda's block
  EXPECT_EQ(big->names.at("sm_count"), 132);
  EXPECT_EQ(big->names.at("chunk"), 64);  // a dim not given keeps the spec's value
  // A small problem: as many blocks as it needs.
  EXPECT_EQ(spec_launch(spec, "cuda", 132, {{"n", 5000}})->config.grid.x, 3u);
  // hip compiles the [cuda] sources and launches them the same way.
  EXPECT_EQ(spec_launch(spec, "hip", 104, {{"n", int64_t{1} << 24}})->config.grid.x, 416u);
  // A caller's block replaces the spec's, in the grid expression too.
  EXPECT_EQ(spec_launch(spec, "cuda", 132, {{"n", 5000}}, 128)->config.grid.x, 5u);
}

TEST_F(LaunchShapeTest, OtherBackendsTakeTheChecksLaunch) {
  OpSpec spec = parse("[cuda]\nsources = [\"k.cu\"]\nblock = 256\ngrid = \"min(cdiv(n, block * 8), sm_count * 4)\"\n");
  auto cpu = spec_launch(spec, "cpu", 16, {{"n", 100000}});
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_EQ(cpu->config.grid.x, 25u);  // cdiv(100000, 4096)
  EXPECT_EQ(cpu->config.block.x, 4096u);
  // Without [cuda] grid, cuda takes the check's expression with its own block.
  OpSpec plain = parse("[cuda]\nsources = [\"k.cu\"]\nblock = 256\n");
  EXPECT_EQ(spec_launch(plain, "cuda", 132, {{"n", 100000}})->config.grid.x, 391u);
  // Names no expression uses are fine (an entry's other integer parameters).
  EXPECT_TRUE(spec_launch(plain, "cuda", 132, {{"n", 10}, {"step", 3}}).ok());
}

TEST_F(LaunchShapeTest, BadSizesAreErrorsNamingTheOpAndTheExpression) {
  OpSpec spec = parse("[cuda]\nsources = [\"k.cu\"]\nblock = 256\ngrid = \"min(cdiv(n, block * 8), sm_count * 4)\"\n");
  auto empty = spec_launch(spec, "cuda", 132, {{"n", 0}});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("op k: grid 'min(cdiv(n, block * 8), sm_count * 4)' is 0 blocks"), std::string::npos)
      << empty.status().message();
  OpSpec no_check = parse("");
  no_check.check.reset();
  auto none = spec_launch(no_check, "cuda", 132, {{"n", 10}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("pass the grid and block"), std::string::npos) << none.status().message();
}

}  // namespace
}  // namespace kiln::builders
