// `kiln config`: the effective settings and where each came from, as `git config
// --show-origin` does. A secret is shown as set (and whether its file is fit to use), never
// its content.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cache/remote.h"
#include "cache/settings.h"
#include "tools/cli_common.h"

namespace kiln::tools {
namespace {

constexpr const char* k_config_help = R"(usage: kiln config [--json]

Prints every setting, its effective value and where it came from. One precedence order:
  1. a command-line flag (--cache-dir, --remote)
  2. an environment variable (KILN_CACHE_DIR, KILN_REMOTE_CACHE, ...)
  3. the user's file: --config FILE, else $KILN_CONFIG, else
     $XDG_CONFIG_HOME/kiln/config.toml, else ~/.config/kiln/config.toml
  4. the system's file: $KILN_SYSTEM_CONFIG, else /etc/kiln/config.toml
  5. the default
A file named by --config or KILN_CONFIG must be readable; any other that exists but cannot
be read (a $HOME this uid cannot enter) is passed over with a warning.

A config file is TOML, for example:

  cache_dir = "/scratch/kiln"
  max_size = "20G"
  [remote]
  tiers = ["redis://cache-1:6379,redis://cache-2:6379",
           { url = "http://bazel-remote:8080/kiln", layout = "bazel", read_only = true }]
  secret_file = "/etc/kiln/cluster.secret"   # mode 0600: signs and checks artifacts
  ca_file = "/etc/kiln/ca.pem"               # https tiers: the CAs that sign the servers
  timeout = 2.0

Secrets (the cluster secret, tokens, passwords) are read only from files that their owner
alone can read; kiln config says whether each is fit to use, never what it holds.

options:
  --json   print one JSON object instead of text
)";

// What to say about a secret file: "" when it is fit to use, else why not.
std::string secret_state(const std::string& path) {
  auto secret = cache::read_secret_file(path);
  return secret.ok() ? "" : secret.status().message();
}

}  // namespace

int cmd_config(const std::vector<std::string>& argv, const GlobalOptions& global) {
  auto args = parse_args(argv, {}, {"--json", "--help", "-h"});
  if (!args.ok()) return usage_error(args.status().message(), k_config_help);
  if (args->has("--help") || args->has("-h")) return std::cout << k_config_help, 0;
  if (!args->positional.empty()) return usage_error("config takes no operands", k_config_help);
  auto settings = global.settings();
  if (!settings.ok()) return fail(settings.status());
  auto tiers = cache::parse_tiers(settings->get(cache::SettingKey::kRemoteTiers));
  const std::string& secret_file = settings->get(cache::SettingKey::kSecretFile);
  std::string secret_problem = secret_file.empty() ? "" : secret_state(secret_file);

  if (args->has("--json")) {
    std::cout << "{\"settings\":[";
    for (size_t i = 0; i < static_cast<size_t>(cache::SettingKey::kCount); ++i) {
      auto key = static_cast<cache::SettingKey>(i);
      const auto& info = cache::setting_info(key);
      const auto& s = settings->setting(key);
      std::string value = key == cache::SettingKey::kCacheDir ? settings->cache_dir() : s.value;
      std::cout << (i ? "," : "") << "{\"name\":" << json_string(info.name) << ",\"value\":" << json_string(value)
                << ",\"origin\":" << json_string(s.origin) << ",\"env\":" << json_string(info.env) << "}";
    }
    std::cout << "],\"files\":[";
    for (size_t i = 0; i < settings->files().size(); ++i) std::cout << (i ? "," : "") << json_string(settings->files()[i]);
    std::cout << "],\"warnings\":[";
    for (size_t i = 0; i < settings->warnings().size(); ++i) std::cout << (i ? "," : "") << json_string(settings->warnings()[i]);
    std::cout << "],\"user_file\":" << json_string(cache::Settings::user_file_path())
              << ",\"system_file\":" << json_string(cache::Settings::system_file_path()) << ",\"secret\":";
    if (secret_file.empty()) std::cout << "\"not set\"";
    else if (secret_problem.empty()) std::cout << "\"set\"";
    else std::cout << "{\"problem\":" << json_string(secret_problem) << "}";
    std::cout << ",\"tiers\":";
    if (!tiers.ok()) {
      std::cout << "{\"problem\":" << json_string(tiers.status().message()) << "}";
    } else {
      std::cout << "[";
      for (size_t i = 0; i < tiers->size(); ++i) {
        auto& t = (*tiers)[i];
        std::cout << (i ? "," : "") << "{\"tier\":" << json_string(t.str()) << ",\"read_only\":" << (t.read_only ? "true" : "false")
                  << ",\"endpoints\":[";
        for (size_t e = 0; e < t.endpoints.size(); ++e) std::cout << (e ? "," : "") << json_string(t.endpoints[e].text);
        std::cout << "]}";
      }
      std::cout << "]";
    }
    std::cout << "}\n";
    return tiers.ok() && secret_problem.empty() ? 0 : 1;
  }

  std::cout << "settings (flag > environment > user file > system file > default)\n";
  for (size_t i = 0; i < static_cast<size_t>(cache::SettingKey::kCount); ++i) {
    auto key = static_cast<cache::SettingKey>(i);
    const auto& info = cache::setting_info(key);
    const auto& s = settings->setting(key);
    std::string value = key == cache::SettingKey::kCacheDir ? settings->cache_dir() : s.value;
    if (key == cache::SettingKey::kSecretFile && !value.empty())
      value += secret_problem.empty() ? " (set; owner-only)" : " (NOT USABLE: " + secret_problem + ")";
    std::printf("  %-24s %-40s %s\n", info.name, value.empty() ? "(none)" : value.c_str(), s.origin.c_str());
  }
  std::cout << "config files\n  user    " << cache::Settings::user_file_path() << "\n  system  " << cache::Settings::system_file_path()
            << "\n  read    ";
  if (settings->files().empty()) std::cout << "none (neither exists)";
  for (size_t i = 0; i < settings->files().size(); ++i) std::cout << (i ? ", " : "") << settings->files()[i];
  std::cout << "\n";
  if (!tiers.ok()) {
    std::cout << "remote tiers: " << tiers.status().message() << "\n";
    return 1;
  }
  if (!tiers->empty()) {
    std::cout << "remote tiers (in the order they are asked)\n";
    for (size_t i = 0; i < tiers->size(); ++i) {
      auto& t = (*tiers)[i];
      std::cout << "  " << i + 1 << ". " << (t.read_only ? "read-only " : "read-write") << "  " << t.label;
      if (t.endpoints.size() > 1) std::cout << "  (" << t.endpoints.size() << " endpoints sharing the keys)";
      std::cout << "\n";
    }
  }
  return secret_problem.empty() ? 0 : 1;
}

}  // namespace kiln::tools
