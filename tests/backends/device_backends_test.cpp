// What only the HIP and OpenCL backends do (the conformance suite covers what every backend
// does): the HIP architecture read from the runtime's properties, HIP's clean refusal where no
// AMD GPU is, and OpenCL's device binaries kept across processes, on PoCL here.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backends/hip/hip_accelerator.h"
#include "backends/opencl/opencl_accelerator.h"
#include "builders/ops.h"
#include "cache/bundle.h"
#include "builders/self_check.h"
#include "runtime/registry.h"
#include "support/file_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

TEST(HipBackend, TheArchitectureIsFoundInPropertiesOfAnyLayout) {
  std::vector<char> props(4096, '\0');
  std::strcpy(props.data() + 8, "AMD Instinct MI210");
  std::strcpy(props.data() + 1200, "gfx90a:sramecc+:xnack-");
  EXPECT_EQ(backends::hip::arch_from_properties(props.data(), props.size()), "gfx90a");
  std::vector<char> navi(2048, '\0');
  std::strcpy(navi.data() + 300, "gfx1100");
  EXPECT_EQ(backends::hip::arch_from_properties(navi.data(), navi.size()), "gfx1100");
  std::vector<char> none(512, '\0');
  std::strcpy(none.data() + 16, "gfx card");  // a name that merely starts so
  EXPECT_EQ(backends::hip::arch_from_properties(none.data(), none.size()), "");
}

TEST(HipBackend, WithoutAnAmdGpuItIsUnavailableWithTheReason) {
  Status present = backends::hip::gpu_present_without_initialising();
  if (present.ok()) GTEST_SKIP() << "an AMD GPU is here: the conformance suite runs the HIP backend instead";
  EXPECT_EQ(present.code(), StatusCode::kUnavailable);
  auto acc = runtime::get_accelerator("hip");
  ASSERT_FALSE(acc.ok());
  EXPECT_EQ(acc.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(acc.status().message().find("AMD GPU"), std::string::npos) << acc.status().message();
  // Auto-detection passes over it.
  auto chosen = runtime::get_accelerator();
  ASSERT_TRUE(chosen.ok());
  EXPECT_NE((*chosen)->name(), "hip");
}

class OpenClBackend : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = runtime::get_accelerator("opencl");
    if (!a.ok()) GTEST_SKIP() << "no OpenCL device here: " << a.status().message();
    acc = dynamic_cast<backends::opencl::OpenClAccelerator*>(*a);
    ASSERT_NE(acc, nullptr);
  }
  std::unique_ptr<builders::Ops> ops(const std::vector<std::string>& spec_dirs) {
    builders::OpsOptions o;
    o.cache_dir = cache.path();
    o.spec_dirs = spec_dirs;
    o.accelerator = "opencl";
    return builders::Ops::create(o).value();
  }
  testing::TempDir cache;
  backends::opencl::OpenClAccelerator* acc = nullptr;
};

TEST_F(OpenClBackend, IsChosenByNameOnlyNeverByAutoDetection) {
  auto chosen = runtime::get_accelerator();
  ASSERT_TRUE(chosen.ok());
  EXPECT_NE((*chosen)->name(), "opencl");
}

TEST_F(OpenClBackend, ASecondLoadReloadsTheDeviceBinaryInsteadOfBuilding) {
  auto before = acc->program_counts();
  {
    auto first = ops({testing::bundled_spec_dir()});
    auto op = first->get("gelu");
    ASSERT_TRUE(op.ok()) << op.status().message();
  }
  auto after_first = acc->program_counts();
  EXPECT_EQ(after_first.built_from_source + after_first.built_from_il, before.built_from_source + before.built_from_il + 1);
  // A new Ops on the same cache, as the next process would be: nothing is built.
  auto second = ops({testing::bundled_spec_dir()});
  auto op = second->get("gelu");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto after_second = acc->program_counts();
  EXPECT_EQ(after_second.reloaded_binaries, after_first.reloaded_binaries + 1);
  EXPECT_EQ(after_second.built_from_source, after_first.built_from_source);
  auto report = builders::run_self_check(*second, **op, {{}, 1});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->passed) << report->message;
  // The device binary is an artifact of the store like any other: listed, checked, evictable.
  auto listed = second->store()->list("gelu");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(std::count_if(listed->begin(), listed->end(), [](auto& r) { return r.kind == "opencl-binary"; }), 1);
}

TEST_F(OpenClBackend, ADamagedDeviceBinaryIsBuiltAgainNotLoaded) {
  { ASSERT_TRUE(ops({testing::bundled_spec_dir()})->get("vector_add").ok()); }
  auto fresh = ops({testing::bundled_spec_dir()});
  auto listed = fresh->store()->list("vector_add").value();
  auto binary = std::find_if(listed.begin(), listed.end(), [](auto& r) { return r.kind == "opencl-binary"; });
  ASSERT_NE(binary, listed.end());
  std::string blob = fresh->store()->blob_path(binary->key);
  std::string bytes = testing::read_text(blob);
  ASSERT_GT(bytes.size(), 100u);
  bytes[bytes.size() / 2] ^= 0x5a;
  ASSERT_TRUE(write_file_atomic(blob, bytes).ok());
  auto before = acc->program_counts();
  auto op = fresh->get("vector_add");
  ASSERT_TRUE(op.ok()) << op.status().message();
  auto after = acc->program_counts();
  EXPECT_EQ(after.reloaded_binaries, before.reloaded_binaries);
  EXPECT_EQ(after.built_from_source + after.built_from_il, before.built_from_source + before.built_from_il + 1);
  auto report = builders::run_self_check(*fresh, **op, {{{"n", 4099}}, 1});
  ASSERT_TRUE(report.ok() && report->passed);
}

TEST_F(OpenClBackend, ABundleCarriesOpenClProgramsAndDeviceBinariesToAnotherCache) {
  // vector_add's OpenCL source includes nothing: its manifest is empty, and a bundle takes it.
  { ASSERT_TRUE(ops({testing::bundled_spec_dir()})->get("vector_add").ok()); }
  testing::TempDir out;
  auto source = ops({testing::bundled_spec_dir()});
  auto packed = cache::pack_bundle(*source->store(), out / "b.kb", {}, cache::TrustConfig{});
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  testing::TempDir other_cache;
  builders::OpsOptions o;
  o.cache_dir = other_cache.path();
  o.spec_dirs = {testing::bundled_spec_dir()};
  o.accelerator = "opencl";
  auto other = builders::Ops::create(o).value();
  auto unpacked = cache::unpack_bundle(*other->store(), out / "b.kb", cache::TrustConfig{});
  ASSERT_TRUE(unpacked.ok()) << unpacked.status().message();
  auto before = acc->program_counts();
  auto op = other->get("vector_add");
  ASSERT_TRUE(op.ok()) << op.status().message();
  EXPECT_EQ(other->compile_count(), 0u) << "the bundle's program was compiled again";
  EXPECT_EQ(acc->program_counts().reloaded_binaries, before.reloaded_binaries + 1) << "the bundle's device binary was not used";
}

TEST_F(OpenClBackend, AKernelWhoseParametersDisagreeWithTheSpecIsRefusedByName) {
  testing::TempDir specs;
  testing::write_one_off_spec(specs, "narrow", "\"float* x\", \"int64_t n\"", "opencl", "narrow.cl",
                              "__kernel void narrow(__global float* x, int n) { if (get_global_id(0) < n) x[0] = 1.0f; }\n");
  auto op = ops({specs.path()})->get("narrow");
  ASSERT_FALSE(op.ok());
  EXPECT_NE(op.status().message().find("parameter 1 is 4 bytes; the spec's is 8"), std::string::npos) << op.status().message();
}

TEST_F(OpenClBackend, SpirvAloneIsRefusedByADeviceThatTakesNoIl) {
  if (acc->takes_il()) GTEST_SKIP() << "this OpenCL device takes SPIR-V";
  Status st = acc->can_load("spirv", "spirv:spirv64");
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("takes no SPIR-V"), std::string::npos) << st.message();
  EXPECT_TRUE(acc->can_load("opencl-program", "opencl:generic").ok());
}

}  // namespace
}  // namespace kiln
