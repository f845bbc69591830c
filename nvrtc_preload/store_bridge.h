// The C interface between libkiln_nvrtc.so (preloaded into every process that asks, so kept
// small: NVRTC's entry points and nothing of kiln's store) and libkiln_nvrtc_store.so, which
// the first nvrtcCompileProgram loads beside it: kiln's store, tiers and single flight through
// the C++ API (libkiln.so). A process that never compiles never maps libkiln.so; one built
// against libkiln.so already (kiln's Python package) shares it.
//
// Thread-safety: every call may come from any thread; the store side serialises them.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct KilnNvrtcFile {
  const char* name;
  const char* data;
  size_t size;
};
// Hands a file (or, by name "source", where a hit came from: "disk", "remote"; by name "error",
// why the store could not be used) to the caller.
typedef void (*KilnNvrtcPut)(void* context, const char* name, const char* data, size_t size);

// Looks up the program whose input key's text is `key` (program_key.h). 0: a hit, its files
// given to `put`. 1: a miss; `*token` holds the key (one compile per key across processes and
// nodes) until kiln_nvrtc_store_keep or kiln_nvrtc_store_drop. -1: no store here (`put` "error").
typedef int (*KilnNvrtcLookup)(const char* key, size_t key_size, KilnNvrtcPut put, void* context, void** token);
// Keeps a compile's files under the key with what it looked at (`probes`, each with its stamp
// when the compile looked: program_key.h), then ends the token. Not kept when a stamp is not what
// it is now or is newer than `started_ns` (CLOCK_REALTIME_COARSE when the compile began): the
// file changed while it compiled, and what is hashed now is not what it read. 0 when kept; -1
// with `put` "error" saying why otherwise.
typedef int (*KilnNvrtcKeep)(void* token, const char* const* probes, const char* const* stamps, size_t probe_count,
                             int64_t started_ns, const KilnNvrtcFile* files, size_t file_count, double compile_ms,
                             const char* label, const char* toolchain, KilnNvrtcPut put, void* context);
// Ends a token without keeping anything (the compile failed: the next asker compiles).
typedef void (*KilnNvrtcDrop)(void* token);
// Adds one to the store's counter `name` (`kiln cache stats`).
typedef void (*KilnNvrtcCount)(const char* name);

}  // extern "C"
