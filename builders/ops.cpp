// The ops API (builders/ops.h): setting up, finding specs, the lookup of an op's artifact through
// its manifest, and its compile on a miss. Loading is in op_loading.cpp, one compile per key across
// processes and nodes in single_flight.cpp, other compilers' artifacts in external_artifacts.cpp.
#include "builders/ops.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>

#include "cache/cache_key.h"
#include "jit/hiprtc/hiprtc_toolchain.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "builders/nvcc_route.h"
#include "jit/toolchain_loader.h"
#include "runtime/registry.h"
#include "support/cpu_time.h"
#include "support/install_paths.h"
#include "support/file_memo.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::builders {
namespace {

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// What a backend derives from an artifact for one device (an OpenCL device binary), kept in
// the store as an artifact of its own: keyed by XXH3 of the backend's key, checked on every read
// like any blob, counted against the size cap and evicted like the rest.
class StoreDerivedCode final : public runtime::DerivedCodeCache {
 public:
  explicit StoreDerivedCode(cache::Store& store) : m_store(store) {}
  std::optional<std::string> get(std::string_view key) override {
    auto found = m_store.get(xxh3_128(key));
    if (!found.ok() || !found->has_value()) return std::nullopt;
    return std::move((*found)->bytes);
  }
  void put(std::string_view key, std::string_view bytes, std::string_view kind, std::string_view device,
           std::string_view label) override {
    cache::ArtifactRecord r;
    r.key = r.input_key = xxh3_128(key);
    r.op = std::string(label.rfind("op ", 0) == 0 ? label.substr(3) : label);  // "op gelu" -> "gelu"
    r.kind = std::string(kind);
    r.target = std::string(device);
    r.toolchain = std::string(key);  // what the bytes depend on, for `kiln cache show`
    KILN_LOG_AT(kDebug, "load", std::string(label) + ": keeping the device's " + r.kind + " (" + std::to_string(bytes.size()) + " bytes)");
    (void)m_store.put(r, bytes);  // best effort: the next load builds again
  }

 private:
  cache::Store& m_store;
};

}  // namespace

const char* cache_outcome_name(CacheOutcome c) {
  switch (c) {
    case CacheOutcome::kMemory: return "memory";
    case CacheOutcome::kDisk: return "disk";
    case CacheOutcome::kRemote: return "remote";
    case CacheOutcome::kCompiled: return "compiled";
  }
  return "?";
}

std::string BuildOutcome::diagnostics_text() const {
  std::string out;
  for (auto& d : diagnostics) out += d.to_string() + "\n";
  return out;
}

Ops::~Ops() {
  m_pchs.reset();  // waits for PCH builds, which store into m_store
  if (m_remote) {
    m_remote->drain();  // publications under way finish (each bounded by the timeouts)
    take_remote_counters();
  }
  // Header hashes and toolchain fingerprints learnt by this process, for the next one (a
  // write only when something new was learnt).
  (void)FileMemo::instance().save();
}

std::string Ops::bundled_spec_dir() {
  if (const std::string& data = installed_data_dir(); !data.empty()) return data + "/specs";
  return KILN_BUNDLED_SPEC_DIR;
}

std::vector<std::string> Ops::default_spec_dirs() {
  std::vector<std::string> dirs;
  const char* env = std::getenv("KILN_SPEC_PATH");
  if (!env || !*env) return {bundled_spec_dir()};
  std::string all = env;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(':', start);
    std::string dir = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) dirs.push_back(absolute_path(dir));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return dirs;
}

Result<std::unique_ptr<Ops>> Ops::create(OpsOptions options) {
  std::unique_ptr<Ops> ops(new Ops);
  ops->m_spec_dirs = options.spec_dirs.empty() ? default_spec_dirs() : options.spec_dirs;
  std::map<cache::SettingKey, std::string> flags;
  if (!options.cache_dir.empty()) flags[cache::SettingKey::kCacheDir] = options.cache_dir;
  if (options.remote) flags[cache::SettingKey::kRemoteTiers] = *options.remote;
  KILN_ASSIGN_OR_RETURN(ops->m_settings, cache::Settings::load(flags));
  for (auto& w : ops->m_settings.unsaid_warnings()) ops->warn_once("settings " + w, w);
  // A tier list that does not parse is a mistake to hear about now, not on the first miss.
  KILN_ASSIGN_OR_RETURN(ops->m_tier_configs, cache::parse_tiers(ops->m_settings.get(cache::SettingKey::kRemoteTiers)));
  KILN_ASSIGN_OR_RETURN(double lock_seconds, ops->m_settings.seconds(cache::SettingKey::kLockTimeout));
  ops->m_lock_timeout = std::chrono::milliseconds(static_cast<int64_t>(lock_seconds * 1000));
  cache::StoreOptions store_options;
  if (options.max_cache_bytes) {
    store_options.max_bytes = options.max_cache_bytes;
  } else {
    KILN_ASSIGN_OR_RETURN(store_options.max_bytes, ops->m_settings.max_bytes());
  }
  Ops* self = ops.get();
  store_options.report_damage = [self](const std::string& message) { self->warn_once("damage", message); };
  store_options.report_notice = [self](const std::string& message) { self->warn_once("notice", message); };
  std::string root = ops->m_settings.cache_dir();
  double open_start = log_clock_ms();
  auto store = cache::Store::open(root, store_options);
  KILN_LOG_AT(kDebug, "cache", "opened " + root + (store.ok() ? "" : " (failed: " + store.status().message() + ")") + " in " +
                                   std::to_string(log_clock_ms() - open_start) + " ms");
  if (store.ok()) {
    ops->m_store = std::move(store).value();
    if (Status memo = FileMemo::instance().attach(ops->m_store->root() + "/file-memo"); !memo.ok())
      ops->warn_once("file-memo", memo.message());
    ops->m_pchs = std::make_unique<PrecompiledHeaders>(ops->m_store.get(), [raw = ops.get()] { return raw->remote(); });
    ops->m_derived = std::make_unique<StoreDerivedCode>(*ops->m_store);
  } else {
    // A cache that cannot be opened (read-only, not a folder, from a newer kiln) must not
    // stop ops from running: say so once, and compile into memory.
    ops->warn_once("store-open", "cannot use the kiln cache " + root + ": " + store.status().message() +
                                     "; ops will compile every time (set KILN_CACHE_DIR or --cache-dir to a folder this user can write)");
  }
  if (options.accelerator == "none") return ops;  // it only builds
  auto acc = runtime::get_accelerator(options.accelerator);
  if (!acc.ok()) return acc.status();
  ops->m_accelerator = acc.value();
  return ops;
}

std::vector<std::string> Ops::spec_files() const {
  std::map<std::string, std::string> by_name;
  for (auto& dir : m_spec_dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".toml") == 0) {
        std::string op = name.substr(0, name.size() - 5);
        by_name.emplace(op, dir + "/" + name);  // the first folder wins
      }
    }
    ::closedir(d);
  }
  std::vector<std::string> out;
  for (auto& [_, path] : by_name) out.push_back(path);
  return out;
}

Result<OpSpec> Ops::find_spec(const std::string& op) const {
  for (auto& dir : m_spec_dirs) {
    std::string path = dir + "/" + op + ".toml";
    if (::access(path.c_str(), R_OK) == 0) {
      auto spec = parse_spec_file(path);
      if (spec.ok() && spec->name != op)
        return invalid_argument(path + ": the file is named for op '" + op + "' but declares name = '" + spec->name + "'");
      return spec;
    }
  }
  std::string dirs;
  for (auto& d : m_spec_dirs) dirs += (dirs.empty() ? "" : ", ") + d;
  return not_found("no op named '" + op + "': no " + op + ".toml in " + dirs + " (set KILN_SPEC_PATH to add folders)");
}

void Ops::warn_once(const std::string& kind, const std::string& message) {
  std::lock_guard lock(m_warn_mutex);
  if (m_warned.insert(kind).second) std::cerr << "kiln: warning: " << message << "\n";
}

// Direct lookup: the manifest of the last compile of these inputs names the headers it
// read; their current content completes the key. No compiler is involved.
std::optional<Hash128> Ops::artifact_key_from_manifest(const OpSpec& spec, const KeyParts& input) {
  if (!m_store) return std::nullopt;
  auto manifest_text = m_store->get_manifest(input.key);
  if (!manifest_text.ok() || !manifest_text->has_value()) {
    KILN_LOG_AT(kDebug, "lookup", "op " + spec.name + ": no manifest for input key " + input.key.hex() + ": a miss");
    return std::nullopt;
  }
  auto manifest = decode_manifest(**manifest_text);
  if (!manifest.ok()) return std::nullopt;
  auto current = rehash_manifest(manifest.value(), spec);
  if (!current) {  // a header is gone: compile, and learn the new list
    KILN_LOG_AT(kDebug, "lookup", "op " + spec.name + ": a header of the manifest is gone: a miss");
    return std::nullopt;
  }
  if (log_enabled(LogLevel::kDebug)) {
    std::string changed;
    for (size_t i = 0; i < current->size(); ++i)
      if (!((*current)[i].hash == manifest->at(i).hash)) changed += (changed.empty() ? "" : ", ") + (*current)[i].label;
    log_line(LogLevel::kDebug, "lookup",
             "op " + spec.name + ": manifest of " + std::to_string(current->size()) + " headers" +
                 (changed.empty() ? ", none changed" : "; changed since it was stored: " + changed));
  }
  return artifact_key(input, *current).key;
}

bool Ops::lookup(const OpSpec& spec, const KeyParts& input, BuildOutcome& out) {
  std::optional<Hash128> key = artifact_key_from_manifest(spec, input);
  if (!key) return false;
  auto hit = m_store->get(*key);
  if (!hit.ok() || !hit->has_value()) {
    KILN_LOG_AT(kDebug, "lookup", "op " + spec.name + ": artifact key " + key->hex() + " is not in the index: a miss");
    return false;
  }
  KILN_LOG_AT(kDebug, "lookup", "op " + spec.name + ": index hit " + key->hex() + ", " + (*hit)->record.kind + " of " +
                                    std::to_string((*hit)->bytes.size()) + " bytes, blob verified");
  out.key = *key;
  out.cache = CacheOutcome::kDisk;
  if (!fill_outcome(**hit, out)) return false;
  count_hit(cache::Counter::kHitsDisk, (*hit)->record);
  return true;
}

bool Ops::fill_outcome(cache::Artifact& a, BuildOutcome& out) {
  out.log = a.record.log;
  if (a.record.kind == "compile-error") {
    // A cached failure: the same diagnostics at hit speed, until an input changes.
    auto diags = decode_diagnostics(a.bytes);
    if (!diags.ok()) return false;
    out.success = false;
    out.diagnostics = std::move(diags).value();
  } else {
    auto kernels = decode_kernels(a.record.entry_points);
    if (!kernels.ok()) return false;
    out.success = true;
    out.kind = a.record.kind;
    out.artifact = std::move(a.bytes);
    out.kernels = std::move(kernels).value();
  }
  return true;
}

Result<Ops::Inputs> Ops::inputs_for(const OpSpec& spec, const Target& target, const std::string& cuda_route) {
  Inputs in;
  KILN_ASSIGN_OR_RETURN(in.request, make_build_request(spec, target));
  if (!cuda_route.empty() && target.backend == "cuda") use_cuda_toolchain(in.request, cuda_route);
  // NVRTC for CUDA unless the op's headers, the op or KILN_CUDA_TOOLCHAIN choose Clang's NVPTX
  // path (cuda_toolchain_for).
  in.nvrtc = target.backend == "cuda" && in.request.cuda_toolchain == "nvrtc";
  // Only the identity of what compiles for this target: a cpu key never depends on the CUDA
  // toolkit, and no CUDA library is looked at for a cpu target.
  in.hiprtc = target.backend == "hip" && hip_toolchain_for() == "hiprtc";
  KILN_ASSIGN_OR_RETURN(in.identity, in.nvrtc                       ? jit::nvrtc_toolchain_identity()
                                     : in.hiprtc                    ? jit::hiprtc_toolchain_identity()
                                     : target.backend == "cuda" || jit::has_cuda_sources(in.request.compile)
                                         ? jit::clang_cuda_toolchain_identity()
                                     : target.backend == "opencl" || target.backend == "spirv" ? jit::clang_spirv_toolchain_identity()
                                                                : jit::clang_toolchain_identity());
  in.key = input_key(in.request, in.identity);
  KILN_LOG_AT(kDebug, "lookup", "op " + spec.name + " for " + in.request.target.str() + ": input key " + in.key.key.hex() +
                                    " (toolchain " + in.identity.substr(0, in.identity.find(';')) + ")");
  return in;
}

Result<std::optional<cache::ArtifactRecord>> Ops::cached_record(const OpSpec& spec, const Target& target) {
  KILN_ASSIGN_OR_RETURN(Inputs in, inputs_for(spec, target));
  std::optional<Hash128> key = artifact_key_from_manifest(spec, in.key);
  if (!key) return std::optional<cache::ArtifactRecord>();
  return m_store->record(*key);
}

Hash128 Ops::failed_route_note(const Hash128& input_key) { return xxh3_128("kiln: this route failed for input key " + input_key.hex()); }

bool Ops::route_failed_before(const Hash128& input_key) {
  {
    std::lock_guard lock(m_routes_mutex);
    if (m_failed_routes.count(input_key)) return true;
  }
  if (!m_store) return false;
  auto note = m_store->get_manifest(failed_route_note(input_key));
  if (!note.ok() || !note->has_value()) return false;
  std::lock_guard lock(m_routes_mutex);
  m_failed_routes.insert(input_key);
  return true;
}

void Ops::remember_failed_route(const Hash128& input_key, const std::string& why) {
  {
    std::lock_guard lock(m_routes_mutex);
    m_failed_routes.insert(input_key);
  }
  if (m_store) (void)m_store->put_manifest(failed_route_note(input_key), why);
}

// The first diagnostic that is an error, as a compiler prints it (for a log line).
static std::string first_error(const BuildOutcome& out) {
  for (auto& d : out.diagnostics)
    if (d.severity == jit::Diagnostic::Severity::kError || d.severity == jit::Diagnostic::Severity::kFatal) return d.to_string();
  return out.diagnostics.empty() ? "no diagnostic" : out.diagnostics.front().to_string();
}

// The default CUDA route ("auto") never gives up on a kernel while another route can compile
// it: Clang's NVPTX path where NVRTC cannot (it has no C++ standard library: <cstdint>), NVRTC
// where Clang cannot (C++ it rejects, headers it lacks). The artifact is stored under the key of
// the route that made it. That the first route failed for these inputs is remembered (in the
// store, and in this process), so the next build goes straight to the route that works.
Result<BuildOutcome> Ops::build(const OpSpec& spec, const Target& target) {
  KILN_ASSIGN_OR_RETURN(Inputs first, inputs_for(spec, target));
  if (spec.library && jit::has_cuda_sources(first.request.compile)) return build_cuda_library(spec, target, std::move(first));
  if (target.backend != "cuda" || !first.request.cuda_route_auto) return build_route(spec, target, std::move(first));
  const Hash128 first_key = first.key.key;
  const std::string chosen = first.request.cuda_toolchain;
  const std::string other = chosen == "nvrtc" ? "clang" : "nvrtc";
  // Asked only once the first route failed: a hit must not load a compiler.
  auto other_present = [&] { return other == "clang" ? jit::clang_toolchain_present() : jit::load_nvrtc_toolchain().ok(); };
  auto through_other = [&]() -> Result<BuildOutcome> {
    KILN_ASSIGN_OR_RETURN(Inputs in, inputs_for(spec, target, other));
    return build_route(spec, target, std::move(in));
  };
  if (route_failed_before(first_key) && other_present()) {
    KILN_LOG_AT(kDebug, "compile", "op " + spec.name + " for " + target.str() + ": the " + chosen +
                                       " route failed for these inputs before; compiling through " + other);
    auto again = through_other();
    if (again.ok() && again->success) {
      again->fallback_from = chosen;
      return again;
    }
    KILN_ASSIGN_OR_RETURN(first, inputs_for(spec, target));
  }
  auto out = build_route(spec, target, std::move(first));
  if (!out.ok() || out->success || !other_present()) return out;
  KILN_LOG_AT(kDebug, "compile", "op " + spec.name + " for " + target.str() + ": the " + chosen + " route failed (" +
                                     first_error(*out) + "); trying " + other);
  auto second = through_other();
  if (!second.ok() || !second->success) return out;  // the first choice's diagnostics
  second->fallback_from = chosen;
  remember_failed_route(first_key, chosen + " failed: " + first_error(*out) + "\n");
  return second;
}

Result<BuildOutcome> Ops::build_route(const OpSpec& spec, const Target& target, Inputs in) {
  auto start = std::chrono::steady_clock::now();
  BuildOutcome out;
  out.op = spec.name;
  out.target = target.str();
  if (target.backend == "cuda") out.route = in.request.cuda_toolchain;
  if (jit::has_cuda_sources(in.request.compile)) out.route = in.nvcc ? "nvcc" : "clang";
  for (size_t i : in.nvcc_sources) out.nvcc_sources.push_back(in.request.compile.sources[i].path);
  out.target = in.request.target.str();
  out.warnings = in.request.notes;
  BuildRequest& request = in.request;
  const bool nvrtc = in.nvrtc;
  const std::string& identity = in.identity;
  const KeyParts& input = in.key;
  out.kernels = request.kernels;
  out.input_key = input.key;
  auto finish = [&]() -> Result<BuildOutcome> {
    out.total_ms = ms_since(start);
    return out;
  };
  if (lookup(spec, input, out)) return finish();
  // One compile per key on this node and in the cluster; the claim (lock, lease) is held until
  // the artifact is stored and published.
  Claim claim;
  if (single_flight(input.key, "op " + spec.name, [&] { return lookup(spec, input, out); },
                    [&](cache::RemoteTiers& r) { return remote_lookup(spec, input, out, r); }, claim))
    return finish();
  cache::RemoteTiers* tiers = m_store ? remote() : nullptr;
  if (m_store) m_store->count(cache::Counter::kMisses);

  auto load_toolchain = [&] {
    return nvrtc ? jit::load_nvrtc_toolchain() : in.hiprtc ? jit::load_hiprtc_toolchain() : jit::load_clang_toolchain();
  };
  // The Clang library is mapped and relocated on another thread while this one finds the
  // stored precompiled headers (mapped and hashed: ~2 ms for system_headers' 10 MB PCH).
  if (!nvrtc && !in.hiprtc) jit::start_loading_clang_toolchain();
  // Stored precompiled headers for the sources' include prefixes, or their builds started.
  // Sources nvcc compiles (nvcc_route.h): set first, so no PCH is made for their Clang passes.
  if (in.nvcc) use_nvcc_for(request.compile, in.nvcc_sources, *in.nvcc, "library " + spec.name);
  PchUse pch;
  if (m_pchs && !nvrtc && !in.hiprtc)
    pch = m_pchs->prepare(request, in.nvcc ? in.clang_identity : identity, [&]() -> jit::Toolchain* {
      auto loaded = load_toolchain();
      return loaded.ok() ? loaded.value() : nullptr;
    });
  KILN_ASSIGN_OR_RETURN(jit::Toolchain * toolchain, load_toolchain());
  m_compiles.fetch_add(1);
  // CPU time, beside the wall time: this thread's (and helpers it joined, support/cpu_time.h)
  // unless the toolchain measured its own threads, and the child processes it ran (nvcc).
  int64_t cpu_start = work_cpu_us(), children_start = children_cpu_us();
  KILN_LOG_AT(kDebug, "compile", "op " + spec.name + ": " + toolchain->version() + " loaded");
  out.pch_used = pch.used;
  out.pch_building = pch.building;
  if (log_enabled(LogLevel::kInfo)) {
    std::string options;
    for (auto& d : request.compile.defines) options += " -D" + d;
    for (auto& f : request.compile.flags) options += " " + f;
    log_line(LogLevel::kInfo, "compile", "op " + spec.name + " for " + request.target.str() + " with " + toolchain->version() + ": " +
                                             std::to_string(request.compile.sources.size()) + " sources" + options +
                                             (pch.used ? ", " + std::to_string(pch.used) + " precompiled headers" : ""));
  }
  jit::CompileResult compiled = toolchain->compile(request.compile);
  request.compile.external_compiles.clear();
  double cpu_ms = compiled.cpu_ms > 0 ? compiled.cpu_ms : static_cast<double>(work_cpu_us() - cpu_start) / 1000.0;
  cpu_ms += static_cast<double>(children_cpu_us() - children_start) / 1000.0;
  out.failed_sources = compiled.failed_sources;
  KILN_LOG_AT(kInfo, "compile", "op " + spec.name + ": " + (compiled.success ? "compiled" : "failed") + " in " +
                                    std::to_string(compiled.compile_ms) + " ms");
  request.compile.precompiled_headers.clear();
  out.cache = CacheOutcome::kCompiled;
  out.compile_ms = compiled.compile_ms;
  out.headers_parsed = compiled.headers_parsed;
  out.diagnostics = std::move(compiled.diagnostics);
  out.log = std::move(compiled.log);
  // What the PCHs saved this compile, in its stored log (`kiln cache show`).
  if (pch.used)
    out.log += "kiln: " + std::to_string(pch.used) + " precompiled header" + (pch.used > 1 ? "s" : "") + " used (" +
               std::to_string(pch.headers.size()) + " headers)" +
               (compiled.headers_parsed ? ", " + std::to_string(*compiled.headers_parsed) + " headers parsed" : "") + "\n";
  out.success = compiled.success;
  if (compiled.success) {
    out.kind = compiled.kind;
    out.artifact = std::move(compiled.artifact);
    // Templated CUDA entries live in the module under their mangled names.
    for (auto& [expr, lowered] : compiled.lowered_names)
      for (size_t i = 0; i < spec.entries.size() && i < out.kernels.size(); ++i)
        if (spec.entries[i].instance_for(target.backend) == expr) out.kernels[i].symbol = lowered;
  }
  if (!m_store) return finish();
  count_compile(out.compile_ms, cpu_ms);
  // A failure because an #include found nothing is not cached: creating that header changes
  // no input the key covers, and must still compile again.
  if (!out.success && !compiled.missing_files.empty()) return finish();

  // The headers this compile read complete the key; a failed compile is keyed the same way
  // and stored with its diagnostics, so fixing any input (a new key) compiles again.
  auto headers = manifest_from_dependencies(compiled.dependencies, request);
  // What a PCH was made of is what this compile read through it.
  if (headers.ok()) headers = merge_manifests(std::move(headers).value(), pch.headers);
  if (!headers.ok()) {
    out.warnings.push_back("not cached: " + headers.status().message());
    return finish();
  }
  // What the key was made of is stored with the artifact (for `kiln cache explain`).
  KeyParts key = artifact_key(input_key(request, identity, /*with_components=*/true), headers.value());
  out.key = key.key;
  cache::ArtifactRecord record;
  record.key = key.key;
  record.input_key = input.key;
  record.manifest = encode_manifest(headers.value());
  record.op = spec.name;
  record.target = out.target;
  record.kind = out.success ? out.kind : "compile-error";
  record.toolchain = identity;
  record.entry_points = out.success ? encode_kernels(out.kernels) : "";
  record.components = cache::encode_components(key.components);
  record.compile_ms = out.compile_ms;
  record.compile_cpu_ms = cpu_ms;
  record.log = out.log;
  Status stored = m_store->put(record, out.success ? std::string_view(out.artifact) : encode_diagnostics(out.diagnostics));
  if (!stored.ok())
    warn_once("store-write", "the cache in " + m_store->root() + " cannot be written (" + stored.message() +
                                 "); ops still run, compiled into memory only");
  else if (tiers)
    publish(record.key, input.key, std::move(claim.lease));
  return finish();
}

}  // namespace kiln::builders
