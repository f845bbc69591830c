// Settings come from flags, the environment and two real config files, in that order; each
// says where it came from; a bad file says where it is wrong; secrets are read only from files
// their owner alone can read.
#include "cache/settings.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "tests/test_util.h"

namespace kiln::cache {
namespace {

using kiln::testing::TempDir;

// Points both config files into a temporary folder and clears every KILN_* setting variable;
// puts the environment back afterwards.
class SettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> names = {"KILN_CONFIG", "KILN_SYSTEM_CONFIG", "XDG_CONFIG_HOME"};
    for (size_t i = 0; i < static_cast<size_t>(SettingKey::kCount); ++i) names.push_back(setting_info(static_cast<SettingKey>(i)).env);
    for (auto& n : names) {
      const char* v = std::getenv(n.c_str());
      m_saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n.c_str());
    }
    ::setenv("KILN_CONFIG", (m_dir / "user.toml").c_str(), 1);
    ::setenv("KILN_SYSTEM_CONFIG", (m_dir / "system.toml").c_str(), 1);
  }
  void TearDown() override {
    for (auto& [n, v] : m_saved) {
      if (v) ::setenv(n.c_str(), v->c_str(), 1);
      else ::unsetenv(n.c_str());
    }
  }
  TempDir m_dir;
  std::vector<std::pair<std::string, std::optional<std::string>>> m_saved;
};

TEST_F(SettingsTest, WithoutFilesOrVariablesEverySettingIsItsDefault) {
  auto s = Settings::load();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->files().empty());
  EXPECT_EQ(s->get(SettingKey::kMaxSize), "5G");
  EXPECT_EQ(s->setting(SettingKey::kMaxSize).origin, "default");
  EXPECT_EQ(s->get(SettingKey::kRemoteTiers), "");
  EXPECT_EQ(s->max_bytes().value(), uint64_t{5} << 30);
  EXPECT_DOUBLE_EQ(s->seconds(SettingKey::kConnectTimeout).value(), 0.25);
}

TEST_F(SettingsTest, ADefaultFileThatCannotBeReadIsAWarningANamedOneAnError) {
  // Tests run as root, who reads any file: a folder where the file should be stands for one
  // this uid cannot read (read(2) fails; tests/integration/optional_files_test.cpp runs kiln
  // under another uid for the real thing).
  ::unsetenv("KILN_CONFIG");
  ::setenv("XDG_CONFIG_HOME", m_dir.path().c_str(), 1);
  ASSERT_EQ(::mkdir((m_dir / "kiln").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((m_dir / "kiln/config.toml").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((m_dir / "system.toml").c_str(), 0700), 0);
  ::setenv("KILN_CACHE_DIR", "/from/env", 1);
  auto s = Settings::load();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->get(SettingKey::kCacheDir), "/from/env") << "the rest of the settings still load";
  EXPECT_TRUE(s->files().empty());
  ASSERT_EQ(s->warnings().size(), 2u);
  EXPECT_NE(s->warnings()[0].find("cannot read the config file " + m_dir / "system.toml"), std::string::npos) << s->warnings()[0];
  EXPECT_NE(s->warnings()[1].find("cannot read the config file " + m_dir / "kiln/config.toml"), std::string::npos) << s->warnings()[1];
  EXPECT_NE(s->warnings()[1].find("going on without it"), std::string::npos) << s->warnings()[1];
  // Said once per process, however often the settings load.
  EXPECT_EQ(s->unsaid_warnings().size(), 2u);
  EXPECT_TRUE(Settings::load()->unsaid_warnings().empty());

  // Named, it was asked for: an error that names it and how it was named.
  ::setenv("KILN_CONFIG", (m_dir / "kiln/config.toml").c_str(), 1);
  auto named = Settings::load();
  ASSERT_FALSE(named.ok());
  EXPECT_NE(named.status().message().find("cannot read the config file " + m_dir / "kiln/config.toml" + " named by KILN_CONFIG"),
            std::string::npos)
      << named.status().message();
  // A path through a file is no file at all: nothing to say.
  m_dir.write("plain", "x");
  ::setenv("XDG_CONFIG_HOME", (m_dir / "plain").c_str(), 1);
  ::unsetenv("KILN_CONFIG");
  ::unsetenv("KILN_SYSTEM_CONFIG");
  ::setenv("KILN_SYSTEM_CONFIG", (m_dir / "absent.toml").c_str(), 1);
  auto none = Settings::load();
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->warnings().empty()) << none->warnings().front();
}

TEST_F(SettingsTest, FlagBeatsEnvironmentBeatsUserFileBeatsSystemFile) {
  m_dir.write("system.toml", "cache_dir = \"/from/system\"\nmax_size = \"1G\"\nlock_timeout = 7\n[remote]\ntimeout = 9\n");
  m_dir.write("user.toml", "# mine\ncache_dir = \"/from/user\"\nmax_size = \"2G\"\n");
  ::setenv("KILN_CACHE_DIR", "/from/env", 1);
  auto s = Settings::load({{SettingKey::kCacheDir, "/from/flag"}});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->cache_dir(), "/from/flag");
  EXPECT_EQ(s->setting(SettingKey::kCacheDir).origin, "--cache-dir");
  EXPECT_EQ(s->get(SettingKey::kMaxSize), "2G");
  EXPECT_EQ(s->setting(SettingKey::kMaxSize).origin, m_dir / "user.toml" + ":3:12");
  EXPECT_EQ(s->get(SettingKey::kLockTimeout), "7");
  EXPECT_EQ(s->setting(SettingKey::kLockTimeout).origin, m_dir / "system.toml" + ":3:16");
  EXPECT_DOUBLE_EQ(s->seconds(SettingKey::kTimeout).value(), 9);
  ASSERT_EQ(s->files().size(), 2u);
  EXPECT_EQ(s->files()[0], m_dir / "user.toml");

  auto no_flag = Settings::load();
  EXPECT_EQ(no_flag->cache_dir(), "/from/env");
  EXPECT_EQ(no_flag->setting(SettingKey::kCacheDir).origin, "KILN_CACHE_DIR");
}

TEST_F(SettingsTest, TiersWrittenAsTablesBecomeTheSameStringsTheEnvironmentTakes) {
  m_dir.write("user.toml", R"([remote]
tiers = ["redis://a:6379,redis://b:6379",
         { url = ["http://h1/kiln", "http://h2/kiln"], layout = "bazel", read_only = true, token_file = "/etc/t" },
         { url = "s3://kiln/cache", endpoint = "http://minio:9000", region = "eu-west-1", style = "path" }]
secret_file = "/etc/kiln/secret"
)");
  auto s = Settings::load();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->get(SettingKey::kRemoteTiers),
            "redis://a:6379,redis://b:6379 http://h1/kiln,http://h2/kiln|layout=bazel|read-only|token-file=/etc/t "
            "s3://kiln/cache|endpoint=http://minio:9000|region=eu-west-1|style=path");
  EXPECT_EQ(s->get(SettingKey::kSecretFile), "/etc/kiln/secret");
}

TEST_F(SettingsTest, KeysAreListsAndTheCacheTableHoldsTheSharedGroup) {
  m_dir.write("user.toml",
              "[remote]\ntrusted_keys = [\"ci-1:AAAA\", \"ci-2:BBBB\"]\nrevoked_keys = \"ci-0\"\n"
              "signing_key_file = \"/etc/kiln/ci-1.key\"\n[cache]\nshared_group = \"ml\"\n");
  auto s = Settings::load();
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->get(SettingKey::kTrustedKeys), "ci-1:AAAA ci-2:BBBB");
  EXPECT_EQ(s->get(SettingKey::kRevokedKeys), "ci-0");
  EXPECT_EQ(s->get(SettingKey::kSigningKeyFile), "/etc/kiln/ci-1.key");
  EXPECT_EQ(s->get(SettingKey::kSharedGroup), "ml");
  m_dir.write("user.toml", "[remote]\ntrusted_keys = [1]\n");
  auto bad = Settings::load();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("user.toml:2"), std::string::npos) << bad.status().message();
}

TEST_F(SettingsTest, AMistakeInAFileNamesTheFileLineAndColumn) {
  struct Case {
    const char* text;
    const char* where;
    const char* says;
  };
  for (const Case& c : {Case{"cache_dir = \"/x\"\nmax_sise = \"1G\"\n", ":2:12", "unknown setting 'max_sise'"},
                        Case{"[remote]\ntimeouts = 3\n", ":2:12", "unknown setting 'remote.timeouts'"},
                        Case{"max_size = [1]\n", ":1:12", "must be a string or a number"},
                        Case{"[remote]\ntiers = [{ urls = \"http://x\" }]\n", ":2:19", "unknown key 'urls' in a tier"},
                        Case{"[remote]\ntiers = [{ url = \"http://x a\" }]\n", ":2:18", "cannot hold spaces"},
                        Case{"cache_dir = \"/x\"\n\xc3\xa9 = 1\n", ":2:1", "must be ASCII"},
                        Case{"cache_dir = \n", ":1:", "invalid TOML"}}) {
    m_dir.write("user.toml", c.text);
    auto s = Settings::load();
    ASSERT_FALSE(s.ok()) << c.text;
    EXPECT_NE(s.status().message().find(m_dir / "user.toml" + c.where), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << s.status().message();
  }
}

TEST_F(SettingsTest, BadValuesSayWhichSettingAndWhereItCameFrom) {
  ::setenv("KILN_REMOTE_TIMEOUT", "soon", 1);
  ::setenv("KILN_CACHE_MAX_SIZE", "lots", 1);
  auto s = Settings::load();
  ASSERT_TRUE(s.ok());
  auto t = s->seconds(SettingKey::kTimeout);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("remote.timeout (from KILN_REMOTE_TIMEOUT)"), std::string::npos) << t.status().message();
  auto m = s->max_bytes();
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("max_size (from KILN_CACHE_MAX_SIZE)"), std::string::npos) << m.status().message();
}

TEST_F(SettingsTest, ASecretIsReadOnlyFromAFileNoOneElseCanRead) {
  std::string path = m_dir / "secret";
  m_dir.write("secret", "s3cret\n");
  ::chmod(path.c_str(), 0600);
  auto ok = read_secret_file(path);
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok.value(), "s3cret");

  ::chmod(path.c_str(), 0644);
  auto open = read_secret_file(path);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("mode 644"), std::string::npos) << open.status().message();
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);

  std::string link = m_dir / "link";
  ::chmod(path.c_str(), 0600);
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  EXPECT_FALSE(read_secret_file(link).ok()) << "a symlink could point anywhere";

  m_dir.write("empty", "\n");
  ::chmod((m_dir / "empty").c_str(), 0600);
  EXPECT_NE(read_secret_file(m_dir / "empty").status().message().find("is empty"), std::string::npos);
  EXPECT_EQ(read_secret_file(m_dir / "missing").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::cache
