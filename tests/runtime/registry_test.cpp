// The registry and plug-ins: names are unique unless a registration asks to replace one,
// KILN_ACCELERATOR and priority pick a backend, and plug-ins that are missing, are not kiln
// plug-ins, or register a name twice fail with messages that say so. The plug-in used is
// the inline-cpu accelerator built in this test suite.
#include "runtime/registry.h"

#include <gtest/gtest.h>

#include "runtime/plugin.h"
#include "tests/test_util.h"

namespace kiln::runtime {
namespace {


BackendRegistration refusing(const std::string& name, int priority, Status available = {}) {
  return {name, priority, [available] { return available; },
          [name]() -> Result<std::unique_ptr<Accelerator>> { return unavailable(name + " refuses to start"); }};
}

TEST(RegistryTest, ANameIsRegisteredOnceUnlessReplacementIsAsked) {
  ASSERT_TRUE(register_backend(refusing("registry-test-a", -100)).ok());
  Status again = register_backend(refusing("registry-test-a", -100));
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already registered"), std::string::npos) << again.message();
  EXPECT_TRUE(register_backend(refusing("registry-test-a", -99), /*replace_existing=*/true).ok());
  EXPECT_FALSE(register_backend({"", 0, nullptr, nullptr}).ok());
}

TEST(RegistryTest, AnUnavailableBackendSaysWhyAndIsNeverChosen) {
  ASSERT_TRUE(register_backend(refusing("registry-test-hidden", 1000, unavailable("no such device here"))).ok());
  auto infos = backend_infos();
  ASSERT_FALSE(infos.empty());
  EXPECT_EQ(infos.front().name, "registry-test-hidden");  // highest priority first
  EXPECT_FALSE(infos.front().available);
  EXPECT_EQ(infos.front().reason, "no such device here");
  auto chosen = get_accelerator();
  ASSERT_TRUE(chosen.ok()) << chosen.status().message();
  EXPECT_NE((*chosen)->name(), "registry-test-hidden");
  auto named = get_accelerator("registry-test-hidden");
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("no such device here"), std::string::npos) << named.status().message();
}

TEST(RegistryTest, APluginRegistersItsBackendWhichRunsAndCannotRegisterTwice) {
  ASSERT_TRUE(load_plugin(KILN_TEST_PLUGIN).ok());
  bool found = false;
  for (auto& b : backend_infos())
    if (b.name == "inline-cpu") {
      found = true;
      EXPECT_EQ(b.origin, KILN_TEST_PLUGIN);
      EXPECT_TRUE(b.available);
    }
  EXPECT_TRUE(found);
  auto acc = get_accelerator("inline-cpu");
  ASSERT_TRUE(acc.ok()) << acc.status().message();
  auto p = (*acc)->allocate(256);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*acc)->on_accelerator(*p));
  (*acc)->deallocate(*p);
  // Loading it again registers the name again: refused, and the message names the plug-in.
  Status twice = load_plugin(KILN_TEST_PLUGIN);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("already registered"), std::string::npos) << twice.message();
  EXPECT_NE(twice.message().find(KILN_TEST_PLUGIN), std::string::npos) << twice.message();
}

TEST(RegistryTest, FilesThatAreNotPluginsAreRefusedWithAReason) {
  Status missing = load_plugin("/nonexistent/libnothing.so");
  EXPECT_EQ(missing.code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.message().find("/nonexistent/libnothing.so"), std::string::npos);
  Status not_plugin = load_plugin(KILN_NOT_A_PLUGIN);
  EXPECT_EQ(not_plugin.code(), StatusCode::kInvalidArgument) << not_plugin.message();
  EXPECT_NE(not_plugin.message().find("not a kiln plug-in"), std::string::npos) << not_plugin.message();
  Status wrong_abi = load_plugin(KILN_WRONG_ABI_PLUGIN);
  EXPECT_EQ(wrong_abi.code(), StatusCode::kInvalidArgument) << wrong_abi.message();
  EXPECT_NE(wrong_abi.message().find("ABI 999"), std::string::npos) << wrong_abi.message();
  EXPECT_NE(wrong_abi.message().find("rebuild it"), std::string::npos) << wrong_abi.message();
  Status failing = load_plugin(KILN_FAILING_PLUGIN);
  EXPECT_FALSE(failing.ok());
  EXPECT_NE(failing.message().find("the frobnicator device is not plugged in"), std::string::npos) << failing.message();
  EXPECT_NE(failing.message().find(KILN_FAILING_PLUGIN), std::string::npos) << failing.message();
  testing::TempDir dir;
  dir.write("garbage.so", "not an ELF file");
  Status garbage = load_plugin(dir / "garbage.so");
  EXPECT_FALSE(garbage.ok());
  EXPECT_NE(garbage.message().find("garbage.so"), std::string::npos) << garbage.message();
}

TEST(RegistryTest, KilnPluginsSelectsAPluginFromTheCommandLine) {
  testing::TempDir cache;
  auto r = testing::run_process({testing::kiln_binary(), "--cache-dir", cache.path(), "run", "vector_add", "--dim", "n=5000"},
                                {{"KILN_PLUGINS", std::string("/nonexistent/first.so:") + KILN_TEST_PLUGIN},
                                 {"KILN_ACCELERATOR", "inline-cpu"}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("inline-cpu plug-in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": ok"), std::string::npos) << r.out;
  // The missing first entry is reported once and does not stop the second.
  EXPECT_NE(r.err.find("/nonexistent/first.so"), std::string::npos) << r.err;
  // Without KILN_PLUGINS the name is unknown, and the error lists what is registered.
  auto without = testing::run_process({testing::kiln_binary(), "--cache-dir", cache.path(), "run", "vector_add"},
                                      {{"KILN_ACCELERATOR", "inline-cpu"}});
  EXPECT_EQ(without.exit_code, 1);
  EXPECT_NE(without.err.find("registered: "), std::string::npos) << without.err;
}

}  // namespace
}  // namespace kiln::runtime
