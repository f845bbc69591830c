// kiln's settings, each with where it came from. One precedence everywhere (DESIGN.md):
// command-line flag > environment variable > the user's config file > the system's > default.
//
//   user file    $KILN_CONFIG, else $XDG_CONFIG_HOME/kiln/config.toml, else ~/.config/kiln/config.toml
//   system file  $KILN_SYSTEM_CONFIG, else /etc/kiln/config.toml
//
// A config file is TOML:
//
//   cache_dir = "/scratch/kiln"
//   max_size = "20G"
//   [remote]
//   tiers = ["redis://cache-1:6379,redis://cache-2:6379",
//            { url = "http://bazel-remote:8080/kiln", layout = "bazel", read_only = true }]
//   signing_key_file = "/etc/kiln/ci-1.key"  # publishers only: `kiln key generate ci-1 --out FILE`
//   trusted_keys = ["ci-1:BASE64...", "ci-2:BASE64..."]  # whose objects this node loads
//   revoked_keys = ["ci-0"]                  # names or NAME:BASE64, refused even if trusted
//   secret_file = "/etc/kiln/cluster.secret" # the older HMAC secret (any reader can publish)
//   ca_file = "/etc/kiln/ca.pem"             # https tiers: the CAs to trust
//   timeout = 2.0
//
// Files are read on every load (two failed open()s when there are none): no process-wide
// state but a file named on the command line, so a test or a long-lived process that changes
// the environment sees the change.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/status.h"

namespace kiln::cache {

enum class SettingKey {
  kCacheDir,
  kMaxSize,
  kLockTimeout,
  kRemoteTiers,
  kSecretFile,
  kCaFile,
  kCertFile,
  kKeyFile,
  kConnectTimeout,
  kTimeout,
  kWait,
  kLease,
  kBreaker,
  kSigningKeyFile,
  kTrustedKeys,
  kRevokedKeys,
  kSharedGroup,
  kUnsignedOk,
  kCount
};

struct SettingInfo {
  const char* name;      // in the config file: "cache_dir", "remote.timeout"
  const char* env;       // "KILN_CACHE_DIR"
  const char* flag;      // "--cache-dir", or "" when no flag sets it
  const char* fallback;  // the default as text ("" = none)
  const char* help;
};
const SettingInfo& setting_info(SettingKey key);

struct Setting {
  std::string value;   // as written: a path, a size, seconds, a tier list
  std::string origin;  // "--cache-dir", "KILN_CACHE_DIR", "/etc/kiln/config.toml:4", "default"
};

// Where a config file is, and whether the user named it (then it must be readable).
struct ConfigFile {
  std::string path;
  bool named = false;
  std::string named_by;  // "KILN_CONFIG", "--config"
};

class Settings {
 public:
  // The environment and the config files, then `flags` on top (by key; an empty value from
  // a flag counts as given). A config file that does not parse, or that holds an unknown key
  // or a value of the wrong type, fails with "file:line:col: what is wrong". One that exists
  // but cannot be read fails when the user named it (--config, $KILN_CONFIG), and is
  // otherwise passed over with a warning (warnings()): it is optional.
  static Result<Settings> load(const std::map<SettingKey, std::string>& flags = {});

  const std::string& get(SettingKey key) const { return m_values[static_cast<size_t>(key)].value; }
  const Setting& setting(SettingKey key) const { return m_values[static_cast<size_t>(key)]; }
  // The config files that exist and were read, user file first.
  const std::vector<std::string>& files() const { return m_files; }
  // What load() passed over ("cannot read the config file PATH (...); going on without it").
  const std::vector<std::string>& warnings() const { return m_warnings; }
  // The warnings no earlier call returned in this process: each is said once, however many
  // times the settings are loaded (a command may load them more than once).
  std::vector<std::string> unsaid_warnings() const;

  // Typed views that say which setting was wrong and where it came from.
  std::string cache_dir() const;
  Result<uint64_t> max_bytes() const;
  Result<double> seconds(SettingKey key) const;

  // The user's file for the rest of this process, named on a command line (`kiln --config
  // FILE`): it wins over $KILN_CONFIG, and must be readable.
  static void name_user_file(const std::string& path, const std::string& named_by);
  // The paths the user and system files would have (whether or not they exist).
  static ConfigFile user_file();
  static ConfigFile system_file();
  static std::string user_file_path();
  static std::string system_file_path();

 private:
  std::array<Setting, static_cast<size_t>(SettingKey::kCount)> m_values;
  std::vector<std::string> m_files;
  std::vector<std::string> m_warnings;
};

// Reads a secret (a cluster key, a token, a password) from a file that must be a regular file
// owned by this user (or root) and readable by no one else (mode 0600 or 0400), as ssh insists
// for its keys. Trailing newlines are dropped; an empty secret is an error.
Result<std::string> read_secret_file(const std::string& path);

}  // namespace kiln::cache
