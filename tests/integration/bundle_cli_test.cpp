// Bundles as a user ships them: `kiln cache pack` on one cache, `kiln cache unpack` into
// another (real files, the real kiln), then hits with nothing compiled; a truncated, altered,
// unsigned or wrongly signed bundle refused whole, naming the object, with nothing imported.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::run_process;
using testing::TempDir;

struct Cli {
  std::string cache;
  std::map<std::string, std::string> env{};  // {}: Cli{dir} leaves it out
  testing::ProcessResult operator()(std::initializer_list<std::string> args) const {
    std::vector<std::string> argv{testing::kiln_binary(), "--cache-dir", cache};
    argv.insert(argv.end(), args);
    return run_process(argv, env);
  }
};

std::string secret(const TempDir& dir, const std::string& name, const std::string& value) {
  dir.write(name, value);
  ::chmod((dir / name).c_str(), 0600);
  return dir / name;
}

class BundleCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One warmed cache for every test: every bundled op for the CPU.
    s_warm = new TempDir;
    auto warm = Cli{s_warm->path()}({"warm"});
    ASSERT_EQ(warm.exit_code, 0) << warm.err;
  }
  static void TearDownTestSuite() { delete s_warm; }
  static TempDir* s_warm;
  TempDir m_dir, m_other;
};
TempDir* BundleCliTest::s_warm = nullptr;

TEST_F(BundleCliTest, AnUnpackedBundleGivesHitsWithNothingCompiled) {
  std::string bundle = m_dir / "ops.kiln";
  auto pack = Cli{s_warm->path()}({"cache", "pack", bundle, "--json"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  size_t ops = testing::bundled_op_names().size();
  EXPECT_EQ(testing::json_int(pack.out, "artifacts"), static_cast<int64_t>(ops)) << pack.out;
  EXPECT_EQ(testing::json_int(pack.out, "manifests"), static_cast<int64_t>(ops)) << pack.out;

  Cli other{m_other.path()};
  auto unpack = other({"cache", "unpack", bundle, "--json"});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  EXPECT_EQ(testing::json_int(unpack.out, "artifacts"), static_cast<int64_t>(ops));
  // Direct lookups hit (the manifests came too), and the ops run.
  auto warm = other({"warm", "--check", "--json"});
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  EXPECT_EQ(warm.out.find("\"source\":\"compiled\""), std::string::npos) << warm.out;
  EXPECT_EQ(testing::json_int(other({"cache", "stats", "--json"}).out, "compiles"), 0);
  EXPECT_EQ(other({"cache", "verify"}).exit_code, 0);
  // Again: everything is already here.
  auto again = other({"cache", "unpack", bundle, "--json"});
  EXPECT_EQ(testing::json_int(again.out, "already_here"), static_cast<int64_t>(ops)) << again.out;
}

TEST_F(BundleCliTest, PackTakesOnlyTheOpsAndTargetsNamed) {
  std::string bundle = m_dir / "two.kiln";
  auto pack = Cli{s_warm->path()}({"cache", "pack", bundle, "--op", "gelu", "--op", "adamw", "--json"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  EXPECT_EQ(testing::json_int(pack.out, "artifacts"), 2);
  Cli other{m_other.path()};
  ASSERT_EQ(other({"cache", "unpack", bundle}).exit_code, 0);
  auto ls = other({"cache", "ls", "--json"});
  EXPECT_NE(ls.out.find("\"op\":\"gelu\""), std::string::npos);
  EXPECT_NE(ls.out.find("\"op\":\"adamw\""), std::string::npos);
  EXPECT_EQ(ls.out.find("\"op\":\"vector_add\""), std::string::npos);
  auto none = Cli{s_warm->path()}({"cache", "pack", m_dir / "none.kiln", "--target", "cpu:x86-64-v1"});
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_NE(none.err.find("the bundle is empty"), std::string::npos) << none.err;
}

TEST_F(BundleCliTest, ATruncatedOrAlteredBundleIsRefusedWholeNamingTheObject) {
  std::string bundle = m_dir / "ops.kiln";
  ASSERT_EQ(Cli{s_warm->path()}({"cache", "pack", bundle, "--op", "gelu", "--op", "vector_add"}).exit_code, 0);
  std::string bytes = testing::read_text(bundle);
  struct Case {
    std::string name, bytes, says;
  };
  std::string flipped = bytes;
  flipped[bytes.size() - 200] ^= 0x01;  // inside the last object
  std::vector<Case> cases = {
      {"truncated", bytes.substr(0, bytes.size() - 1000), "is cut off"},
      {"flipped", flipped, "is damaged (hash mismatch)"},
      {"index", bytes.substr(0, 60), "truncated in its index"},
      {"empty", "", "not a kiln bundle"},
      {"text", "hello, I am not a bundle at all, but I am long enough to have a header", "not a kiln bundle"},
      {"extra", bytes + "trailing", "more than its index lists"},
  };
  for (auto& c : cases) {
    std::ofstream(m_dir / c.name, std::ios::binary) << c.bytes;
    Cli other{m_other.path()};
    auto r = other({"cache", "unpack", m_dir / c.name});
    EXPECT_EQ(r.exit_code, 1) << c.name;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(testing::json_int(other({"cache", "stats", "--json"}).out, "artifacts"), 0) << c.name << ": something was imported";
  }
  auto missing = Cli{m_other.path()}({"cache", "unpack", m_dir / "nowhere.kiln"});
  EXPECT_NE(missing.err.find("no bundle at"), std::string::npos) << missing.err;
}

TEST_F(BundleCliTest, WithASecretBundlesAreSignedAndCheckedAndOthersRefused) {
  TempDir secrets;
  std::map<std::string, std::string> ours{{"KILN_REMOTE_SECRET_FILE", secret(secrets, "ours", "the cluster's secret")}};
  std::map<std::string, std::string> theirs{{"KILN_REMOTE_SECRET_FILE", secret(secrets, "theirs", "someone else's")}};
  std::string signed_bundle = m_dir / "signed.kiln", plain = m_dir / "plain.kiln";
  auto pack = Cli{s_warm->path(), ours}({"cache", "pack", signed_bundle, "--op", "gelu", "--json"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  EXPECT_NE(pack.out.find("\"signed\":true"), std::string::npos);
  ASSERT_EQ(Cli{s_warm->path()}({"cache", "pack", plain, "--op", "gelu"}).exit_code, 0);

  auto good = Cli{m_other.path(), ours}({"cache", "unpack", signed_bundle});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("every signature checked"), std::string::npos) << good.out;

  TempDir third;
  auto wrong = Cli{third.path(), theirs}({"cache", "unpack", signed_bundle});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("signature does not match"), std::string::npos) << wrong.err;
  auto unsigned_refused = Cli{third.path(), ours}({"cache", "unpack", plain});
  EXPECT_EQ(unsigned_refused.exit_code, 1);
  EXPECT_NE(unsigned_refused.err.find("not signed"), std::string::npos) << unsigned_refused.err;
  EXPECT_EQ(testing::json_int(Cli{third.path()}({"cache", "stats", "--json"}).out, "artifacts"), 0);
}

}  // namespace
}  // namespace kiln
