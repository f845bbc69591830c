#include "builders/ops.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <set>
#include <thread>

#include "cache/cache_key.h"
#include "cache/key_lock.h"
#include "jit/hiprtc/hiprtc_toolchain.h"
#include "jit/nvrtc/nvrtc_toolchain.h"
#include "builders/nvcc_route.h"
#include "builders/remote_lookup.h"
#include "jit/toolchain_loader.h"
#include "runtime/registry.h"
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

Result<runtime::Kernel*> LoadedOp::kernel(std::string_view name) const {
  if (name.empty()) name = m_spec.entries.front().name;
  return m_module->kernel(name);
}

Ops::~Ops() {
  m_pchs.reset();  // waits for PCH builds, which store into m_store
  if (m_remote) {
    m_remote->drain();  // publications under way finish (each bounded by the timeouts)
    if (m_store)
      for (auto& c : m_remote->take_counters())
        m_store->count("remote|" + c.tier + "|" + cache::tier_counter_name(c.counter), c.value);
  }
  if (m_store && m_memory_hits.load()) m_store->count(cache::Counter::kHitsMemory, static_cast<int64_t>(m_memory_hits.load()));
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
  m_store->count(cache::Counter::kHitsDisk);
  m_store->count(cache::Counter::kCompileUsSaved, static_cast<int64_t>((*hit)->record.compile_ms * 1000));
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

cache::RemoteTiers* Ops::remote() {
  std::call_once(m_remote_once, [this] {
    if (m_tier_configs.empty() || !m_store) return;
    cache::RemoteOptions o;
    o.tiers = m_tier_configs;
    auto seconds = [&](cache::SettingKey k, std::chrono::milliseconds& out) -> Status {
      KILN_ASSIGN_OR_RETURN(double v, m_settings.seconds(k));
      out = std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
      return {};
    };
    Status st = seconds(cache::SettingKey::kConnectTimeout, o.connect_timeout);
    if (st.ok()) st = seconds(cache::SettingKey::kTimeout, o.io_timeout);
    if (st.ok()) st = seconds(cache::SettingKey::kLease, o.lease);
    if (st.ok()) st = seconds(cache::SettingKey::kBreaker, o.breaker);
    if (st.ok()) st = seconds(cache::SettingKey::kWait, m_remote_wait);
    if (st.ok() && o.lease.count() < 300) st = invalid_argument("remote.lease must be at least 0.3 s");
    const std::string& secret_file = m_settings.get(cache::SettingKey::kSecretFile);
    if (st.ok() && !secret_file.empty()) {
      auto secret = cache::read_secret_file(secret_file);
      if (secret.ok()) o.secret = std::move(secret).value();
      else st = secret.status();
    }
    o.ca_file = m_settings.get(cache::SettingKey::kCaFile);
    o.cert_file = m_settings.get(cache::SettingKey::kCertFile);
    o.key_file = m_settings.get(cache::SettingKey::kKeyFile);
    o.report = [this](const std::string& kind, const std::string& message) { warn_once("remote " + kind, message); };
    if (st.ok()) {
      auto tiers = cache::RemoteTiers::create(std::move(o));
      if (tiers.ok()) m_remote = std::move(tiers).value();
      else st = tiers.status();
    }
    // A remote that cannot be set up must not stop ops from running: say so, compile here.
    if (!st.ok()) warn_once("remote-setup", "remote cache tiers are off: " + st.message());
  });
  return m_remote.get();
}

bool Ops::remote_lookup(const OpSpec& spec, const KeyParts& input, BuildOutcome& out, cache::RemoteTiers& remote) {
  std::optional<RemoteArtifact> got = fetch_through_manifest(remote, *m_store, input, spec);
  if (!got) return false;
  out.key = got->artifact.record.key;
  if (!got->fetched) {
    out.cache = CacheOutcome::kDisk;
    return fill_outcome(got->artifact, out);
  }
  KILN_LOG_AT(kInfo, "remote", "op " + spec.name + ": artifact " + out.key.hex() + " from a remote tier (" +
                                   std::to_string(got->artifact.bytes.size()) + " bytes, checked" + (remote.signing() ? " and signed)" : ")"));
  out.cache = CacheOutcome::kRemote;
  if (!fill_outcome(got->artifact, out)) return false;
  m_store->count(cache::Counter::kHitsRemote);
  m_store->count(cache::Counter::kCompileUsSaved, static_cast<int64_t>(got->artifact.record.compile_ms * 1000));
  return true;
}

bool Ops::wait_for_cluster(const Hash128& key, const std::string& what, const std::function<bool(cache::RemoteTiers&)>& look_remote,
                           cache::RemoteTiers& remote, std::unique_ptr<cache::RemoteTiers::Lease>& lease) {
  if (!remote.has_leases()) return false;
  auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(20);
  bool said = false;
  for (;;) {
    auto taken = remote.take_lease(key);
    if (taken.state == cache::RemoteTiers::LeaseState::kTaken) {
      lease = std::move(taken.lease);
      // Whoever held it before may have published and released between our look and now.
      return look_remote(remote);
    }
    if (taken.state == cache::RemoteTiers::LeaseState::kNone) return false;
    if (std::chrono::steady_clock::now() - start > m_remote_wait) {
      warn_once("remote-wait", "waited " + std::to_string(m_remote_wait.count() / 1000) + " s for another node compiling " + what +
                                   "; compiling here too");
      return false;
    }
    if (!said) {
      KILN_LOG_AT(kInfo, "remote", what + ": another node is compiling it; waiting for its artifact");
      said = true;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 3 / 2, std::chrono::milliseconds(500));
    if (look_remote(remote)) return true;
  }
}

bool Ops::single_flight(const Hash128& key, const std::string& what, const std::function<bool()>& look,
                        const std::function<bool(cache::RemoteTiers&)>& look_remote, Claim& claim) {
  if (!m_store) return false;
  // One compile per key across processes: wait for whoever is compiling these inputs, then
  // look again. A waiter that times out compiles itself rather than hang.
  claim.lock.emplace(cache::KeyLock::acquire(m_store->root(), key, m_lock_timeout));
  // Look again under the lock, whether or not we waited: another process may have stored
  // the artifact and released the lock between our first lookup and our taking it.
  if (look()) return true;
  if (!claim.lock->held() && claim.lock->waited())
    warn_once("lock-timeout", "waited too long for another process compiling " + what + "; compiling here too");
  // Then the cluster: a remote tier may have it, or another node may be compiling it now.
  cache::RemoteTiers* tiers = remote();
  return tiers && (look_remote(*tiers) || wait_for_cluster(key, what, look_remote, *tiers, claim.lease));
}

void Ops::publish(const Hash128& key, const Hash128& input_key, std::unique_ptr<cache::RemoteTiers::Lease> lease) {
  // What the local store now holds, byte for byte: the blob file and the manifest.
  auto blob = read_file(m_store->blob_path(key));
  if (!blob.ok()) return;  // the lease goes with this frame
  std::vector<cache::RemoteTiers::Publication> objects;
  objects.push_back({cache::RemoteObject::kArtifact, key, std::move(blob).value()});
  if (!(input_key == key)) {  // an external artifact has no manifest: its caller's key is its key
    auto manifest = m_store->get_manifest(input_key);
    if (!manifest.ok() || !manifest->has_value()) return;
    objects.push_back({cache::RemoteObject::kManifest, input_key, std::move(**manifest)});
  }
  // Released once both are up: a node waiting on the lease then finds them.
  std::shared_ptr<cache::RemoteTiers::Lease> held(std::move(lease));
  m_remote->publish(std::move(objects), [held]() mutable { held.reset(); });
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
  m_store->count(cache::Counter::kCompiles);
  // A failure because an #include found nothing is not cached: creating that header changes
  // no input the key covers, and must still compile again.
  if (!out.success && !compiled.missing_files.empty()) return finish();
  m_store->count(cache::Counter::kCompileUsSpent, static_cast<int64_t>(out.compile_ms * 1000));

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
  record.log = out.log;
  Status stored = m_store->put(record, out.success ? std::string_view(out.artifact) : encode_diagnostics(out.diagnostics));
  if (!stored.ok())
    warn_once("store-write", "the cache in " + m_store->root() + " cannot be written (" + stored.message() +
                                 "); ops still run, compiled into memory only");
  else if (tiers)
    publish(record.key, input.key, std::move(claim.lease));
  return finish();
}

Result<OpBuilder> Ops::create_op_builder(const std::string& op, const std::string& target_text) {
  OpBuilder b;
  b.m_ops = this;
  KILN_ASSIGN_OR_RETURN(b.m_spec, find_spec(op));
  KILN_ASSIGN_OR_RETURN(b.m_target, parse_target(target_text.empty() ? m_accelerator->native_target() : target_text));
  return b;
}

Status OpBuilder::is_compatible() const {
  KILN_RETURN_IF_ERROR(builders::is_compatible(m_spec, m_target));
  KILN_ASSIGN_OR_RETURN(runtime::Accelerator * acc, m_ops->accelerator_for(m_target));
  Target built_for = effective_target(m_spec.flags, m_target);
  return acc->can_load(artifact_kind_for(built_for), built_for.str());
}

void Ops::wait_background() {
  if (m_pchs) m_pchs->wait();
}

Result<BuildOutcome> OpBuilder::build() const { return m_ops->build(m_spec, m_target); }

Result<std::shared_ptr<LoadedOp>> OpBuilder::load() const { return m_ops->get(m_spec.name, m_target.str()); }

Result<std::shared_ptr<LoadedOp>> Ops::get(const std::string& op, const std::string& target_text) {
  std::string target_str = target_text.empty() ? m_accelerator->native_target() : target_text;
  std::string slot_key = op + "@" + target_str;
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(m_mutex);
    if (auto it = m_loaded.find(slot_key); it != m_loaded.end()) {
      if (it->second->done && it->second->op) {
        m_memory_hits.fetch_add(1, std::memory_order_relaxed);
        return it->second->op;  // the common case: a hash-map lookup
      }
      slot = it->second;
    }
  }
  bool builder = false;
  if (!slot) {
    // A new slot is locked before anyone else can see it, and outside m_mutex, so the two
    // mutexes are only ever taken in one order (slot, then m_mutex).
    auto fresh = std::make_shared<Slot>();
    fresh->mutex.lock();
    std::lock_guard lock(m_mutex);
    auto& s = m_loaded[slot_key];
    if (!s) {
      s = fresh;
      builder = true;
    }
    slot = s;
    if (!builder) fresh->mutex.unlock();
  }
  if (!builder) {
    std::lock_guard wait(slot->mutex);  // blocks until the building thread is done
    if (slot->op) return slot->op;
    return slot->error;  // the same failure, without compiling again
  }
  auto target = parse_target(target_str);
  Result<std::shared_ptr<LoadedOp>> result = target.ok() ? load(op, target.value()) : Result<std::shared_ptr<LoadedOp>>(target.status());
  {
    std::lock_guard lock(m_mutex);
    if (result.ok()) {
      slot->op = result.value();
      slot->done = true;
    } else {
      slot->error = result.status();
      m_loaded.erase(slot_key);  // not remembered: a later call tries again (the source may be fixed)
    }
  }
  slot->mutex.unlock();
  return result;
}

Result<runtime::Accelerator*> Ops::accelerator_for(const Target& target) {
  // Any accelerator that runs the target's artifacts will do, the chosen one first: a
  // plug-in that runs host code takes cpu targets.
  if (target.backend == m_accelerator->name() || m_accelerator->can_load(artifact_kind_for(target), target.str()).ok())
    return m_accelerator;
  return runtime::get_accelerator(target.backend);
}

Result<std::shared_ptr<LoadedOp>> Ops::load(const std::string& name, const Target& target) {
  KILN_ASSIGN_OR_RETURN(OpSpec spec, find_spec(name));
  return load_spec(std::move(spec), target);
}

Result<std::shared_ptr<LoadedOp>> Ops::load_spec(OpSpec spec, const std::string& target_text) {
  KILN_ASSIGN_OR_RETURN(Target target, parse_target(target_text.empty() ? m_accelerator->native_target() : target_text));
  return load_spec(std::move(spec), target);
}

Result<std::shared_ptr<LoadedOp>> Ops::load_spec(OpSpec spec, const Target& target) {
  const std::string name = spec.name;
  KILN_ASSIGN_OR_RETURN(runtime::Accelerator * accelerator, accelerator_for(target));
  // An artifact this device cannot run (a CPU level it lacks, a newer GPU) is refused before
  // it is even looked up.
  Target built_for = effective_target(spec.flags, target);  // an op's instruction-set flags may raise it
  KILN_RETURN_IF_ERROR(accelerator->can_load(artifact_kind_for(built_for), built_for.str()));
  KILN_ASSIGN_OR_RETURN(BuildOutcome outcome, build(spec, target));
  if (!outcome.success)
    return Status(StatusCode::kCompileError, "op " + name + " does not compile for " + target.str() + ":\n" + outcome.diagnostics_text());
  runtime::ModuleImage image{outcome.kind, outcome.target, outcome.artifact, outcome.kernels, "op " + name};
  image.derived_cache = m_derived.get();
  double load_start = log_clock_ms();
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Module> module, accelerator->load_module(image));
  KILN_LOG_AT(kDebug, "load", "op " + name + ": " + outcome.kind + " loaded on " + std::string(accelerator->name()) + " in " +
                                  std::to_string(log_clock_ms() - load_start) + " ms");
  auto loaded = std::make_shared<LoadedOp>();
  loaded->m_spec = std::move(spec);
  outcome.artifact.clear();
  outcome.artifact.shrink_to_fit();
  loaded->m_outcome = std::move(outcome);
  loaded->m_accelerator = accelerator;
  loaded->m_module = std::move(module);
  return loaded;
}

}  // namespace kiln::builders
