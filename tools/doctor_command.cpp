// `kiln doctor`: what this machine gives kiln, in one report (what ds_report is to DeepSpeed):
// the accelerators found and the one chosen, each toolchain and where it was found (or why
// not), the cache folder and its size, and for every op and target whether it is compatible
// and whether it is cached. It compiles nothing and counts no cache hits.
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "builders/ops.h"
#include "cache/trust.h"
#include "jit/hiprtc/hiprtc_toolchain.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#if KILN_HAVE_OPENCL
#include "backends/opencl/opencl_accelerator.h"
#endif
#include "jit/toolchain_loader.h"
#include "runtime/registry.h"
#include "support/units.h"
#include "tools/cli_common.h"

namespace kiln::tools {
namespace {

constexpr const char* k_doctor_help = R"(usage: kiln doctor [--target T]... [--spec-dir DIR]... [--json]

Reports what kiln finds on this machine, without compiling anything:
  accelerators   every registered backend (built in or from KILN_PLUGINS), whether it is
                 available and why not, its devices and native target; the chosen one
                 (KILN_ACCELERATOR, else the highest priority available) is marked
  toolchains     each compiler kiln can load, its identity and where it was found, or why not
  cache          the folder, its size and entry count, its limit, and the remote tiers
  ops            for every op and target: compatible or not (with the reason), cached or not

The targets are each available accelerator's native target, cuda:sm_90 when a CUDA
toolchain is here but no GPU, and every --target given.

options:
  --target T       also report this target (repeatable)
  --spec-dir DIR   a folder of specs (repeatable; default $KILN_SPEC_PATH or the bundled specs)
  --json           print one JSON object instead of text
)";

struct AcceleratorRow {
  runtime::BackendInfo info;
  bool chosen = false;
  std::vector<std::string> devices;
  std::string native_target;
  std::string error;  // creating it failed
};

struct ToolchainRow {
  std::string name;
  bool available = false;
  std::string identity_or_reason;
  std::string where;
  std::string version;  // from the loaded library: "nvrtc 13.0 (/usr/local/cuda/lib64/libnvrtc.so.13)"
};

// Loads the toolchain (it compiles nothing) for its own account of its version and file.
std::string version_of(Result<jit::Toolchain*> toolchain) {
  return toolchain.ok() ? (*toolchain)->version() : "not loadable: " + toolchain.status().message();
}

struct OpRow {
  std::string op, target;
  bool compatible = false;
  std::string reason;
  std::string cached;  // "yes", "no", "failed" (a cached compile error), "unknown: why"
};

std::string json_bool(bool b) { return b ? "true" : "false"; }

}  // namespace

int cmd_doctor(const std::vector<std::string>& argv, const GlobalOptions& global) {
  auto args = parse_args(argv, {"--target", "--spec-dir"}, {"--json", "--help", "-h"});
  if (!args.ok()) return usage_error(args.status().message(), k_doctor_help);
  if (args->has("--help") || args->has("-h")) return std::cout << k_doctor_help, 0;
  if (!args->positional.empty()) return usage_error("doctor takes no operands", k_doctor_help);

  // Accelerators: detection first (it initialises nothing), then each available one.
  std::vector<AcceleratorRow> accelerators;
  auto chosen = runtime::get_accelerator();
  for (auto& info : runtime::backend_infos()) {
    AcceleratorRow row;
    row.info = info;
    if (info.available) {
      auto acc = runtime::get_accelerator(info.name);
      if (acc.ok()) {
        row.chosen = chosen.ok() && *chosen == *acc;
        for (int d = 0; d < (*acc)->device_count(); ++d) row.devices.push_back((*acc)->device_name(d));
        row.native_target = (*acc)->native_target();
      } else {
        row.error = acc.status().message();
      }
    }
    accelerators.push_back(std::move(row));
  }
  const char* plugins_env = std::getenv("KILN_PLUGINS");
  std::string plugins = plugins_env ? plugins_env : "";
  auto plugin_errors = runtime::plugin_errors();

  // Toolchains.
  std::vector<ToolchainRow> toolchains;
  auto clang = jit::clang_toolchain_identity();
  toolchains.push_back({"clang", clang.ok(), clang.ok() ? *clang : clang.status().message(), jit::clang_toolchain_library_path(),
                        clang.ok() ? version_of(jit::load_clang_toolchain()) : ""});
  auto nvrtc = jit::nvrtc_toolchain_identity();
  std::string nvrtc_where;
  for (auto& p : jit::nvrtc_search_paths()) nvrtc_where += (nvrtc_where.empty() ? "" : ", ") + (p.empty() ? "the loader's path" : p);
  toolchains.push_back({"nvrtc", nvrtc.ok(), nvrtc.ok() ? *nvrtc : nvrtc.status().message(), "searched " + nvrtc_where,
                        nvrtc.ok() ? version_of(jit::load_nvrtc_toolchain()) : ""});

  // AMD GPU code objects: Clang in-process (kiln's HIP prelude; no ROCm needed), or hiprtc in
  // its helper process. SPIR-V: Clang's SPIR-V back end, every module checked by SPIRV-Tools.
  toolchains.push_back({"hip (clang)", clang.ok(), clang.ok() ? *clang : clang.status().message(),
                        "prelude " + builders::hip_device_include_dir() + "/kiln/hip_prelude.h",
                        clang.ok() ? "AMDGPU code objects in-process (hip:gfx90a, hip:gfx942, hip:gfx1100, ...)" : ""});
  auto hiprtc = jit::hiprtc_toolchain_identity();
  auto hiprtc_library = jit::hiprtc_library_path();
  toolchains.push_back({"hiprtc", hiprtc.ok(), hiprtc.ok() ? *hiprtc : hiprtc.status().message(),
                        (hiprtc_library.ok() ? *hiprtc_library : std::string("no library")) + ", run by " + jit::hiprtc_helper_path() +
                            " (KILN_HIP_TOOLCHAIN=hiprtc)",
                        hiprtc.ok() ? version_of(jit::load_hiprtc_toolchain()) : ""});
  toolchains.push_back({"spirv", clang.ok(), clang.ok() ? *clang : clang.status().message(), "targets opencl and spirv",
                        clang.ok() ? version_of(jit::load_clang_toolchain()) : ""});

  // OpenCL platforms and devices, as the ICD loader lists them (no context is created).
  std::vector<std::string> opencl_lines;
#if KILN_HAVE_OPENCL
  if (auto listing = backends::opencl::list_devices(); listing.ok()) {
    for (auto& p : *listing) {
      opencl_lines.push_back("platform " + p.platform);
      for (size_t d = 0; d < p.devices.size(); ++d) opencl_lines.push_back("  device " + std::to_string(d) + ": " + p.devices[d]);
    }
    if (listing->empty()) opencl_lines.push_back("no platform (install an ICD such as pocl-opencl-icd)");
  } else {
    opencl_lines.push_back(listing.status().message());
  }
#else
  opencl_lines.push_back("not built: kiln was configured without <CL/cl.h> (opencl-c-headers)");
#endif

  // Cache and ops.
  builders::OpsOptions options;
  options.cache_dir = global.cache_dir;
  options.remote = global.remote;
  for (auto& d : args->all("--spec-dir")) options.spec_dirs.push_back(d);
  auto ops = builders::Ops::create(options);
  // A chosen accelerator that does not exist (a typo in KILN_ACCELERATOR) should not hide the
  // cache and the ops: report them against the first one that works.
  for (size_t i = 0; !ops.ok() && !chosen.ok() && i < accelerators.size(); ++i) {
    if (!accelerators[i].info.available || !accelerators[i].error.empty()) continue;
    options.accelerator = accelerators[i].info.name;
    ops = builders::Ops::create(options);
  }
  auto settings = global.settings();
  std::string cache_root = settings.ok() ? settings->cache_dir() : "(" + settings.status().message() + ")";
  // Each remote tier's endpoints, one round trip each (the only thing doctor sends anywhere).
  std::vector<cache::RemoteTiers::EndpointReport> tier_rows;
  std::string remote_problem;
  if (ops.ok() && !(*ops)->settings().get(cache::SettingKey::kRemoteTiers).empty()) {
    if (auto* remote = (*ops)->remote()) tier_rows = remote->ping_all();
    else remote_problem = "the remote tiers could not be set up (see the warning above)";
  }
  // Who may publish what this node loads: publisher keys, the older cluster secret, or no one
  // (docs/SECURITY.md); said with its weakness when it has one.
  std::string trust_mode = "unsigned", trust_weakness, trust_problem;
  bool trust_signed = false;
  if (ops.ok()) {
    auto trust = cache::trust_from_settings((*ops)->settings());
    if (trust.ok()) {
      trust_mode = trust->describe();
      trust_weakness = trust->weakness();
      trust_signed = trust->keys() || !trust->secret.empty();
    } else {
      trust_problem = trust.status().message();
    }
  }
  std::optional<cache::Statistics> stats;
  std::string cache_problem;
  std::vector<OpRow> op_rows;
  std::vector<std::string> targets;
  if (!ops.ok()) {
    cache_problem = ops.status().message();
  } else {
    if (auto* store = (*ops)->store()) {
      auto s = store->statistics();
      if (s.ok()) stats = *s;
      else cache_problem = s.status().message();
    } else {
      cache_problem = "the cache could not be opened (ops compile into memory)";
    }
    bool cuda_device = false;
    for (auto& a : accelerators) {
      if (a.native_target.empty()) continue;
      targets.push_back(a.native_target);
      cuda_device |= a.native_target.rfind("cuda:", 0) == 0;
    }
    if (!cuda_device && (nvrtc.ok() || clang.ok())) targets.push_back("cuda:sm_90");
    if (clang.ok()) targets.insert(targets.end(), {"hip:gfx90a", "opencl:generic"});
    for (auto& t : args->all("--target")) targets.push_back(t);
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());

    std::vector<Result<builders::Target>> parsed_targets;
    for (auto& t : targets) parsed_targets.push_back(builders::parse_target(t));
    for (auto& file : (*ops)->spec_files()) {
      auto spec = builders::parse_spec_file(file);
      for (size_t i = 0; i < targets.size(); ++i) {
        OpRow row;
        row.op = spec.ok() ? spec->name : file;
        row.target = targets[i];
        const auto& target = parsed_targets[i];
        Status compatible = !spec.ok() ? spec.status() : !target.ok() ? target.status() : builders::is_compatible(*spec, *target);
        row.compatible = compatible.ok();
        row.reason = compatible.message();
        if (!row.compatible) {
          row.cached = "no";
        } else if (auto rec = (*ops)->cached_record(*spec, *target); !rec.ok()) {
          row.cached = "unknown: " + rec.status().message();
        } else {
          row.cached = !rec->has_value() ? "no" : (*rec)->kind == "compile-error" ? "failed" : "yes";
        }
        op_rows.push_back(std::move(row));
      }
    }
  }

  if (args->has("--json")) {
    std::ostringstream o;
    o << "{\"version\":\"" KILN_VERSION "\",\"accelerators\":[";
    for (size_t i = 0; i < accelerators.size(); ++i) {
      auto& a = accelerators[i];
      o << (i ? "," : "") << "{\"name\":" << json_string(a.info.name) << ",\"priority\":" << a.info.priority
        << ",\"available\":" << json_bool(a.info.available) << ",\"chosen\":" << json_bool(a.chosen)
        << ",\"origin\":" << json_string(a.info.origin);
      if (!a.info.available) o << ",\"reason\":" << json_string(a.info.reason);
      if (!a.error.empty()) o << ",\"error\":" << json_string(a.error);
      if (!a.native_target.empty()) o << ",\"native_target\":" << json_string(a.native_target);
      o << ",\"devices\":[";
      for (size_t d = 0; d < a.devices.size(); ++d) o << (d ? "," : "") << json_string(a.devices[d]);
      o << "]}";
    }
    o << "],\"chosen\":" << (chosen.ok() ? json_string((*chosen)->name()) : "null");
    if (!chosen.ok()) o << ",\"chosen_error\":" << json_string(chosen.status().message());
    o << ",\"plugins\":{\"KILN_PLUGINS\":" << json_string(plugins) << ",\"errors\":[";
    for (size_t i = 0; i < plugin_errors.size(); ++i) o << (i ? "," : "") << json_string(plugin_errors[i]);
    o << "]},\"toolchains\":[";
    for (size_t i = 0; i < toolchains.size(); ++i) {
      auto& t = toolchains[i];
      o << (i ? "," : "") << "{\"name\":" << json_string(t.name) << ",\"available\":" << json_bool(t.available)
        << (t.available ? ",\"identity\":" : ",\"reason\":") << json_string(t.identity_or_reason)
        << ",\"where\":" << json_string(t.where);
      if (!t.version.empty()) o << ",\"version\":" << json_string(t.version);
      o << "}";
    }
    o << "],\"opencl\":[";
    for (size_t i = 0; i < opencl_lines.size(); ++i) o << (i ? "," : "") << json_string(opencl_lines[i]);
    o << "],\"cache\":{\"folder\":" << json_string(cache_root);
    if (stats)
      o << ",\"bytes\":" << stats->bytes << ",\"artifacts\":" << stats->artifacts << ",\"max_bytes\":" << stats->max_bytes;
    if (!cache_problem.empty()) o << ",\"problem\":" << json_string(cache_problem);
    o << ",\"remote_tiers\":[";
    for (size_t i = 0; i < tier_rows.size(); ++i) {
      auto& t = tier_rows[i];
      o << (i ? "," : "") << "{\"tier\":" << json_string(t.tier) << ",\"endpoint\":" << json_string(t.endpoint)
        << ",\"read_only\":" << json_bool(t.read_only) << ",\"answers\":" << json_bool(t.status.ok())
        << ",\"rtt_ms\":" << fixed(t.rtt_ms, 3);
      if (!t.status.ok()) o << ",\"error\":" << json_string(t.status.message());
      o << "}";
    }
    o << "],\"signed\":" << json_bool(trust_signed) << ",\"trust\":" << json_string(trust_mode);
    if (!trust_weakness.empty() && !tier_rows.empty()) o << ",\"trust_warning\":" << json_string(trust_weakness);
    if (!trust_problem.empty()) o << ",\"trust_problem\":" << json_string(trust_problem);
    if (!remote_problem.empty()) o << ",\"remote_problem\":" << json_string(remote_problem);
    o << "},\"targets\":[";
    for (size_t i = 0; i < targets.size(); ++i) o << (i ? "," : "") << json_string(targets[i]);
    o << "],\"ops\":[";
    for (size_t i = 0; i < op_rows.size(); ++i) {
      auto& r = op_rows[i];
      o << (i ? "," : "") << "{\"op\":" << json_string(r.op) << ",\"target\":" << json_string(r.target)
        << ",\"compatible\":" << json_bool(r.compatible);
      if (!r.compatible) o << ",\"reason\":" << json_string(r.reason);
      o << ",\"cached\":" << json_string(r.cached) << "}";
    }
    o << "]}\n";
    std::cout << o.str();
    return 0;
  }

  std::cout << "kiln " KILN_VERSION "\n\naccelerators (highest priority first, * = chosen)\n";
  for (auto& a : accelerators) {
    std::cout << (a.chosen ? "  * " : "    ") << a.info.name << "  priority " << a.info.priority << ", " << a.info.origin;
    if (!a.info.available) std::cout << ": unavailable: " << a.info.reason << "\n";
    else if (!a.error.empty()) std::cout << ": failed to start: " << a.error << "\n";
    else {
      std::cout << ": " << a.native_target << "\n";
      for (size_t d = 0; d < a.devices.size(); ++d) std::cout << "        device " << d << ": " << a.devices[d] << "\n";
    }
  }
  if (!chosen.ok()) std::cout << "  no accelerator chosen: " << chosen.status().message() << "\n";
  std::cout << "  plug-ins (KILN_PLUGINS): " << (plugins.empty() ? "none" : plugins) << "\n";
  for (auto& e : plugin_errors) std::cout << "    error: " << e << "\n";

  std::cout << "\ntoolchains\n";
  for (auto& t : toolchains) {
    std::cout << "  " << t.name << ": " << (t.available ? t.version : "unavailable: " + t.identity_or_reason) << "\n";
    if (t.available) std::cout << "    identity (enters keys): " << t.identity_or_reason << "\n";
    std::cout << "    " << (t.name == "clang" ? "library " : "") << t.where << "\n";
  }

  std::cout << "\nopencl (KILN_ACCELERATOR=opencl; device: KILN_OPENCL_DEVICE=platform:device)\n";
  for (auto& line : opencl_lines) std::cout << "  " << line << "\n";

  std::cout << "\ncache\n  folder: " << cache_root << "\n";
  if (stats)
    std::cout << "  size: " << human_size(stats->bytes) << " in " << stats->artifacts << " artifacts (limit "
              << human_size(stats->max_bytes) << ")\n";
  if (!cache_problem.empty()) std::cout << "  problem: " << cache_problem << "\n";
  if (tier_rows.empty() && remote_problem.empty()) std::cout << "  remote tiers: none configured\n";
  else std::cout << "  remote tiers (tried in order after this cache; trust: " << trust_mode << ")\n";
  if (!trust_problem.empty()) std::cout << "    problem: " << trust_problem << "\n";
  if (!trust_weakness.empty() && (!tier_rows.empty() || !remote_problem.empty())) std::cout << "    warning: " << trust_weakness << "\n";
  if (!remote_problem.empty()) std::cout << "    problem: " << remote_problem << "\n";
  for (auto& t : tier_rows) {
    std::cout << "    " << t.endpoint << (t.endpoint != t.tier ? " (in tier " + t.tier + ")" : "") << (t.read_only ? ", read-only" : "") << ": ";
    if (t.status.ok()) std::cout << "answers in " << fixed(t.rtt_ms, 2) << " ms\n";
    else std::cout << "does not answer: " << t.status.message() << "\n";
  }

  if (!op_rows.empty()) {
    std::cout << "\nops\n";
    std::printf("  %-16s %-18s %-10s %s\n", "op", "target", "cached", "compatible");
    std::cout.flush();
    for (auto& r : op_rows) {
      std::printf("  %-16s %-18s %-10s %s\n", r.op.c_str(), r.target.c_str(), r.cached.c_str(),
                  r.compatible ? "yes" : ("no: " + r.reason).c_str());
    }
  }
  return 0;
}

}  // namespace kiln::tools
