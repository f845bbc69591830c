// The kiln command line: build, run and warm ops (git/ccache-style subcommands).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <atomic>
#include <mutex>
#include <sstream>
#include <thread>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "jit/hiprtc/hiprtc_toolchain.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "jit/toolchain_loader.h"
#include "support/file_util.h"
#include "support/log.h"
#include "tools/cli_args.h"
#include "tools/cli_common.h"

namespace kiln::tools {
namespace {

using builders::BuildOutcome;
using builders::CacheOutcome;

constexpr const char* k_main_help = R"(usage: kiln [--config FILE] [--cache-dir DIR] [--remote TIERS] <command> [options]

kiln compiles kernel specs in-process and caches the artifacts by content.

commands:
  build SPEC      compile one spec (or find it in the cache) and print its key
  run OP          load an op and run its self-check against the reference
  warm            build every spec for a target and, with --check, self-check each
  cc COMPILER ..  a compiler launcher (as ccache): nvcc and C++ compiles through the cache
  nvrtc --preload the NVRTC library for LD_PRELOAD that keeps in-process compiles in the cache
  cache           inspect and maintain the cache: stats, ls, show, gc, verify, clear, explain
  toolchains      each toolchain's identity (what enters keys) or why it is unavailable
  doctor          what kiln finds here: accelerators, toolchains, the cache and its remote
                  tiers, every op's state
  config          the effective settings and where each came from (flag, environment, file)
  key             publisher keys: `key generate NAME --out FILE` (docs/SECURITY.md)
  help [COMMAND]  show help for a command

global options:
  --config FILE     the user's config file (as KILN_CONFIG; default $XDG_CONFIG_HOME/kiln/
                    config.toml, else ~/.config/kiln/config.toml): named, it must be
                    readable; a default one that cannot be read is passed over with a warning
  --cache-dir DIR   the cache folder (default: $KILN_CACHE_DIR, else the config file's
                    cache_dir, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)
  --remote TIERS    remote cache tiers, tried in order after the local cache ("" for none;
                    default: $KILN_REMOTE_CACHE, else the config file's remote.tiers), e.g.
                    "redis://cache:6379 http://bazel-remote:8080/kiln|read-only"
  -v, --verbose     log what each lookup and compile does to stderr (as KILN_LOG=debug;
                    KILN_LOG_FILE=PATH appends it to a file instead)
  -h, --help        show this help
  --version         print kiln's version

Exit status is 0 on success, 1 when the work failed, 2 for bad usage.
)";

constexpr const char* k_build_help = R"(usage: kiln build SPEC [--target T] [-o FILE] [--json]

Compiles the op described by the spec file SPEC for target T, or finds it in the cache,
and prints the cache key, whether it was a hit, and the timings.

options:
  --target T   cpu (the running CPU's level, the default) or cpu:x86-64-v2 .. v4
  -o FILE      also write the artifact (a shared object for cpu targets) to FILE
  --json       print one JSON object instead of text
)";

constexpr const char* k_run_help = R"(usage: kiln run OP [--target T] [--dim NAME=VALUE]... [--seed N] [--json]

Loads op OP (compiling it on a cache miss) on the accelerator and runs its self-check:
random inputs, one launch, the reference function on the same inputs, outputs compared.

options:
  --target T         target to load (default: the accelerator's native target)
  --spec-dir DIR     look for OP.toml in DIR (repeatable; default $KILN_SPEC_PATH or
                     the bundled specs)
  --dim NAME=VALUE   override a problem size from the spec's [check] dims
  --seed N           seed of the random inputs (default 1)
  --json             print one JSON object instead of text
)";

void print_warnings(const BuildOutcome& o) {
  for (auto& w : o.warnings) std::cerr << "kiln: warning: " << w << "\n";
}

int cmd_build(const std::vector<std::string>& argv, const GlobalOptions& global) {
  auto args = parse_args(argv, {"--target", "-o"}, {"--json", "--help", "-h"});
  if (!args.ok()) return usage_error(args.status().message(), k_build_help);
  if (args->has("--help") || args->has("-h")) return std::cout << k_build_help, 0;
  if (args->positional.size() != 1) return usage_error("build takes one spec file", k_build_help);
  auto spec = builders::parse_spec_file(args->positional[0]);
  if (!spec.ok()) return fail(spec.status());
  auto target = builders::parse_target(args->value("--target", "cpu"));
  if (!target.ok()) return fail(target.status());
  auto ops = make_ops(*args, global, /*with_accelerator=*/false);
  if (!ops.ok()) return fail(ops.status());
  auto outcome = (*ops)->build(*spec, *target);
  if (!outcome.ok()) return fail(outcome.status());
  const BuildOutcome& o = *outcome;
  print_warnings(o);
  if (!o.success) {
    std::cerr << o.diagnostics_text();
    std::cerr << "kiln: error: op " << o.op << " does not compile for " << o.target
              << (o.cache == CacheOutcome::kCompiled ? " (the failure is cached until an input changes)\n"
                                                     : " (a cached failure: fix an input to compile again)\n");
    if (args->has("--json"))
      std::cout << "{\"op\":" << json_string(o.op) << ",\"target\":" << json_string(o.target)
                << ",\"success\":false," << cache_json(o) << ",\"compile_ms\":" << fixed(o.compile_ms, 3)
                << ",\"diagnostics\":" << diagnostics_json(o.diagnostics) << ",\"log\":" << json_string(o.log) << "}\n";
    return 1;
  }
  if (auto out = args->value("-o"); !out.empty()) {
    if (Status st = write_file_atomic(absolute_path(out), o.artifact); !st.ok()) return fail(st);
  }
  if (args->has("--json")) {
    std::cout << "{\"op\":" << json_string(o.op) << ",\"target\":" << json_string(o.target) << ",\"success\":true"
              << ",\"key\":\"" << o.key.hex() << "\"," << cache_json(o) << ",\"kind\":" << json_string(o.kind)
              << ",\"size\":" << o.artifact.size() << ",\"compile_ms\":" << fixed(o.compile_ms, 3)
              << ",\"total_ms\":" << fixed(o.total_ms, 3) << ",\"precompiled_headers\":{\"used\":" << o.pch_used
              << ",\"building\":" << o.pch_building << "}"
              << (o.headers_parsed ? ",\"headers_parsed\":" + std::to_string(*o.headers_parsed) : std::string())
              << ",\"diagnostics\":" << diagnostics_json(o.diagnostics) << "}\n";
  } else {
    for (auto& d : o.diagnostics) std::cerr << d.to_string() << "\n";  // warnings
    std::cout << "op       " << o.op << "\ntarget   " << o.target << "\nkey      " << o.key.hex() << "\ncache    "
              << cache_text(o) << "\nartifact " << o.kind << ", " << o.artifact.size() << " bytes\ncompile  "
              << fixed(o.compile_ms, 1) << " ms\ntotal    " << fixed(o.total_ms, 1) << " ms\n";
    if (o.pch_used || o.pch_building)
      std::cout << "pch      " << o.pch_used << " used" << (o.pch_building ? ", " + std::to_string(o.pch_building) + " being made for later compiles" : "")
                << (o.headers_parsed ? ", " + std::to_string(*o.headers_parsed) + " headers parsed" : "") << "\n";
  }
  return 0;
}

int cmd_run(const std::vector<std::string>& argv, const GlobalOptions& global) {
  auto args = parse_args(argv, {"--target", "--dim", "--seed", "--spec-dir"}, {"--json", "--help", "-h"});
  if (!args.ok()) return usage_error(args.status().message(), k_run_help);
  if (args->has("--help") || args->has("-h")) return std::cout << k_run_help, 0;
  if (args->positional.size() != 1) return usage_error("run takes one op name", k_run_help);
  builders::CheckOptions options;
  for (auto& d : args->all("--dim")) {
    auto eq = d.find('=');
    char* end = nullptr;
    long long v = eq == std::string::npos ? 0 : std::strtoll(d.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || !end || *end || v < 0)
      return usage_error("--dim expects NAME=VALUE with a non-negative integer, got '" + d + "'", k_run_help);
    options.dims[d.substr(0, eq)] = v;
  }
  options.seed = std::strtoull(args->value("--seed", "1").c_str(), nullptr, 10);
  auto ops = make_ops(*args, global);
  if (!ops.ok()) return fail(ops.status());
  auto op = (*ops)->get(args->positional[0], args->value("--target"));
  if (!op.ok()) return fail(op.status());
  auto report = builders::run_self_check(**ops, **op, options);
  if (!report.ok()) return fail(report.status());
  const BuildOutcome& o = (*op)->outcome();
  if (args->has("--json")) {
    std::cout << "{\"op\":" << json_string(o.op) << ",\"target\":" << json_string(o.target) << ","
              << cache_json(o) << ",\"compile_ms\":" << fixed(o.compile_ms, 3) << ",\"check\":\""
              << (report->passed ? "ok" : "FAILED") << "\",\"message\":" << json_string(report->message)
              << ",\"max_abs_error\":" << report->max_abs_error << ",\"kernel_ms\":" << fixed(report->kernel_ms, 3) << "}\n";
  } else {
    std::cout << o.op << " on " << o.target << " (" << (*op)->accelerator().device_name(0) << "): cache " << cache_text(o)
              << ", " << report->grid << " blocks in " << fixed(report->kernel_ms, 2) << " ms: "
              << (report->passed ? "ok" : "FAILED") << " (" << report->message << ")\n";
  }
  return report->passed ? 0 : 1;
}

int cmd_toolchains(const std::vector<std::string>& argv) {
  auto args = parse_args(argv, {}, {"--json", "--help", "-h"});
  if (!args.ok() || !args->positional.empty()) return usage_error("usage: kiln toolchains [--json]", k_main_help);
  if (args->has("--help") || args->has("-h"))
    return std::cout << "usage: kiln toolchains [--json]\n\nEach toolchain's identity, as it enters cache keys. On a node "
                        "that only loads\nartifacts, set KILN_CLANG_IDENTITY (and KILN_SPIRV_IDENTITY for opencl and spirv\n"
                        "artifacts) to the identities printed here by a node that compiles.\n",
           0;
  struct Row {
    const char* name;
    Result<std::string> id;
  };
  Row rows[] = {{"clang", jit::clang_toolchain_identity()},
                {"spirv", jit::clang_spirv_toolchain_identity()},
                {"nvrtc", jit::nvrtc_toolchain_identity()},
                {"hiprtc", jit::hiprtc_toolchain_identity()}};
  if (args->has("--json")) {
    std::cout << "{";
    bool first = true;
    for (auto& r : rows) {
      std::cout << (first ? "" : ",") << json_string(r.name) << ":{\"available\":" << (r.id.ok() ? "true" : "false")
                << (r.id.ok() ? ",\"identity\":" + json_string(r.id.value()) : ",\"reason\":" + json_string(r.id.status().message()))
                << "}";
      first = false;
    }
    std::cout << "}\n";
  } else {
    for (auto& r : rows)
      std::cout << r.name << ": " << (r.id.ok() ? r.id.value() : "unavailable: " + r.id.status().message()) << "\n";
  }
  return 0;
}

int run_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  GlobalOptions global;
  size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") return std::cout << k_main_help, 0;
    if (a == "--version") return std::cout << "kiln " KILN_VERSION "\n", 0;
    if (a == "--verbose" || a == "-v") {
      set_log_level(LogLevel::kDebug);
      ++i;
      continue;
    }
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      // The user's config file, named for the whole process, so every part that loads the
      // settings (ops, doctor, config) reads the same file, and an unreadable one is an error
      // rather than the warning an unnamed default gets.
      if (a == "--config" && i + 1 >= args.size()) return usage_error("--config needs a file", k_main_help);
      std::string file = a == "--config" ? args[i + 1] : a.substr(9);
      if (file.empty()) return usage_error("--config needs a file (/dev/null for none)", k_main_help);
      cache::Settings::name_user_file(file, "--config");
      i += a == "--config" ? 2 : 1;
      continue;
    }
    if ((a == "--cache-dir" || a == "--remote") && i + 1 < args.size()) {
      (a == "--remote" ? global.remote.emplace() : global.cache_dir) = args[i + 1];
      i += 2;
    } else if (a.rfind("--cache-dir=", 0) == 0) {
      global.cache_dir = a.substr(12);
      ++i;
    } else if (a.rfind("--remote=", 0) == 0) {
      global.remote = a.substr(9);
      ++i;
    } else {
      return usage_error("unknown option " + a, k_main_help);
    }
  }
  if (i >= args.size()) return usage_error("no command given", k_main_help);
  std::string command = args[i];
  KILN_LOG_AT(kDebug, "kiln", "command " + command + " (" + std::to_string(args.size() - i - 1) + " arguments)");
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
  if (command == "build") return cmd_build(rest, global);
  if (command == "run") return cmd_run(rest, global);
  if (command == "warm") return cmd_warm(rest, global);
  if (command == "cache") return cmd_cache(rest, global);
  if (command == "cc") return cmd_cc(rest, global);
  if (command == "nvrtc") return cmd_nvrtc(rest, global);
  if (command == "toolchains") return cmd_toolchains(rest);
  if (command == "doctor") return cmd_doctor(rest, global);
  if (command == "config") return cmd_config(rest, global);
  if (command == "key") return cmd_key(rest, global);
  if (command == "help") {
    std::string topic = rest.empty() ? "" : rest[0];
    if (topic == "build") return std::cout << k_build_help, 0;
    if (topic == "run") return std::cout << k_run_help, 0;
    if (topic == "warm") return cmd_warm({"--help"}, global);
    if (topic == "cache") return std::cout << k_cache_help, 0;
    if (topic == "cc") return cmd_cc({"--help"}, global);
    if (topic == "nvrtc") return cmd_nvrtc({"--help"}, global);
    if (topic == "doctor") return cmd_doctor({"--help"}, global);
    if (topic == "config") return cmd_config({"--help"}, global);
    if (topic == "key") return cmd_key({"--help"}, global);
    if (topic.empty()) return std::cout << k_main_help, 0;
    return usage_error("no help for '" + topic + "'", k_main_help);
  }
  return usage_error("unknown command '" + command + "'", k_main_help);
}

}  // namespace
}  // namespace kiln::tools

int main(int argc, char** argv) { return kiln::tools::run_main(argc, argv); }
