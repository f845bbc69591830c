#include "tools/cli_common.h"

#include <cstdio>
#include <ctime>
#include <iostream>

#include "support/file_util.h"

namespace kiln::tools {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string diagnostics_json(const std::vector<jit::Diagnostic>& diagnostics) {
  std::string out = "[";
  for (size_t i = 0; i < diagnostics.size(); ++i) {
    const jit::Diagnostic& d = diagnostics[i];
    out += std::string(i ? "," : "") + "{\"severity\":" + json_string(jit::severity_name(d.severity)) +
           ",\"file\":" + json_string(d.file) + ",\"line\":" + std::to_string(d.line) +
           ",\"column\":" + std::to_string(d.column) + ",\"message\":" + json_string(d.message) + "}";
  }
  return out + "]";
}

int fail(const Status& st) {
  std::cerr << "kiln: error: " << st.message() << "\n";
  return 1;
}

int usage_error(const std::string& message, const char* help) {
  std::cerr << "kiln: " << message << "\n\n" << help;
  return 2;
}

std::string age(int64_t t) {
  int64_t d = static_cast<int64_t>(std::time(nullptr)) - t;
  if (d < 0) d = 0;
  if (d < 120) return std::to_string(d) + " s ago";
  if (d < 7200) return std::to_string(d / 60) + " min ago";
  if (d < 172800) return std::to_string(d / 3600) + " h ago";
  return std::to_string(d / 86400) + " d ago";
}

std::string cache_word(const builders::BuildOutcome& o) { return o.cache == builders::CacheOutcome::kCompiled ? "miss" : "hit"; }

std::string cache_text(const builders::BuildOutcome& o) {
  return o.cache == builders::CacheOutcome::kRemote ? "hit (remote)" : cache_word(o);
}

std::string cache_json(const builders::BuildOutcome& o) {
  return "\"cache\":\"" + cache_word(o) + "\",\"source\":\"" + builders::cache_outcome_name(o.cache) + "\"";
}

Result<cache::Settings> GlobalOptions::settings() const {
  std::map<cache::SettingKey, std::string> flags;
  if (!cache_dir.empty()) flags[cache::SettingKey::kCacheDir] = cache_dir;
  if (remote) flags[cache::SettingKey::kRemoteTiers] = *remote;
  auto settings = cache::Settings::load(flags);
  if (settings.ok())
    for (auto& w : settings->unsaid_warnings()) std::cerr << "kiln: warning: " << w << "\n";
  return settings;
}

Result<std::unique_ptr<builders::Ops>> make_ops(const ParsedArgs& args, const GlobalOptions& global, bool with_accelerator) {
  builders::OpsOptions options;
  options.cache_dir = global.cache_dir;
  options.remote = global.remote;
  if (!with_accelerator) options.accelerator = "none";
  for (auto& d : args.all("--spec-dir")) options.spec_dirs.push_back(absolute_path(d));
  return builders::Ops::create(options);
}

}  // namespace kiln::tools
