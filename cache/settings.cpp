#include "cache/settings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "support/file_util.h"
#include "support/toml.h"
#include "support/units.h"

namespace kiln::cache {
namespace {

constexpr SettingInfo k_settings[] = {
    {"cache_dir", "KILN_CACHE_DIR", "--cache-dir", "", "the cache folder (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)"},
    {"max_size", "KILN_CACHE_MAX_SIZE", "", "5G", "the local cache's size cap; least recently used artifacts go first"},
    {"lock_timeout", "KILN_LOCK_TIMEOUT", "", "300", "seconds to wait for another process on this node compiling the same key"},
    {"remote.tiers", "KILN_REMOTE_CACHE", "--remote", "",
     "remote tiers, tried in order after the local cache: URL[,URL...][|read-only][|prefix=P][|layout=L]... separated by spaces "
     "(s3://BUCKET/PREFIX[|endpoint=URL][|region=R][|style=path|virtual] for S3)"},
    {"remote.secret_file", "KILN_REMOTE_SECRET_FILE", "", "",
     "the cluster secret (a file only its owner reads): artifacts are signed and checked with HMAC-SHA256"},
    {"remote.ca_file", "KILN_REMOTE_CA_FILE", "", "",
     "https tiers: a PEM bundle of the CAs that sign the servers' certificates (default: the system's CAs)"},
    {"remote.cert_file", "KILN_REMOTE_CERT_FILE", "", "", "https tiers: this node's client certificate (PEM), for servers that ask for one"},
    {"remote.key_file", "KILN_REMOTE_KEY_FILE", "", "",
     "https tiers: the client certificate's private key (PEM, a file only its owner reads; default: in cert_file)"},
    {"remote.connect_timeout", "KILN_REMOTE_CONNECT_TIMEOUT", "", "0.25", "seconds to wait for a remote to accept a connection"},
    {"remote.timeout", "KILN_REMOTE_TIMEOUT", "", "2", "seconds a remote may stay silent during a request"},
    {"remote.wait", "KILN_REMOTE_WAIT", "", "300", "seconds to wait for another node compiling the same key, then compile here"},
    {"remote.lease", "KILN_REMOTE_LEASE", "", "30", "seconds a compile's lease lasts unless renewed (renewed every third of it)"},
    {"remote.breaker", "KILN_REMOTE_BREAKER", "", "60", "seconds a remote that failed is skipped before it is tried again"},
    {"remote.signing_key_file", "KILN_SIGNING_KEY_FILE", "", "",
     "the Ed25519 private key this node publishes with (`kiln key generate`; a file only its owner reads); none: publish nothing "
     "when trusted keys are set"},
    {"remote.trusted_keys", "KILN_TRUSTED_KEYS", "", "",
     "the public keys (NAME:BASE64, comma or space separated) whose signed objects this node loads; set, nothing else is loaded"},
    {"remote.revoked_keys", "KILN_REVOKED_KEYS", "", "", "keys (NAME or NAME:BASE64) whose objects are refused even when trusted"},
    {"cache.shared_group", "KILN_CACHE_SHARED_GROUP", "", "",
     "a group allowed to share the cache folder (group-writable, owned by that group); none: the folder is the user's alone"},
    {"remote.unsigned_ok", "KILN_REMOTE_UNSIGNED_OK", "", "",
     "1: the tiers are private to this user or job; do not warn once per process that they are unsigned or HMAC-only "
     "(kiln doctor still says it)"},
};
static_assert(std::size(k_settings) == static_cast<size_t>(SettingKey::kCount));

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

std::string where(const std::string& path, const toml::node& node) {
  const auto& src = node.source();
  return path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

Status file_error(const std::string& path, const toml::node& node, const std::string& message) {
  return invalid_argument(where(path, node) + ": " + message);
}

// A scalar as text: strings as they are, numbers as written.
Result<std::string> scalar_text(const std::string& path, const std::string& name, const toml::node& node) {
  if (auto s = node.value<std::string>(); s && node.is_string()) return *s;
  if (node.is_integer()) return std::to_string(*node.value<int64_t>());
  if (node.is_floating_point()) {
    std::string text = std::to_string(*node.value<double>());
    while (text.size() > 1 && text.back() == '0' && text[text.size() - 2] != '.') text.pop_back();
    return text;
  }
  return file_error(path, node, name + " must be a string or a number");
}

Status check_tier_word(const std::string& path, const toml::node& node, const std::string& word) {
  for (char c : word)
    if (c == '|' || c == ' ' || c == '\t' || c == '\n' || c == ',')
      return file_error(path, node, "'" + word + "' cannot hold spaces, '|' or ','");
  return {};
}

// A tier written as a table, in the string form every other source uses (remote.h parses it).
Result<std::string> tier_from_table(const std::string& path, const toml::table& t) {
  std::string out;
  for (auto& [k, v] : t) {
    std::string key(k.str());
    if (key == "url") {
      std::vector<const toml::node*> urls;
      if (auto* a = v.as_array()) {
        for (auto& u : *a) urls.push_back(&u);
      } else {
        urls.push_back(&v);
      }
      if (urls.empty()) return file_error(path, v, "url must name at least one endpoint");
      std::string joined;
      for (auto* u : urls) {
        if (!u->is_string()) return file_error(path, *u, "url must be a string or a list of strings");
        std::string s = *u->value<std::string>();
        KILN_RETURN_IF_ERROR(check_tier_word(path, *u, s));
        joined += (joined.empty() ? "" : ",") + s;
      }
      out = joined + out;
    } else if (key == "read_only") {
      if (!v.is_boolean()) return file_error(path, v, "read_only must be true or false");
      if (*v.value<bool>()) out += "|read-only";
    } else if (key == "prefix" || key == "layout" || key == "token_file" || key == "basic_auth_file" || key == "password_file" ||
               key == "endpoint" || key == "region" || key == "style") {
      if (!v.is_string()) return file_error(path, v, key + " must be a string");
      std::string s = *v.value<std::string>();
      KILN_RETURN_IF_ERROR(check_tier_word(path, v, s));
      std::string attr = key;
      for (char& c : attr)
        if (c == '_') c = '-';
      out += "|" + attr + "=" + s;
    } else {
      return file_error(path, v,
                        "unknown key '" + key + "' in a tier (known: url, read_only, prefix, layout, token_file, basic_auth_file, password_file, "
                        "endpoint, region, style)");
    }
  }
  if (out.empty() || out[0] == '|') return invalid_argument(where(path, t) + ": a tier needs a url");
  return out;
}

Result<std::string> tiers_from_node(const std::string& path, const toml::node& node) {
  std::vector<const toml::node*> items;
  if (auto* a = node.as_array()) {
    for (auto& i : *a) items.push_back(&i);
  } else {
    items.push_back(&node);
  }
  std::string out;
  for (auto* item : items) {
    std::string tier;
    if (item->is_string()) {
      tier = *item->value<std::string>();
    } else if (auto* t = item->as_table()) {
      KILN_ASSIGN_OR_RETURN(tier, tier_from_table(path, *t));
    } else {
      return file_error(path, *item, "remote.tiers must be a string, a table, or a list of them");
    }
    out += (out.empty() ? "" : " ") + tier;
  }
  return out;
}

// Fills `values` from one config file. A missing file is no error. One that exists but cannot
// be read is an error when the user named it (KILN_CONFIG, --config: they asked for it), and
// otherwise a warning: a job under a uid that cannot read $HOME (a container started with
// --user, a service account) must not stop over a file nobody asked for.
Status read_config_file(const ConfigFile& file, std::array<Setting, static_cast<size_t>(SettingKey::kCount)>& values,
                        std::vector<std::string>& files, std::vector<std::string>& warnings) {
  const std::string& path = file.path;
  auto text = read_file(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) return {};
    std::string why = read_failure_reason(text.status(), path);
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) return {};  // a file on the way: none here
    if (file.named)
      return invalid_argument("cannot read the config file " + path + " named by " + file.named_by + ": " + why +
                              " (make it readable by this user, or name another)");
    warnings.push_back("cannot read the config file " + path + ": " + why +
                       "; going on without it (make it readable, or set KILN_CONFIG to a file this user can read, "
                       "or to /dev/null for none)");
    return {};
  }
  files.push_back(path);
  KILN_ASSIGN_OR_RETURN(toml::table root, parse_toml(text.value(), path, "a config file"));
  auto set = [&](SettingKey key, std::string value, const toml::node& node) {
    values[static_cast<size_t>(key)] = {std::move(value), where(path, node)};
  };
  auto key_for = [](const std::string& name) -> int {
    for (size_t i = 0; i < std::size(k_settings); ++i)
      if (name == k_settings[i].name) return static_cast<int>(i);
    return -1;
  };
  std::string known;
  for (auto& s : k_settings) known += (known.empty() ? "" : ", ") + std::string(s.name);
  for (auto& [k, v] : root) {
    std::string name(k.str());
    if (name == "remote" || name == "cache") {
      auto* remote = v.as_table();
      if (!remote) return file_error(path, v, name + " must be a table ([" + name + "])");
      for (auto& [rk, rv] : *remote) {
        std::string full = name + "." + std::string(rk.str());
        int i = key_for(full);
        if (i < 0) return file_error(path, rv, "unknown setting '" + full + "' (known: " + known + ")");
        if (static_cast<SettingKey>(i) == SettingKey::kRemoteTiers) {
          KILN_ASSIGN_OR_RETURN(std::string tiers, tiers_from_node(path, rv));
          set(SettingKey::kRemoteTiers, tiers, rv);
        } else if (auto* list = rv.as_array(); list && (static_cast<SettingKey>(i) == SettingKey::kTrustedKeys ||
                                                        static_cast<SettingKey>(i) == SettingKey::kRevokedKeys)) {
          // A list of keys, kept as the environment variable writes it: space separated.
          std::string joined;
          for (auto& item : *list) {
            if (!item.is_string()) return file_error(path, item, full + " must be a list of strings (NAME:BASE64)");
            joined += (joined.empty() ? "" : " ") + *item.value<std::string>();
          }
          set(static_cast<SettingKey>(i), joined, rv);
        } else {
          KILN_ASSIGN_OR_RETURN(std::string value, scalar_text(path, full, rv));
          set(static_cast<SettingKey>(i), value, rv);
        }
      }
      continue;
    }
    int i = key_for(name);
    if (i < 0 || name.rfind("remote.", 0) == 0 || name.rfind("cache.", 0) == 0) return file_error(path, v, "unknown setting '" + name + "' (known: " + known + ")");
    KILN_ASSIGN_OR_RETURN(std::string value, scalar_text(path, name, v));
    set(static_cast<SettingKey>(i), value, v);
  }
  return {};
}

}  // namespace

const SettingInfo& setting_info(SettingKey key) { return k_settings[static_cast<size_t>(key)]; }

namespace {
std::mutex g_named_mutex;
ConfigFile g_named_user_file;  // set by name_user_file()
}  // namespace

void Settings::name_user_file(const std::string& path, const std::string& named_by) {
  std::lock_guard lock(g_named_mutex);
  g_named_user_file = {path, true, named_by};
}

ConfigFile Settings::user_file() {
  {
    std::lock_guard lock(g_named_mutex);
    if (!g_named_user_file.path.empty()) return g_named_user_file;
  }
  if (const char* p = std::getenv("KILN_CONFIG"); p && *p) return {p, true, "KILN_CONFIG"};
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) return {std::string(xdg) + "/kiln/config.toml", false, ""};
  const char* home = std::getenv("HOME");
  return {std::string(home && *home ? home : "/") + "/.config/kiln/config.toml", false, ""};
}

// KILN_SYSTEM_CONFIG moves the system's file (an image that keeps it elsewhere); a job's uid
// may be unable to read it as much as /etc/kiln/config.toml, so it stays optional.
ConfigFile Settings::system_file() { return {env_or("KILN_SYSTEM_CONFIG", "/etc/kiln/config.toml"), false, ""}; }

std::string Settings::user_file_path() { return user_file().path; }
std::string Settings::system_file_path() { return system_file().path; }

Result<Settings> Settings::load(const std::map<SettingKey, std::string>& flags) {
  Settings s;
  for (size_t i = 0; i < s.m_values.size(); ++i) s.m_values[i] = {k_settings[i].fallback, "default"};
  // Lowest precedence first, each layer over the one before.
  std::vector<std::string> files;
  KILN_RETURN_IF_ERROR(read_config_file(system_file(), s.m_values, files, s.m_warnings));
  KILN_RETURN_IF_ERROR(read_config_file(user_file(), s.m_values, files, s.m_warnings));
  s.m_files.assign(files.rbegin(), files.rend());
  for (size_t i = 0; i < s.m_values.size(); ++i)
    if (const char* v = std::getenv(k_settings[i].env); v && *v) s.m_values[i] = {v, k_settings[i].env};
  for (auto& [key, value] : flags) {
    const SettingInfo& info = setting_info(key);
    s.m_values[static_cast<size_t>(key)] = {value, *info.flag ? info.flag : "the caller"};
  }
  return s;
}

std::string Settings::cache_dir() const {
  const std::string& dir = get(SettingKey::kCacheDir);
  if (!dir.empty()) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

Result<uint64_t> Settings::max_bytes() const {
  const Setting& s = setting(SettingKey::kMaxSize);
  auto v = parse_size(s.value);
  if (!v.ok()) return invalid_argument(std::string(setting_info(SettingKey::kMaxSize).name) + " (from " + s.origin + "): " + v.status().message());
  return v;
}

Result<double> Settings::seconds(SettingKey key) const {
  const Setting& s = setting(key);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.value.c_str(), &end);
  if (s.value.empty() || errno || end != s.value.c_str() + s.value.size() || !(v >= 0) || v > 1e7)
    return invalid_argument(std::string(setting_info(key).name) + " (from " + s.origin + "): '" + s.value +
                            "' is not a number of seconds (e.g. 2 or 0.25)");
  return v;
}

std::vector<std::string> Settings::unsaid_warnings() const {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard lock(mutex);
  std::vector<std::string> out;
  for (auto& w : m_warnings)
    if (said.insert(w).second) out.push_back(w);
  return out;
}

Result<std::string> read_secret_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return not_found("the secret file " + path + " does not exist");
  if (fd < 0) return errno_status("open the secret file " + path, errno);
  // Checked and read through one descriptor: the file checked is the file read.
  struct stat st{};
  Status bad;
  if (::fstat(fd, &st) != 0) {
    bad = errno_status("stat " + path, errno);
  } else if (!S_ISREG(st.st_mode)) {
    bad = invalid_argument("the secret file " + path + " is not a regular file");
  } else if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    bad = invalid_argument("the secret file " + path + " belongs to another user: it must be yours (or root's)");
  } else if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    bad = invalid_argument("the secret file " + path + " can be read by others (mode " + mode + "): chmod 600 " + path);
  }
  std::string secret;
  char buf[4096];
  while (bad.ok()) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) bad = errno_status("read " + path, errno);
    if (n <= 0) break;
    secret.append(buf, static_cast<size_t>(n));
    if (secret.size() > (1 << 20)) bad = invalid_argument("the secret file " + path + " is larger than 1 MiB");
  }
  ::close(fd);
  if (!bad.ok()) return bad;
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return invalid_argument("the secret file " + path + " is empty");
  return secret;
}

}  // namespace kiln::cache
