// A process whose ops are all cache hits never maps the compiler: not libLLVM, not
// libclang-cpp, not kiln's own toolchain library; nor libcurl, though a remote tier is set. The cache is filled by a separate
// `kiln warm` process; this process then loads and runs every bundled op and reads
// /proc/self/maps.
#include <gtest/gtest.h>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "jit/toolchain_loader.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::builders {
namespace {

TEST(HitPathTest, AllHitsNeverLoadTheCompiler) {
  testing::TempDir cache;
  auto warm = testing::run_process({testing::kiln_binary(), "--cache-dir", cache.path(), "warm"});
  ASSERT_EQ(warm.exit_code, 0) << warm.out << warm.err;

  OpsOptions o;
  o.cache_dir = cache.path();
  o.spec_dirs = {testing::bundled_spec_dir()};
  // An https tier that would be asked on a miss (nothing listens there): hits never ask it.
  o.remote = "https://127.0.0.1:" + std::to_string(testing::free_port()) + "/kiln";
  auto ops = Ops::create(o).value();
  for (const std::string& name : testing::bundled_op_names()) {
    auto op = ops->get(name);
    ASSERT_TRUE(op.ok()) << op.status().message();
    EXPECT_EQ((*op)->outcome().cache, CacheOutcome::kDisk) << name;
    auto report = run_self_check(*ops, **op);
    ASSERT_TRUE(report.ok() && report->passed) << name;
  }
  EXPECT_EQ(ops->compile_count(), 0u);
  EXPECT_FALSE(jit::clang_toolchain_loaded());
  std::string maps = testing::read_text("/proc/self/maps");
  EXPECT_EQ(maps.find("libLLVM"), std::string::npos);
  EXPECT_EQ(maps.find("libclang"), std::string::npos);
  EXPECT_EQ(maps.find("libkiln_jit_clang"), std::string::npos);
  EXPECT_NE(maps.find("kiln:op vector_add"), std::string::npos);  // the op really came from a memfd
  // Nor libcurl (with its TLS and HTTP/2 libraries), until a request is made.
  EXPECT_EQ(maps.find("libcurl"), std::string::npos);
  ASSERT_NE(ops->remote(), nullptr);
  (void)ops->remote()->ping_all();
  EXPECT_NE(testing::read_text("/proc/self/maps").find("libcurl"), std::string::npos) << "a request that did not load libcurl";
}

}  // namespace
}  // namespace kiln::builders
