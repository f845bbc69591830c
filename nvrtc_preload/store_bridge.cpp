// libkiln_nvrtc_store.so: store_bridge.h over kiln's C++ API.
//
// The manifest (program_key.h) is kept as its own small group, kind nvrtc-manifest, under the
// input key; the compile's files under the artifact key, kind nvrtc-program. The single flight
// of a first compile is the manifest's claim (no node knows the artifact key before one compile
// has run); once a manifest is known, it is the program's claim.
#include <kiln/kiln.h>

#include <map>
#include <memory>
#include <mutex>

#include "nvrtc_preload/program_key.h"
#include "nvrtc_preload/store_bridge.h"
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
    } catch (const std::exception& e) {
      g_context_error = e.what();
    }
  }
  return g_context_error.empty() ? g_context.get() : nullptr;
}

void put_error(KilnNvrtcPut put, void* ctx, const std::string& message) { put(ctx, "error", message.data(), message.size()); }

struct Token {
  std::string input_key;
  std::string artifact_key;  // empty while the manifest is not known
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
        token->claim = std::move(got.claim);
        *token_out = token.release();
        return 1;
      }
      manifest = std::move(got.found);
    }
    auto files = read_group(*manifest);
    auto paths = files ? decode_paths((*files)["paths"]) : std::nullopt;
    if (!paths) {
      put_error(put, ctx, "the stored manifest could not be read");
      *token_out = token.release();  // compiled again, kept under the key it then makes
      return 1;
    }
    token->artifact_key = artifact_key_text(token->input_key, probes_of(*paths));
    kiln::FilesOrClaim got = c->find_or_claim_files(k_program_kind, token->artifact_key);
    if (got.found) {
      auto program = read_group(*got.found);
      if (program) {
        for (auto& [name, bytes] : *program) put(ctx, name.c_str(), bytes.data(), bytes.size());
        put(ctx, "source", got.found->cache_source.data(), got.found->cache_source.size());
        return 0;
      }
    }
    token->claim = std::move(got.claim);
    *token_out = token.release();
    return 1;
  } catch (const std::exception& e) {
    put_error(put, ctx, e.what());
    return -1;
  }
}

int keep(void* raw, const char* const* paths, size_t path_count, const KilnNvrtcFile* files, size_t file_count,
         double compile_ms, const char* label, const char* toolchain, KilnNvrtcPut put, void* ctx) {
  std::unique_ptr<Token> token(static_cast<Token*>(raw));
  kiln::Context* c = context();
  if (!c) return -1;
  std::vector<std::string> read(paths, paths + path_count);
  std::string artifact_key = artifact_key_text(token->input_key, probes_of(read));
  std::vector<std::pair<std::string, std::string>> group;
  for (size_t i = 0; i < file_count; ++i) group.emplace_back(files[i].name, std::string(files[i].data, files[i].size));
  kiln::ArtifactInfo info;
  info.label = label;
  info.toolchain = toolchain;
  info.target = "nvrtc";
  info.compile_ms = compile_ms;
  info.compile_cpu_ms = compile_ms;  // NVRTC compiles on its caller's thread
  try {
    if (token->artifact_key.empty()) {
      // The first compile: the program, then the manifest that leads to it (a waiter woken by
      // the manifest then finds the program).
      c->store_files(k_program_kind, artifact_key, group, info);
      kiln::ArtifactInfo manifest_info = info;
      manifest_info.compiled = false;
      manifest_info.compile_ms = manifest_info.compile_cpu_ms = 0;  // a hit on it saves no compile of its own
      c->store_files(k_manifest_kind, token->input_key, {{"paths", encode_paths(read)}}, manifest_info, token->claim.get(),
                     /*keep_first=*/true);
    } else {
      // Kept under the key its own reads make; when those differ from the stored manifest's
      // (a header now includes another), lookups here keep missing it: counted, not hidden.
      if (artifact_key != token->artifact_key) c->count("nvrtc|not_cached|kept_under_other_headers_than_the_stored_manifest");
      c->store_files(k_program_kind, artifact_key, group, info, artifact_key == token->artifact_key ? token->claim.get() : nullptr);
    }
    return 0;
  } catch (const std::exception& e) {
    put_error(put, ctx, e.what());
    return -1;
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
extern "C" __attribute__((visibility("default"))) int kiln_nvrtc_store_keep(void* token, const char* const* paths, size_t path_count,
                                                                           const KilnNvrtcFile* files, size_t file_count,
                                                                           double compile_ms, const char* label,
                                                                           const char* toolchain, KilnNvrtcPut put, void* context) {
  return kiln::nvrtc_preload::keep(token, paths, path_count, files, file_count, compile_ms, label, toolchain, put, context);
}
extern "C" __attribute__((visibility("default"))) void kiln_nvrtc_store_drop(void* token) { kiln::nvrtc_preload::drop(token); }
extern "C" __attribute__((visibility("default"))) void kiln_nvrtc_store_count(const char* name) { kiln::nvrtc_preload::count(name); }
