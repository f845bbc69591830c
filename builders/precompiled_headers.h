// Precompiled headers as cache artifacts (DESIGN.md, "Toolchains").
//
// Parsing headers, not generating code, is where compile time goes: a kernel that includes
// <cmath>, <vector> and <immintrin.h> spends ~350 of its ~420 ms in them, and a CUDA kernel
// compiled by Clang against the toolkit's headers 0.5-1.5 s. So the leading #include <...>
// lines of a source (its include prefix) are precompiled once per machine, stored in the
// cache like any artifact (kind "pch"), and used by every later compile whose source starts
// with the same includes and has the same toolchain, target, language, defines and flags.
//
// A PCH is keyed like an op: an input key over those inputs and the prefix text, completed by
// the content of every header it read (its manifest), so a changed system header is a new PCH.
// A compile that uses one adds the PCH's manifest to its own, and its artifact is the same bytes
// with or without it: whether a PCH was at hand never changes a key or an artifact.
//
// PCHs are stored uncompressed and read in place (Store::map): every compile that uses one reads
// all of it, and CUB's (32 MB) costs 67 ms to read and decompress, ~2 ms mapped.
//
// The first compile of a C++ prefix does not wait for its PCH: the PCH is built beside it on
// another thread and stored when done; compiles that need it meanwhile wait for that build
// instead of parsing the headers again. A CUDA compile against the toolkit's headers, or several
// sources that share a prefix, build the PCH first and compile with it. Across processes, a
// lock per PCH key lets one build it.
//
// Across nodes: a PCH this process builds is published to the remote tiers (its blob and its
// manifest, as an op's artifact is), and a PCH missing here is looked for there before it is
// built, so a node's first torch extension or compiled model fetches torch's headers parsed
// instead of parsing them (torch/extension.h's, 173 MB: fetched from loopback Redis in 1.35 s
// at load 8, where a first extension parses torch's headers for 11-16 s here;
// docs/history/2026-11-26-839bce7-torch-compile.md). The fetched blob is checked as any remote artifact is.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>

#include <sys/types.h>
#include <vector>

#include "builders/op_builder.h"
#include "cache/remote.h"
#include "cache/store.h"
#include "jit/toolchain.h"

namespace kiln::builders {

// The include prefix of a source that a PCH can stand for: its leading #include <...> lines
// (blank lines, // and /* */ comments and #pragma once may come between them), one normalised
// "#include <x>\n" each. It ends at the first other line, and before an include of one of the
// op's own headers (found in `own_dirs`): a PCH holds only headers whose paths are the same on
// every node. Includes found in `kiln_dirs` (kiln's device headers, kiln/cpu_kernel.h) are
// passed over: they depend on nothing before them and nothing depends on coming after them.
//
// With `source_dir` (the source's folder), the op's own headers do not end it: one included as
// "x.h" (found in `source_dir`, then `own_dirs`) or as <x.h> from `own_dirs` is kept, as
// `#include "<absolute path>"`, if it has an include guard (has_include_guard): DeepSpeed's CUDA
// sources reach torch's ATen headers through their own (custom_cuda_layers.h). Such a PCH holds
// paths of this node; on a node where they differ, its manifest does not match and it is built.
std::string include_prefix(std::string_view text, const std::vector<std::string>& own_dirs,
                           const std::vector<std::string>& kiln_dirs, const std::string* source_dir = nullptr);

// True when the header `text` opens (past comments) with `#pragma once`, or with `#ifndef X`
// and `#define X`: including it again after a PCH that holds it changes nothing.
bool has_include_guard(std::string_view text);

// False when KILN_PCH=0: no PCH is used or made (a cache to be carried somewhere small).
bool precompiled_headers_enabled();

// What using PCHs added to one compile.
struct PchUse {
  std::vector<ManifestEntry> headers;  // the PCHs' manifests, to add to the compile's
  std::vector<std::shared_ptr<const void>> bytes;  // keeps request.precompiled_headers alive
  size_t used = 0;      // sources compiled with a PCH
  size_t building = 0;  // PCHs started in the background by this compile
};

// The PCH of sources[source]'s include prefix with the request's options, made now and kept
// nowhere (what the background build makes; for benchmarks). kNotFound when the source has no
// prefix a PCH would stand for.
Result<std::string> make_precompiled_header(jit::Toolchain& toolchain, const BuildRequest& request, size_t source);

class PrecompiledHeaders {
 public:
  // `remote` gives the cluster's tiers (null: none), asked only on a local miss or a build.
  explicit PrecompiledHeaders(cache::Store* store, std::function<cache::RemoteTiers*()> remote = {})
      : m_store(store), m_remote(std::move(remote)) {}
  ~PrecompiledHeaders();  // waits for the builds in flight
  PrecompiledHeaders(const PrecompiledHeaders&) = delete;
  PrecompiledHeaders& operator=(const PrecompiledHeaders&) = delete;

  // For each source of `request` that a PCH helps: attaches the stored PCH (or waits for the
  // one being built in this process), else starts building it in the background with the
  // toolchain that `toolchain` returns (asked only then, so the caller may still be loading it;
  // null: nothing is built). `identity` is the toolchain identity in the op's key.
  PchUse prepare(BuildRequest& request, const std::string& identity, const std::function<jit::Toolchain*()>& toolchain);

  // Blocks until every background build has finished (and stored its PCH).
  void wait();

 private:
  struct Slot {
    bool done = false;
    std::shared_ptr<const void> memory;  // holds `bytes`; null when the PCH could not be made
    std::string_view bytes;
    std::vector<ManifestEntry> headers;
    // A background build (see prepare()): its thread, and whether a compile waits for it. Both
    // under m_mutex: the thread yields the cores only while no compile waits, and a compile that
    // starts waiting gives the thread its priority back (priority inheritance).
    pid_t builder = 0;
    int builder_nice = 0;  // the thread's nice value before it yielded
    bool wanted = false;
  };
  // A stored PCH for `key` (an input key): its bytes and manifest; nullopt when there is none;
  // a Slot with null bytes when a failure was stored (then it is not tried again).
  std::optional<Slot> lookup(const KeyParts& key, const OpSpec& spec);
  std::optional<Slot> lookup_here(const KeyParts& key, const OpSpec& spec);
  // Fetches the PCH for `key` from the remote tiers into the store; true when it is there now.
  bool fetch_remote(const KeyParts& key, const OpSpec& spec);
  void publish(const KeyParts& key, const Hash128& artifact);
  // Runs on its own thread; owns a copy of the spec, which may outlive the caller's.
  void build(std::shared_ptr<Slot> slot, std::shared_ptr<const OpSpec> spec, BuildRequest pch_request, KeyParts key,
             std::string identity, jit::Toolchain* toolchain);

  cache::Store* m_store;
  std::function<cache::RemoteTiers*()> m_remote;
  std::mutex m_mutex;
  std::condition_variable m_done;
  std::map<Hash128, std::shared_ptr<Slot>> m_slots;  // by PCH input key: found, built or building
  std::vector<std::thread> m_threads;
  std::counting_semaphore<> m_background{2};  // background builds, two at a time
};

}  // namespace kiln::builders
