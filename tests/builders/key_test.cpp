// The cache key: stable for the same inputs wherever they live, different when anything
// that can change the artifact changes (a source, a header it includes, a define, a flag,
// the target). Each case compiles for real and looks the result up in a real cache.
#include <gtest/gtest.h>

#include "builders/ops.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

class KeyTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::copy_bundled_specs(specs.path()); }

  BuildOutcome build(const std::string& spec_dir, const std::string& target = "cpu") {
    OpsOptions o;
    o.cache_dir = cache.path();
    o.spec_dirs = {spec_dir};
    auto ops = Ops::create(o).value();
    auto outcome = ops->build(ops->find_spec("vector_add").value(), parse_target(target).value());
    EXPECT_TRUE(outcome.ok() && outcome->success);
    return outcome.value();
  }
  void edit(const std::string& rel, const std::string& from, const std::string& to) {
    std::string text = testing::read_text(specs / rel);
    auto pos = text.find(from);
    ASSERT_NE(pos, std::string::npos) << from;
    text.replace(pos, from.size(), to);
    specs.write(rel, text);
  }

  testing::TempDir specs, cache;
};

TEST_F(KeyTest, SameInputsInAnotherFolderGiveTheSameKeyAndHit) {
  auto a = build(specs.path());
  EXPECT_EQ(a.cache, CacheOutcome::kCompiled);
  testing::TempDir other;
  testing::copy_bundled_specs(other.path());
  auto b = build(other.path());
  EXPECT_EQ(b.key, a.key);
  EXPECT_EQ(b.cache, CacheOutcome::kDisk);
}

TEST_F(KeyTest, ChangedIncludedHeaderChangesTheKey) {
  auto before = build(specs.path());
  edit("include/kiln_ops/common.h", "namespace kiln_ops {", "namespace kiln_ops {\n// edited\n");
  auto after = build(specs.path());
  EXPECT_EQ(after.input_key, before.input_key);  // the header is not a source...
  EXPECT_NE(after.key, before.key);              // ...but its content is in the key
  EXPECT_EQ(after.cache, CacheOutcome::kCompiled);
  // Putting it back finds the first artifact again.
  edit("include/kiln_ops/common.h", "namespace kiln_ops {\n// edited\n", "namespace kiln_ops {");
  auto restored = build(specs.path());
  EXPECT_EQ(restored.key, before.key);
  EXPECT_EQ(restored.cache, CacheOutcome::kDisk);
}

TEST_F(KeyTest, ChangedSourceChangesTheKey) {
  auto before = build(specs.path());
  edit("kernels/vector_add.cpp", "out[i] = a[i] + b[i];", "out[i] = b[i] + a[i];");
  auto after = build(specs.path());
  EXPECT_NE(after.key, before.key);
}

TEST_F(KeyTest, ChangedDefineChangesTheKey) {
  auto before = build(specs.path());
  edit("vector_add.toml", "include_dirs = [\"include\"]", "include_dirs = [\"include\"]\ndefines = [\"KILN_TEST=1\"]");
  auto one = build(specs.path());
  edit("vector_add.toml", "KILN_TEST=1", "KILN_TEST=2");
  auto two = build(specs.path());
  EXPECT_NE(one.key, before.key);
  EXPECT_NE(two.key, one.key);
}

TEST_F(KeyTest, ChangedFlagChangesTheKey) {
  auto before = build(specs.path());
  edit("vector_add.toml", "include_dirs = [\"include\"]", "include_dirs = [\"include\"]\nflags = [\"-fno-unroll-loops\"]");
  auto after = build(specs.path());
  EXPECT_NE(after.key, before.key);
}

// A cpu artifact's key includes every header its compile read. The bundled ops read none of the
// system's, so nodes with other OS images (a GPU node that cannot compile, say) share them.
TEST_F(KeyTest, BundledOpsReadNoSystemHeaderSoTheirKeysTravel) {
  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {testing::bundled_spec_dir()};
  auto ops = Ops::create(o).value();
  for (const std::string& name : testing::bundled_op_names()) {
    auto outcome = ops->build(ops->find_spec(name).value(), parse_target("cpu").value());
    ASSERT_TRUE(outcome.ok() && outcome->success) << name;
    auto manifest = ops->store()->get_manifest(outcome->input_key).value();
    ASSERT_TRUE(manifest.has_value()) << name;
    for (auto& entry : decode_manifest(*manifest).value())
      EXPECT_TRUE(entry.label.rfind("spec:", 0) == 0 || entry.label.rfind("kiln:", 0) == 0) << name << ": " << entry.label;
  }
}

TEST_F(KeyTest, TargetLevelIsInTheKey) {
  auto v2 = build(specs.path(), "cpu:x86-64-v2");
  auto v3 = build(specs.path(), "cpu:x86-64-v3");
  EXPECT_NE(v2.key, v3.key);
  EXPECT_NE(v2.artifact, v3.artifact);
}

}  // namespace
}  // namespace kiln::builders
