// The ops API: ask for an op by name and get it loaded on an accelerator, compiled on
// first use or found in the cache; later uses cost a hash-map lookup.
//
//   auto ops = kiln::builders::Ops::create().value();
//   auto op = ops->get("vector_add").value();
//   op->kernel().launch(stream, grid, block, args, 4);
//
// The flow of one op (DESIGN.md): spec -> BuildRequest -> key -> lookup (memory, then the
// local store through its header manifest) -> compile on a miss, once -> store -> load.
// Thread-safety: every method may be called from any thread. Concurrent first uses of one
// (op, target) compile once; the others wait for that compile.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "builders/op_builder.h"
#include "builders/precompiled_headers.h"
#include "builders/remote_lookup.h"
#include "builders/spec.h"
#include "builders/target.h"
#include "cache/file_group.h"
#include "cache/key_lock.h"
#include "cache/remote.h"
#include "cache/settings.h"
#include "cache/store.h"
#include "jit/nvcc/nvcc_compiler.h"
#include "jit/toolchain.h"
#include "runtime/accelerator.h"

namespace kiln::builders {

// kRemote: a remote tier had it (it is now in the local store too).
enum class CacheOutcome { kMemory, kDisk, kRemote, kCompiled };
const char* cache_outcome_name(CacheOutcome c);  // "memory", "disk", "remote", "compiled"

// What building one op for one target did.
struct BuildOutcome {
  bool success = false;
  std::string op;
  std::string target;
  Hash128 key;          // the artifact key (zero when the compile failed)
  Hash128 input_key;    // before headers
  CacheOutcome cache = CacheOutcome::kCompiled;
  double compile_ms = 0;  // 0 on a hit
  double total_ms = 0;
  std::vector<jit::Diagnostic> diagnostics;
  std::string log;
  std::vector<std::string> warnings;  // e.g. the cache could not be written
  // Precompiled headers on a compile: how many sources used a stored one, how many were
  // started in the background for the next compile (builders/precompiled_headers.h).
  size_t pch_used = 0, pch_building = 0;
  // On a compile, how many headers the compiler parsed itself rather than read from a PCH (0:
  // every header came from one); empty when the toolchain does not say (NVRTC).
  std::optional<size_t> headers_parsed;
  // CUDA targets: the route that made the artifact ("nvrtc" or "clang"), and, when the default
  // route ("auto") compiled it another way because its first choice failed, that first choice.
  // A host library with CUDA sources: "clang", or "nvcc" when some of them were compiled by the
  // toolkit's nvcc because Clang's CUDA path refused them (nvcc_sources: their paths).
  std::string route;
  std::string fallback_from;
  std::vector<std::string> nvcc_sources;
  // A host library whose compile failed: the indexes of the sources that did not compile.
  std::vector<size_t> failed_sources;
  std::string kind;
  std::string artifact;  // the bytes (empty after load)
  std::vector<runtime::KernelSignature> kernels;

  // The diagnostics as a compiler prints them, one per line.
  std::string diagnostics_text() const;
};

// An op loaded on an accelerator. Lives as long as someone holds it.
class LoadedOp {
 public:
  const OpSpec& spec() const { return m_spec; }
  const BuildOutcome& outcome() const { return m_outcome; }
  runtime::Accelerator& accelerator() const { return *m_accelerator; }
  // The named kernel; empty name = the first entry point.
  Result<runtime::Kernel*> kernel(std::string_view name = "") const;

 private:
  friend class Ops;
  OpSpec m_spec;
  BuildOutcome m_outcome;
  runtime::Accelerator* m_accelerator = nullptr;
  std::shared_ptr<runtime::Module> m_module;
};

class Ops;

// One op by name, bound to a target: what frameworks' accelerators hand out as an op builder
// (DeepSpeed's accelerator.create_op_builder("FusedAdamBuilder")). It answers whether the op
// can be built and run here, builds it ahead of time, or loads it. Made by
// Ops::create_op_builder; lives no longer than that Ops.
class OpBuilder {
 public:
  const std::string& name() const { return m_spec.name; }
  const OpSpec& spec() const { return m_spec; }
  const Target& target() const { return m_target; }
  // Ok when the spec builds for the target and an accelerator here runs it; else why not.
  Status is_compatible() const;
  // Finds or compiles the artifact without loading it (cache warming).
  Result<BuildOutcome> build() const;
  // Loaded and ready to launch (Ops::get).
  Result<std::shared_ptr<LoadedOp>> load() const;

 private:
  friend class Ops;
  Ops* m_ops = nullptr;
  OpSpec m_spec;
  Target m_target;
};

// What one process holds while it makes an artifact that no one has yet: this node's lock on
// the key (an flock, which the kernel drops however the process dies) and the cluster's lease
// on it (Redis: it expires unless its holder renews it). Destroyed, it releases both.
struct Claim {
  std::optional<cache::KeyLock> lock;
  std::unique_ptr<cache::RemoteTiers::Lease> lease;
  bool held() const { return (lock && lock->held()) || lease != nullptr; }
};

struct OpsOptions {
  // Folders searched for <op>.toml, first match wins. Empty: $KILN_SPEC_PATH (':'-separated),
  // else the bundled specs/.
  std::vector<std::string> spec_dirs;
  // Flags: each set one overrides the environment and the config files (cache/settings.h).
  std::string cache_dir;    // empty: the cache_dir setting
  std::optional<std::string> remote;  // the tier list; "" = no remote tiers
  // Empty: KILN_ACCELERATOR or auto-detect. "none": no accelerator at all, for a process that
  // only builds (kiln build, kiln warm): then get(), create_op_builder() with no target and
  // accelerator() must not be called.
  std::string accelerator;
  uint64_t max_cache_bytes = 0;  // 0: the max_size setting (KILN_CACHE_MAX_SIZE, config, 5 GiB)
};

class Ops {
 public:
  static Result<std::unique_ptr<Ops>> create(OpsOptions options = {});
  ~Ops();

  // Loaded op for `target` ("" = the accelerator's native target).
  Result<std::shared_ptr<LoadedOp>> get(const std::string& op, const std::string& target = "");

  // Builds (or finds) and loads a spec that is not in the spec folders (one given as a string
  // to the C++ API). Not memoized by name: the caller keeps what it returns.
  Result<std::shared_ptr<LoadedOp>> load_spec(OpSpec spec, const std::string& target = "");

  // The op builder for `op` ("" target = the accelerator's native target); kNotFound when no
  // spec has that name. get_op_builder is find_spec: the spec is the builder's "class".
  Result<OpBuilder> create_op_builder(const std::string& op, const std::string& target = "");

  // Finds or compiles the artifact without loading it. A compile error is a successful
  // Result whose outcome has success == false and the diagnostics; nothing is cached then.
  Result<BuildOutcome> build(const OpSpec& spec, const Target& target);

  // What the cache holds for (spec, target), from the index alone: nothing is compiled,
  // loaded or counted as a hit (for `kiln doctor`). nullopt when nothing is cached.
  Result<std::optional<cache::ArtifactRecord>> cached_record(const OpSpec& spec, const Target& target);

  // ---- Artifacts another compiler makes (Triton's kernels), kept under their caller's key
  // (DESIGN.md: other compilers' artifacts are artifacts too). Their bytes are opaque here; they
  // go through the same store (checked on every read), remote tiers (signed), single flight and
  // bundles as an op's. Their record has key == input_key and no manifest.

  // The artifact key of a caller's key text for artifacts of `kind`; `components` (may be null)
  // gets what it was made of, for the record (`kiln cache show`: a key of printable text under
  // 160 bytes is shown as it is).
  static Hash128 external_key(std::string_view kind, std::string_view caller_key, std::string* components = nullptr);
  // The local store's copy (mapped: a hit copies nothing), else a remote tier's (then stored
  // here too); nullopt on a miss. `source` (may be null) says which.
  Result<std::optional<cache::MappedArtifact>> find_external(const Hash128& key, CacheOutcome* source = nullptr);
  // find_external, and on a miss the single flight of a compile: waits while another process
  // of this node or another node makes `key` (its lock, its lease), looking again after each
  // wait. Still missing, `claim` holds the key for the caller to make it and pass to
  // store_external (or drop: the next waiter then makes it). `what` names it in messages.
  Result<std::optional<cache::MappedArtifact>> find_or_claim_external(const Hash128& key, const std::string& what, Claim& claim,
                                                                      CacheOutcome* source = nullptr);
  // Stores `bytes` as `record` says (its key, kind, op as a label, target, toolchain, compile
  // time), then publishes it to the writable tiers; `claim` goes once it is stored here (the
  // lock) and uploaded (the lease). keep_first: when the key is already stored, that artifact
  // stays and is returned (first writer wins), and nothing is published. Stored uncompressed:
  // a hit then maps it and copies nothing (a 700 KB Triton matmul group: ~0.4 ms less a hit).
  // `compiled`: what is stored is what a compile made (counted as one, with its wall and CPU
  // time); false for what merely accompanies one (Triton's record of a compile's arguments).
  Result<cache::MappedArtifact> store_external(cache::ArtifactRecord record, std::string bytes, std::unique_ptr<Claim> claim,
                                               bool keep_first, bool compiled = true);
  // A hit on an external artifact from this node's disk, counted with the compile time it saved
  // (also for the hits the API serves from a group's stamped folder, which read no blob).
  void count_disk_hit(cache::CompileCost saved);

  // ---- Compiles another program runs that kiln keys like an op's (kiln cc: a compiler launched
  // on one source): an input key over what is known before compiling, a manifest of the headers
  // the compile read, and an artifact under the key the two make (builders/manifest_artifacts.cpp).
  // How that program's headers are labeled, checked and found is the caller's (`headers`).
  //
  // The artifact `input` leads to with the headers as they are now: the local store's, else a
  // remote tier's (its manifest checked by `headers` before any header is read, the artifact
  // checked to be of `kind`, from `input` with those headers), then kept here. On a miss, the
  // single flight of one compile per input key, as an op's: `claim` then holds the key for the
  // caller, who compiles and calls store_through_manifest (or drops the claim).
  Result<std::optional<cache::Artifact>> find_or_claim_through_manifest(const KeyParts& input, const ManifestHeaders& headers,
                                                                        const std::string& kind, Claim& claim,
                                                                        CacheOutcome* source = nullptr);
  // The local lookup alone (no lock, no tier): what a hit in a fresh process costs.
  Result<std::optional<cache::Artifact>> find_through_manifest_here(const KeyParts& input, const ManifestHeaders& headers,
                                                                    CacheOutcome* source = nullptr);
  // Stores a compile's result under artifact_key(input, headers) with its manifest, counts the
  // compile, publishes both to the writable tiers and then lets `claim` go.
  Status store_through_manifest(cache::ArtifactRecord record, const KeyParts& input, const std::vector<ManifestEntry>& headers,
                                std::string_view bytes, std::unique_ptr<Claim> claim);
  // Counts `name` in the store's counters (`kiln cache stats`), when there is a store.
  void count(const std::string& name, int64_t delta = 1);

  Result<OpSpec> find_spec(const std::string& op) const;
  // The accelerator that runs a target: the chosen one when it matches, else by name.
  Result<runtime::Accelerator*> accelerator_for(const Target& target);
  // Every <op>.toml in the spec folders (first folder wins for a name), sorted by op name.
  std::vector<std::string> spec_files() const;

  runtime::Accelerator& accelerator() { return *m_accelerator; }
  // Null when the cache could not be opened (ops then compile into memory).
  cache::Store* store() { return m_store.get(); }
  // The remote tiers, made on first use (they read credential files); null when none are
  // configured, or when they could not be set up (said once on stderr).
  cache::RemoteTiers* remote();
  const cache::Settings& settings() const { return m_settings; }
  // Compiles run by this Ops (for tests and statistics).
  uint64_t compile_count() const { return m_compiles.load(); }
  // Blocks until background work (precompiled headers being built) is done and stored; the
  // destructor does the same.
  void wait_background();
  const std::vector<std::string>& spec_dirs() const { return m_spec_dirs; }

  static std::string bundled_spec_dir();
  // $KILN_SPEC_PATH's folders (':'-separated), else the bundled specs.
  static std::vector<std::string> default_spec_dirs();

 private:
  Ops() = default;
  Result<std::shared_ptr<LoadedOp>> load(const std::string& op, const Target& target);
  Result<std::shared_ptr<LoadedOp>> load_spec(OpSpec spec, const Target& target);
  // The artifact key the stored manifest of `input` leads to with the headers as they are
  // now; nullopt without a cache, a manifest, or when a header it names is gone.
  std::optional<Hash128> artifact_key_from_manifest(const OpSpec& spec, const KeyParts& input);
  // Fills `out` from the cache (an artifact or a cached failure); false on a miss.
  bool lookup(const OpSpec& spec, const KeyParts& input, BuildOutcome& out);
  // The same from the remote tiers: the manifest of `input`, the artifact key from the local
  // headers, then the artifact, checked and stored locally. False on a miss.
  bool remote_lookup(const OpSpec& spec, const KeyParts& input, BuildOutcome& out, cache::RemoteTiers& remote);
  // An artifact or a cached failure into `out`; false when its metadata does not decode.
  bool fill_outcome(cache::Artifact& artifact, BuildOutcome& out);
  // One compile per key (DESIGN.md, step 5), for ops and external artifacts alike: waits while
  // another process of this node holds `key`'s lock, then looks (`look`), then the remote tiers
  // (`look_remote`) and, while another node holds its lease, waits and looks again. True when
  // one of the looks found it; otherwise `claim` holds what could be taken (nothing, when no
  // cache or a wait timed out: then make it anyway). `what` names it in messages ("op gelu").
  bool single_flight(const Hash128& key, const std::string& what, const std::function<bool()>& look,
                     const std::function<bool(cache::RemoteTiers&)>& look_remote, Claim& claim);
  // Waits while another node compiles `key` (its lease), calling `look_remote` for its result;
  // true when it arrived. Otherwise `lease` holds ours, or nothing (no lease tier, no answer,
  // or waited too long): compile.
  bool wait_for_cluster(const Hash128& key, const std::string& what, const std::function<bool(cache::RemoteTiers&)>& look_remote,
                        cache::RemoteTiers& remote, std::unique_ptr<cache::RemoteTiers::Lease>& lease);
  // An external artifact in the local store, counted as a disk hit.
  Result<std::optional<cache::MappedArtifact>> local_external(const Hash128& key, CacheOutcome* source);
  // An external artifact from the remote tiers, checked and stored here; nullopt on a miss.
  std::optional<cache::MappedArtifact> remote_lookup_external(const Hash128& key, cache::RemoteTiers& remote);
  // Queues the stored artifact and its manifest (none for an external one: key == input key)
  // for the writable tiers; `lease` is released once they are up.
  void publish(const Hash128& key, const Hash128& input_key, std::unique_ptr<cache::RemoteTiers::Lease> lease);
  // Prints `message` the first time a warning of this `kind` comes up in this Ops.
  void warn_once(const std::string& kind, const std::string& message);
  // A hit from `tier` (kHitsDisk, kHitsRemote), with what the compile it spared cost.
  void count_hit(cache::Counter tier, const cache::ArtifactRecord& record);
  // A compile that made an artifact: its wall and CPU time (cache/store.h: both, named so).
  void count_compile(double wall_ms, double cpu_ms);
  // The remote tiers' figures so far, into the store's counters (each remote call ends with it,
  // so a process that is killed loses none that finished).
  void take_remote_counters();

  // What build() knows before it looks anything up.
  struct Inputs {
    BuildRequest request;
    bool nvrtc = false;
    bool hiprtc = false;
    std::string identity;
    KeyParts key;
    // A host library's CUDA sources that nvcc compiles (builders/nvcc_route.cpp), by index;
    // `identity` then names nvcc too, and clang_identity is the Clang toolchain's alone.
    std::vector<size_t> nvcc_sources;
    std::optional<jit::Nvcc> nvcc;
    std::string clang_identity;
  };
  // `cuda_route` ("nvrtc" or "clang"), when not empty, replaces the route "auto" chose.
  Result<Inputs> inputs_for(const OpSpec& spec, const Target& target, const std::string& cuda_route = "");
  // build() of what inputs_for made (for a cuda target: through the route it names).
  Result<BuildOutcome> build_route(const OpSpec& spec, const Target& target, Inputs in);
  // Where the fact that a route failed for some inputs is kept (the store's manifests, under a
  // key derived from the failed route's input key), and this process's memory of it.
  // A host library with CUDA sources (nvcc_route.cpp): Clang's CUDA path, and for each .cu
  // source it refuses, the toolkit's nvcc, as the last resort; a source Clang refused is
  // remembered (failed_route_note of clang_unit_key), so the next build goes straight to nvcc.
  Result<BuildOutcome> build_cuda_library(const OpSpec& spec, const Target& target, Inputs first);
  // `in` with sources `nvcc_sources` compiled by `nvcc`: its identity and key name nvcc.
  static void route_through_nvcc(Inputs& in, std::vector<size_t> nvcc_sources, const jit::Nvcc& nvcc);
  // What decides whether Clang compiles source `index` of a library: the toolchain, the CUDA
  // options and the source (not the library's other sources).
  static Hash128 clang_unit_key(const Inputs& in, size_t index);
  static Hash128 failed_route_note(const Hash128& input_key);
  bool route_failed_before(const Hash128& input_key);
  void remember_failed_route(const Hash128& input_key, const std::string& why);

  struct Slot {
    std::mutex mutex;  // held by the one thread that builds; others wait on it
    bool done = false;
    std::shared_ptr<LoadedOp> op;
    Status error;  // what the build said when it failed; waiters return it too
  };

  std::vector<std::string> m_spec_dirs;
  cache::Settings m_settings;
  std::unique_ptr<cache::Store> m_store;
  std::vector<cache::TierConfig> m_tier_configs;
  std::once_flag m_remote_once;
  std::unique_ptr<cache::RemoteTiers> m_remote;
  std::chrono::milliseconds m_remote_wait{300000};
  std::chrono::milliseconds m_lock_timeout{300000};
  std::unique_ptr<PrecompiledHeaders> m_pchs;  // after m_store: its background builds use it
  std::unique_ptr<runtime::DerivedCodeCache> m_derived;  // device binaries in m_store (OpenCL)
  runtime::Accelerator* m_accelerator = nullptr;
  std::mutex m_mutex;
  std::unordered_map<std::string, std::shared_ptr<Slot>> m_loaded;  // "op@target"
  std::atomic<uint64_t> m_compiles{0};
  std::mutex m_warn_mutex;
  std::set<std::string> m_warned;
  std::mutex m_routes_mutex;
  std::set<Hash128> m_failed_routes;  // input keys whose compile failed where another route did not
};

}  // namespace kiln::builders
