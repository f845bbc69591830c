// What libkiln_nvrtc.so keys an NVRTC program by and what it keeps of a compile: pure functions
// over bytes, apart from the loader tricks (real_nvrtc.h) and the NVRTC entry points
// (nvrtc_entry_points.cpp), so that a unit test and a fuzzer reach them without a CUDA toolkit.
//
// The key of a compile is made in two steps, as ccache's direct mode makes one:
// - the input key, over what the caller handed NVRTC: the real NVRTC (its ELF build id and
//   version), the program's name and source, the headers given to nvrtcCreateProgram (names and
//   contents), the options in order, the name expressions in order;
// - the manifest: every path the compile looked at on disk (NVRTC's own stat/access probes and
//   opens, recorded as it ran, as given: a relative path is relative to the working folder then
//   and now), every environment variable it read ("env:NAME") and, when it asked for it, the
//   working folder ("cwd:": -G and -lineinfo write it into the output), each with what was there:
//   a regular file's content hash, "absent", "dir", a variable's value. The artifact's key is the
//   input key with the manifest as it is on this node now, so a header that changed, or one that
//   appeared earlier in the include path (a probe that found nothing then), is a miss, not a
//   stale hit. An input key keeps up to k_max_manifest_lists manifests (a header that now
//   includes another makes a second), newest last.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct stat;

namespace kiln::nvrtc_preload {

// Empty when NVRTC's option is one kiln knows to read no file beyond the include search (which
// the manifest sees) and to write none; else why the compile passes through uncached, counted
// as `nvrtc|not_cached|<why>`. Precompiled headers (--pch, --create-pch, --use-pch) read and write
// files of their own; --time and --fdevice-time-trace write one; ptxas's --apply-controls reads
// one; --split-compile runs the compile on threads whose reads are not recorded.
std::string uncacheable_option(std::string_view option);
// Empty unless the source or a header handed over names the time of the compile (__DATE__,
// __TIME__, __TIMESTAMP__): then a stored result would carry another day's.
std::string uncacheable_text(std::string_view text);
// The environment NVRTC reads when it loads, before any compile the manifest records: every
// variable named NVRTC*, NVVM*, NV_NVVM*, EDG_*, LLVM_OVERRIDE* or CAN_FINALIZE*, "NAME=value"
// sorted (NV_NVVM_VERSION=nvvm-latest changes the PTX).
std::vector<std::string> environment_in_key();

struct ProgramInput {
  std::string nvrtc_identity;  // "<build id> <major>.<minor>"
  std::string name;            // nvrtcCreateProgram's name (NVRTC puts it in diagnostics)
  std::string source;
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, content)
  std::vector<std::string> options;
  std::vector<std::string> name_expressions;
  std::vector<std::string> environment;  // environment_in_key()
};

// The input key's text (kiln hashes it: Context::find_files takes any text). Each field is
// length-prefixed, so no two inputs make the same text.
std::string input_key_text(const ProgramInput& input);

// A path the compile looked at, and what it found there.
struct Probe {
  std::string path;
  std::string state;  // "file:<hash hex>", "absent", "dir", "special", "value:<v>", "unset"
};
// Under /dev, /proc or /sys: what such a file holds is not fixed by a name.
bool special_path(std::string_view path);
// What is at `probe` (a path, "env:NAME" or "cwd:") now: its stamp, which a change to it in the
// same second still changes (a file's device, inode, size, mtime and ctime: "file:d:i:s:m:c";
// "dir", "absent", "special": a special path or anything not a file or a folder; an
// environment variable's "value:<v>" or "unset"; the working folder's "value:<path>"), and its
// state for the key (a file's content hash instead of its stamp).
std::string stamp_now(const std::string& probe);
std::string stamp_of(const struct ::stat& st, std::string_view path);
std::string probe_state(const std::string& probe);
// A file stamp's mtime or ctime at or after `since_ns`: written while the compile ran.
bool stamp_newer_than(std::string_view stamp, int64_t since_ns);
// The artifact key's text: the input key's text's hash and each probe (sorted by path).
std::string artifact_key_text(std::string_view input_key_text, const std::vector<Probe>& probes);

// One manifest's paths, and the list of manifests an input key keeps (newest last). decode:
// nullopt when the bytes are not such a list (truncated, a length past what is left, a list over
// 64K paths or 1 MiB, more than k_max_manifest_lists lists); paths_fit: what encode writes for
// them decodes (else the compile is not kept: a manifest that cannot be read back would make a
// miss of every lookup).
inline constexpr size_t k_max_manifest_lists = 8;
std::string encode_paths(const std::vector<std::string>& paths);
std::optional<std::vector<std::string>> decode_paths(std::string_view bytes);
bool paths_fit(const std::vector<std::string>& paths);
std::string encode_manifests(const std::vector<std::vector<std::string>>& lists);
std::optional<std::vector<std::vector<std::string>>> decode_manifests(std::string_view bytes);

// What a compile left for its caller to ask: every getter's return code and bytes.
struct CompileResult {
  int compile_code = 0;
  // By output ("ptx", "cubin", "ltoir", "optixir", "tileir", "log"): the Size call's return code
  // and, when it succeeded, the bytes (the size asked is bytes.size()).
  std::map<std::string, std::pair<int, std::string>> outputs;
  // name expression -> (nvrtcGetLoweredName's return code, the lowered name)
  std::map<std::string, std::pair<int, std::string>> lowered_names;
  int pch_create_status = 0;
  int pch_heap_required_code = 0;
  uint64_t pch_heap_required = 0;
};
// As files of one stored group (Context::store_files), and back. decode: nullopt when a file is
// missing or malformed (a damaged or foreign group is a miss, never a crash).
std::vector<std::pair<std::string, std::string>> encode_result(const CompileResult& result);
std::optional<CompileResult> decode_result(const std::map<std::string, std::string>& files);

}  // namespace kiln::nvrtc_preload
