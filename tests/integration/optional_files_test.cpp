// Optional files never stop kiln. kiln runs here as a user would meet it in a container
// started with --user or under a service account: as another uid (nobody, through setpriv),
// with a $HOME it cannot enter and a shared cache folder holding another user's files. Each
// optional file it cannot read is one warning naming it, and the op runs; a config file the
// user named and kiln cannot read is an error. Needs root (to switch uid) and setpriv.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using testing::json_field;
using testing::run_process;
using testing::TempDir;

constexpr const char* k_uid = "65534";  // nobody

std::string setpriv() {
  return testing::find_program("setpriv", {"/usr/bin/setpriv"});
}

#define REQUIRE_ANOTHER_UID()                                                                             \
  if (::geteuid() != 0)                                                                                   \
    GTEST_SKIP() << "running kiln under another uid needs root (tests run as uid " << ::geteuid() << ")"; \
  if (setpriv().empty()) GTEST_SKIP() << "setpriv (util-linux) is not installed"

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

class OptionalFilesTest : public ::testing::Test {
 protected:
  OptionalFilesTest() {
    // $HOME: root's own, mode 0700, with a config file in it that nobody asked for.
    m_home.write(".config/kiln/config.toml", "max_size = \"1G\"\n");
    ::chmod(m_home.path().c_str(), 0700);
    // What the other uid may read: the specs; where it may write: the cache folder, its own
    // (a folder anyone can write is refused: docs/SECURITY.md).
    testing::write_variant_specs(m_specs.path(), 1);
    ::chmod(m_specs.path().c_str(), 0755);
    (void)::chown(m_cache.path().c_str(), 65534, 65534);
    ::chmod(m_cache.path().c_str(), 0700);
    // A root-only file, for the settings that name files.
    m_private.write("root-only.toml", "max_size = \"2G\"\n");
    ::chmod((m_private / "root-only.toml").c_str(), 0600);
    ::chmod(m_private.path().c_str(), 0755);
  }
  // kiln ARGS as uid nobody, with HOME set and the XDG folders unset.
  testing::ProcessResult kiln(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv{setpriv(), "--reuid=" + std::string(k_uid), "--regid=" + std::string(k_uid),
                                  "--clear-groups", testing::kiln_binary()};
    argv.insert(argv.end(), args.begin(), args.end());
    env.emplace("HOME", m_home.path());
    env.emplace("XDG_CONFIG_HOME", "");
    env.emplace("XDG_CACHE_HOME", "");
    env.emplace("KILN_CONFIG", "");
    env.emplace("KILN_SYSTEM_CONFIG", "");
    env.emplace("KILN_CACHE_DIR", "");
    return run_process(argv, env);
  }
  std::string spec() const { return m_specs / "variant0.toml"; }
  TempDir m_home, m_specs, m_cache, m_private;
};

TEST_F(OptionalFilesTest, AConfigFileInAHomeThisUidCannotReadIsOneWarningAndTheOpRuns) {
  REQUIRE_ANOTHER_UID();
  std::string config = m_home / ".config/kiln/config.toml";
  auto r = kiln({"--cache-dir", m_cache.path(), "build", spec(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "source"), "compiled") << r.out;
  EXPECT_EQ(count(r.err, "kiln: warning:"), 1u) << r.err;
  EXPECT_NE(r.err.find("cannot read the config file " + config + ": Permission denied; going on without it"),
            std::string::npos)
      << r.err;
  // The cache it was given works: the second run hits.
  auto again = kiln({"--cache-dir", m_cache.path(), "build", spec(), "--json"});
  EXPECT_EQ(json_field(again.out, "source"), "disk") << again.out << again.err;
  // kiln config says so too, and shows the default it fell back to.
  auto shown = kiln({"config", "--json"});
  EXPECT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("\"warnings\":[\"cannot read the config file " + config), std::string::npos) << shown.out;
  EXPECT_NE(shown.out.find("{\"name\":\"max_size\",\"value\":\"5G\",\"origin\":\"default\""), std::string::npos)
      << shown.out;
  // With no cache folder of its own either ($HOME/.cache), it says that once more and still runs.
  auto homeless = kiln({"run", "variant0", "--spec-dir", m_specs.path(), "--json"});
  EXPECT_EQ(homeless.exit_code, 0) << homeless.err;
  EXPECT_EQ(json_field(homeless.out, "check"), "ok") << homeless.out;
  EXPECT_EQ(count(homeless.err, "kiln: warning:"), 2u) << homeless.err;
  EXPECT_NE(homeless.err.find("set KILN_CACHE_DIR or --cache-dir"), std::string::npos) << homeless.err;
  // A system file it cannot read is passed over the same way.
  auto system =
      kiln({"--cache-dir", m_cache.path(), "build", spec()}, {{"KILN_SYSTEM_CONFIG", m_private / "root-only.toml"}});
  EXPECT_EQ(system.exit_code, 0) << system.err;
  EXPECT_NE(system.err.find("cannot read the config file " + m_private / "root-only.toml"), std::string::npos)
      << system.err;
}

TEST_F(OptionalFilesTest, AConfigFileTheUserNamedAndThisUidCannotReadIsAnError) {
  REQUIRE_ANOTHER_UID();
  std::string file = m_private / "root-only.toml";
  auto by_env = kiln({"--cache-dir", m_cache.path(), "build", spec()}, {{"KILN_CONFIG", file}});
  EXPECT_EQ(by_env.exit_code, 1);
  EXPECT_NE(
      by_env.err.find("kiln: error: cannot read the config file " + file + " named by KILN_CONFIG: Permission denied"),
      std::string::npos)
      << by_env.err;
  auto by_flag = kiln({"--config", file, "--cache-dir", m_cache.path(), "build", spec()});
  EXPECT_EQ(by_flag.exit_code, 1);
  EXPECT_NE(by_flag.err.find("named by --config: Permission denied"), std::string::npos) << by_flag.err;
  // --config wins over KILN_CONFIG, and a readable one is read.
  m_private.write("mine.toml", "max_size = \"3G\"\n");
  ::chmod((m_private / "mine.toml").c_str(), 0644);
  auto good = kiln({"--config", m_private / "mine.toml", "config", "--json"}, {{"KILN_CONFIG", file}});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_NE(good.out.find("\"value\":\"3G\",\"origin\":\"" + m_private / "mine.toml:1:12\""), std::string::npos)
      << good.out;
}

TEST_F(OptionalFilesTest, AnotherUsersFilesInASharedCacheFolderAreWarningsNotFailures) {
  REQUIRE_ANOTHER_UID();
  // Left by root in the shared folder: its file memo and a usage journal, both 0600.
  m_cache.write("file-memo", "hash\t/x.h\t00000000000000000000000000000000\tabc\n");
  m_cache.write("usage", "C compiles 1\n");
  ::chmod((m_cache / "file-memo").c_str(), 0600);
  ::chmod((m_cache / "usage").c_str(), 0600);
  // The cluster secret, configured but root's: the remote tier is off, the op runs.
  m_private.write("secret", "s3cret\n");
  ::chmod((m_private / "secret").c_str(), 0600);
  auto r = kiln({"--cache-dir", m_cache.path(), "--remote",
                 "http://127.0.0.1:" + std::to_string(testing::free_port()) + "/kiln", "build", spec(), "--json"},
                {{"KILN_REMOTE_SECRET_FILE", m_private / "secret"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "source"), "compiled") << r.out;
  EXPECT_NE(r.err.find("cannot read the file memo " + m_cache / "file-memo"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot read the usage journal " + m_cache / "usage.folding."), std::string::npos) << r.err;
  EXPECT_NE(
      r.err.find("remote cache tiers are off: open the secret file " + m_private / "secret" + ": Permission denied"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(count(r.err, "kiln: warning:"), 4u) << r.err;  // those three and the config file in $HOME
  // The journal it could not read is left for its owner, not deleted.
  int kept = 0;
  for (auto& e : std::filesystem::directory_iterator(m_cache.path())) {
    struct stat st {};
    if (e.path().filename().string().rfind("usage.folding.", 0) == 0 && ::stat(e.path().c_str(), &st) == 0 &&
        st.st_uid == 0)
      ++kept;
  }
  EXPECT_EQ(kept, 1);
}

}  // namespace
}  // namespace kiln
