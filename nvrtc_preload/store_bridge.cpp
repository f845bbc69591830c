// libkiln_nvrtc_store.so: store_bridge.h over kiln's C++ API.
//
// The manifests (program_key.h) are kept as their own small group, kind nvrtc-manifest, under
// the input key; the compile's files under the artifact key, kind nvrtc-program. The single
// flight of a first compile is the manifest's claim (no node knows the artifact key before one
// compile has run); once a manifest is known, it is the newest manifest's program's claim.
#include <kiln/kiln.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "nvrtc_preload/program_key.h"
#include "nvrtc_preload/store_bridge.h"
#include "support/file_memo.h"
#include "support/file_util.h"

namespace kiln::nvrtc_preload {
namespace {

constexpr const char* k_manifest_kind = "nvrtc-manifest";
constexpr const char* k_program_kind = "nvrtc-program";
constexpr uint64_t k_max_file_bytes = uint64_t{1} << 30;

std::mutex g_mutex;  // guards the Context's creation (a Context is itself thread-safe)
std::unique_ptr<kiln::Context> g_context;
std::string g_context_error;

kiln::Context* context() {
  std::lock_guard lock(g_mutex);
  if (!g_context && g_context_error.empty()) {
    try {
      kiln::Options options;
      options.accelerator = "none";
      g_context = std::make_unique<kiln::Context>(options);
      if (g_context->cache_dir().empty()) g_context_error = "kiln's cache could not be opened";
      // The headers' hashes remembered in the cache's memo file (support/file_memo.h), as kiln's
      // own lookups remember theirs: a later process stats them instead of reading them.
      else (void)FileMemo::instance().attach(g_context->cache_dir() + "/file-memo");
    } catch (const std::exception& e) {
      g_context_error = e.what();
    }
  }
  return g_context_error.empty() ? g_context.get() : nullptr;
}

void put_error(KilnNvrtcPut put, void* ctx, const std::string& message) { put(ctx, "error", message.data(), message.size()); }

struct Token {
  std::string input_key;
  // The manifests the input key had (empty: none yet, and `claim` is the input key's: the first
  // compile anywhere), and the artifact key `claim` holds when it is a program's.
  std::vector<std::vector<std::string>> manifests;
  bool first = false;
  std::string artifact_key;
  std::unique_ptr<kiln::Claim> claim;
};

std::vector<Probe> probes_of(const std::vector<std::string>& paths) {
  std::vector<Probe> probes;
  for (auto& p : paths) probes.push_back({p, probe_state(p)});
  return probes;
}

// The group's files read (they lie in the store's folder); nullopt when one cannot be read.
std::optional<std::map<std::string, std::string>> read_group(const kiln::FileGroup& group) {
  std::map<std::string, std::string> files;
  for (auto& [name, path] : group.files) {
    auto bytes = read_regular_file(path, k_max_file_bytes);
    if (!bytes.ok()) return std::nullopt;
    files[name] = std::move(*bytes);
  }
  return files;
}

// A program's group handed to the caller, when it is one the caller can read back.
bool serve(const kiln::FileGroup& group, KilnNvrtcPut put, void* ctx) {
  auto files = read_group(group);
  if (!files || !decode_result(*files)) return false;
  for (auto& [name, bytes] : *files) put(ctx, name.c_str(), bytes.data(), bytes.size());
  put(ctx, "source", group.cache_source.data(), group.cache_source.size());
  return true;
}

int lookup(const char* key_data, size_t key_size, KilnNvrtcPut put, void* ctx, void** token_out) {
  kiln::Context* c = context();
  if (!c) {
    put_error(put, ctx, g_context_error);  // set once, before context() returned null
    return -1;
  }
  auto token = std::make_unique<Token>();
  token->input_key.assign(key_data, key_size);
  try {
    auto manifest = c->find_files(k_manifest_kind, token->input_key);
    if (!manifest) {
      kiln::FilesOrClaim got = c->find_or_claim_files(k_manifest_kind, token->input_key);
      if (!got.found) {  // the first compile anywhere: this process makes it
        token->first = true;
        token->claim = std::move(got.claim);
        *token_out = token.release();
        return 1;
      }
      manifest = std::move(got.found);
    }
    auto files = read_group(*manifest);
    auto lists = files ? decode_manifests((*files)["manifests"]) : std::nullopt;
    if (!lists || lists->empty()) {
      put_error(put, ctx, "its stored manifest could not be read: compiling, and writing it again");
      token->first = true;  // kept as if first (the manifest written over), without a claim
      *token_out = token.release();
      return 1;
    }
    token->manifests = std::move(*lists);
    // Newest first: the headers as they are now are most likely the last compile's.
    for (auto it = token->manifests.rbegin(); it != token->manifests.rend(); ++it) {
      std::string key = artifact_key_text(token->input_key, probes_of(*it));
      (void)FileMemo::instance().save();
      if (it == token->manifests.rbegin()) token->artifact_key = key;
      if (auto program = c->find_files(k_program_kind, key); program && serve(*program, put, ctx)) return 0;
    }
    // Missing for every manifest: the single flight of the newest's key (where every node has
    // the same headers, what each of them is about to compile).
    kiln::FilesOrClaim got = c->find_or_claim_files(k_program_kind, token->artifact_key);
    if (got.found && serve(*got.found, put, ctx)) return 0;
    token->claim = std::move(got.claim);  // none when found but unreadable: kept over it
    *token_out = token.release();
    return 1;
  } catch (const std::exception& e) {
    put_error(put, ctx, e.what());
    return -1;
  }
}

int keep(void* raw, const char* const* probes, const char* const* stamps, size_t count, int64_t started_ns,
         const KilnNvrtcFile* files, size_t file_count, double compile_ms, const char* label, const char* toolchain,
         KilnNvrtcPut put, void* ctx) {
  std::unique_ptr<Token> token(static_cast<Token*>(raw));
  kiln::Context* c = context();
  if (!c) return -1;
  auto refuse = [&](const std::string& why) {
    if (token->claim) token->claim->release();
    put_error(put, ctx, why);
    return -1;
  };
  std::vector<std::string> read(probes, probes + count);
  if (!paths_fit(read)) return refuse("it looked at more paths than a manifest holds (" + std::to_string(read.size()) + ")");
  // Each hashed now, then checked to be what the compile found: a file written meanwhile (or in
  // the same clock tick as its start, which a stamp cannot tell apart) is not kept.
  std::vector<Probe> now = probes_of(read);
  (void)FileMemo::instance().save();
  for (size_t i = 0; i < count; ++i) {
    std::string stamp = stamp_now(read[i]);
    if (stamp != stamps[i]) return refuse(read[i] + " changed while it compiled");
    if (stamp_newer_than(stamp, started_ns)) return refuse(read[i] + " was written as it compiled");
  }
  std::string artifact_key = artifact_key_text(token->input_key, now);
  std::vector<std::pair<std::string, std::string>> group;
  for (size_t i = 0; i < file_count; ++i) group.emplace_back(files[i].name, std::string(files[i].data, files[i].size));
  kiln::ArtifactInfo info;
  info.label = label;
  info.toolchain = toolchain;
  info.target = "nvrtc";
  info.compile_ms = compile_ms;
  info.compile_cpu_ms = compile_ms;  // NVRTC compiles on its caller's thread
  kiln::ArtifactInfo manifest_info = info;
  manifest_info.compiled = false;
  manifest_info.compile_ms = manifest_info.compile_cpu_ms = 0;  // a hit on it saves no compile of its own
  try {
    if (token->first) {
      // The program, then the manifest that leads to it (a waiter woken by the manifest's claim
      // then finds the program).
      c->store_files(k_program_kind, artifact_key, group, info);
      c->store_files(k_manifest_kind, token->input_key, {{"manifests", encode_manifests({read})}}, manifest_info, token->claim.get());
      return 0;
    }
    bool claimed = artifact_key == token->artifact_key;
    c->store_files(k_program_kind, artifact_key, group, info, claimed ? token->claim.get() : nullptr);
    if (!claimed && token->claim) token->claim->release();
    // A compile that looked at other paths than any manifest lists (a header now includes
    // another): its list joins them, the oldest leaving past k_max_manifest_lists.
    if (std::find(token->manifests.begin(), token->manifests.end(), read) == token->manifests.end()) {
      token->manifests.push_back(read);
      if (token->manifests.size() > k_max_manifest_lists) token->manifests.erase(token->manifests.begin());
      c->store_files(k_manifest_kind, token->input_key, {{"manifests", encode_manifests(token->manifests)}}, manifest_info);
    }
    return 0;
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
}

void drop(void* raw) {
  std::unique_ptr<Token> token(static_cast<Token*>(raw));
  if (token->claim) token->claim->release();
}

void count(const char* name) {
  if (kiln::Context* c = context()) {
    try {
      c->count(name);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace
}  // namespace kiln::nvrtc_preload

extern "C" __attribute__((visibility("default"))) int kiln_nvrtc_store_lookup(const char* key, size_t key_size, KilnNvrtcPut put,
                                                                             void* context, void** token) {
  return kiln::nvrtc_preload::lookup(key, key_size, put, context, token);
}
extern "C" __attribute__((visibility("default"))) int kiln_nvrtc_store_keep(void* token, const char* const* probes,
                                                                           const char* const* stamps, size_t count,
                                                                           int64_t started_ns, const KilnNvrtcFile* files,
                                                                           size_t file_count, double compile_ms, const char* label,
                                                                           const char* toolchain, KilnNvrtcPut put, void* context) {
  return kiln::nvrtc_preload::keep(token, probes, stamps, count, started_ns, files, file_count, compile_ms, label, toolchain, put,
                                   context);
}
extern "C" __attribute__((visibility("default"))) void kiln_nvrtc_store_drop(void* token) { kiln::nvrtc_preload::drop(token); }
extern "C" __attribute__((visibility("default"))) void kiln_nvrtc_store_count(const char* name) { kiln::nvrtc_preload::count(name); }
