// Nothing happens at load time: a program that links all of kiln starts with one thread and
// no driver or compiler library mapped; asking which backends are available changes neither;
// and a child forked after asking runs an op on the chosen accelerator (on a GPU machine
// that is CUDA, which a cuInit before the fork would have made unusable in the child).
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "tests/test_util.h"

namespace kiln {
namespace {

std::map<std::string, std::string> parse_lines(const std::string& out) {
  std::map<std::string, std::string> kv;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (auto eq = line.find('='); eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  return kv;
}

TEST(LoadTest, LoadingAndDetectionStartNothingAndAForkedChildRunsAnOp) {
  testing::TempDir cache;
  auto r = testing::run_process({KILN_LOAD_PROBE, cache.path(), testing::bundled_spec_dir()});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto kv = parse_lines(r.out);
  EXPECT_EQ(kv["threads_at_load"], "1") << r.out;
  EXPECT_EQ(kv["drivers_at_load"], "none") << r.out;
  EXPECT_EQ(kv["threads_after_detection"], "1") << r.out;
  EXPECT_NE(kv["available"].find("cpu"), std::string::npos) << r.out;
  EXPECT_EQ(kv["child_exit"], "0") << r.out << r.err;
  EXPECT_EQ(kv["child"].rfind("ok ", 0), 0u) << r.out << r.err;
  EXPECT_EQ(kv["parent"].rfind("ok ", 0), 0u) << r.out << r.err;
  // The child and the parent chose the same accelerator: the fork cost the child nothing.
  EXPECT_EQ(kv["child"], kv["parent"]);
}

}  // namespace
}  // namespace kiln
