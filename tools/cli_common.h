// What every kiln subcommand shares: output helpers and the error conventions
// (exit 1 when the work failed, 2 for bad usage, messages on stderr).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "builders/ops.h"
#include "cache/settings.h"
#include "support/status.h"
#include "tools/cli_args.h"

namespace kiln::tools {

// The options before the command: `kiln --cache-dir D --remote R build ...`.
struct GlobalOptions {
  std::string cache_dir;              // empty: the cache_dir setting
  std::optional<std::string> remote;  // --remote: the tier list ("" = none)
  // The settings with these flags on top (cache/settings.h).
  Result<cache::Settings> settings() const;
};

std::string json_string(std::string_view s);
std::string fixed(double v, int digits = 1);
// [{"severity":"error","file":"k.cu","line":3,"column":5,"message":"..."}, ...]
std::string diagnostics_json(const std::vector<jit::Diagnostic>& diagnostics);
// "kiln: error: <message>" on stderr; returns 1.
int fail(const Status& st);
// "kiln: <message>", then the command's help, on stderr; returns 2.
int usage_error(const std::string& message, const char* help);
// "3 s ago", "2 h ago", "5 d ago".
std::string age(int64_t unix_seconds);

// Ops for a command: --spec-dir folders from `args`, the global --cache-dir. A command that
// only builds passes `with_accelerator` false: it starts no accelerator (kiln build).
Result<std::unique_ptr<builders::Ops>> make_ops(const ParsedArgs& args, const GlobalOptions& global,
                                                bool with_accelerator = true);

// `kiln doctor` (doctor_command.cpp).
int cmd_doctor(const std::vector<std::string>& argv, const GlobalOptions& global);

// Whether a build hit: "hit" or "miss"; for people, "hit (remote)" too; for JSON,
// "cache":"hit","source":"remote" (memory, disk, remote, compiled).
std::string cache_word(const builders::BuildOutcome& o);
std::string cache_text(const builders::BuildOutcome& o);
std::string cache_json(const builders::BuildOutcome& o);

// `kiln warm` (warm_command.cpp).
int cmd_warm(const std::vector<std::string>& argv, const GlobalOptions& global);
// kiln cc: the compiler launcher (tools/cc_command.cpp).
int cmd_cc(const std::vector<std::string>& argv, const GlobalOptions& global);
int cmd_nvrtc(const std::vector<std::string>& argv, const GlobalOptions& global);

// `kiln config` (config_command.cpp).
int cmd_config(const std::vector<std::string>& argv, const GlobalOptions& global);

// `kiln key ...` (key_command.cpp).
int cmd_key(const std::vector<std::string>& argv, const GlobalOptions& global);

// `kiln cache ...` (cache_command.cpp).
int cmd_cache(const std::vector<std::string>& argv, const GlobalOptions& global);
extern const char* const k_cache_help;

}  // namespace kiln::tools
