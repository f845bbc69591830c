// OpBuilder: an OpSpec and a Target -> a BuildRequest (source texts, normalised options,
// the toolchain to use, the kernels the artifact will hold), and the cache keys for it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "builders/spec.h"
#include "builders/target.h"
#include "jit/toolchain.h"
#include "runtime/accelerator.h"
#include "support/hash.h"

namespace kiln::builders {

// What a target's artifacts are: "host-so" for cpu, "cuda-module" for cuda, "hsaco" for hip,
// "opencl-program" for opencl, "spirv" for spirv.
std::string artifact_kind_for(const Target& target);

// Ok when the spec can be built for the target; otherwise says why not, before compiling.
Status is_compatible(const OpSpec& spec, const Target& target);

struct BuildRequest {
  const OpSpec* spec = nullptr;
  Target target;  // what the artifact is for: the one asked, or a cpu level its flags raised
  std::vector<std::string> notes;  // for the person who asked (a raised level)
  jit::CompileRequest compile;                    // sources include the generated entry TU
  std::string cuda_toolchain;                     // cuda targets: "nvrtc" or "clang" (cuda_toolchain_for)
  bool cuda_route_auto = false;                   // cuda targets: chosen by "auto" (another may be tried)
  std::vector<runtime::KernelSignature> kernels;  // entries, then the check's reference
};

// Reads the spec's sources (the bytes compiled are the bytes hashed).
Result<BuildRequest> make_build_request(const OpSpec& spec, const Target& asked);

// The C++ of the generated translation unit that gives each entry point (and the check's
// reference function) an extern "C" kiln_entry_<name>(block, args) wrapper.
std::string generate_cpu_entry_source(const OpSpec& spec);

// Where kiln's device headers (kiln/cpu_kernel.h) are: $KILN_CPU_INCLUDE_DIR or the tree.
std::string cpu_device_include_dir();
// Where kiln/cuda_prelude.h (the Clang CUDA path's stand-in for the CUDA headers) is.
std::string cuda_device_include_dir();

// Where kiln/hip_prelude.h and kiln's <cuda_bf16.h> for AMD GPUs are.
std::string hip_device_include_dir();

// Which toolchain compiles hip targets: $KILN_HIP_TOOLCHAIN ("clang", the default, or "hiprtc").
std::string hip_toolchain_for();

// Which toolchain compiles an op's CUDA sources for a cuda target, "nvrtc" or "clang":
// $KILN_CUDA_TOOLCHAIN ("auto", "nvrtc" or "clang") when set, else the spec's [cuda] toolchain.
// "auto" (the default) is Clang's NVPTX path for sources that include a header of CCCL (CUB,
// Thrust, libcu++: cub/, thrust/, cuda/, nv/) or of cooperative groups, where this node has the
// Clang toolchain, and NVRTC otherwise. NVRTC parses those headers for about a second in every
// compile and cannot keep the parse across processes; Clang keeps it as a PCH artifact.
std::string cuda_toolchain_for(const OpSpec& spec, const std::vector<jit::SourceFile>& sources);

// Points a cuda target's request at `toolchain` ("nvrtc" or "clang"): Clang compiles against the
// toolkit's headers when a source includes a header in <...>, else against kiln's prelude.
void use_cuda_toolchain(BuildRequest& request, const std::string& toolchain);

// True when the spec's [cuda] toolchain and $KILN_CUDA_TOOLCHAIN leave the choice to "auto".
bool cuda_route_is_auto(const OpSpec& spec);

// True for a header in <...> that "auto" compiles through Clang (see cuda_toolchain_for).
bool is_heavy_cuda_header(std::string_view header);

// Keys. The input key covers everything known before compiling: toolchain identity, target,
// language, options, entry points and every source (paths relative to the spec's folder).
// The artifact key adds the content of every header the compile read, from the manifest.
struct KeyParts {
  Hash128 key;
  std::vector<std::pair<std::string, std::string>> components;  // for `kiln cache explain`
};
// `with_components` also fills KeyParts::components (needed to store or explain, not to look up).
KeyParts input_key(const BuildRequest& request, const std::string& toolchain_identity, bool with_components = false);

// Environment variables that can change what the compiler reads or emits. Those set enter
// the input key; every other variable is documented (docs/CACHE.md, "What is in a key") as not affecting artifacts.
const std::vector<std::string>& environment_in_key();

// A manifest lists the headers a compile read, one "label\thash" line each. A label is
// "spec:<path relative to the spec's folder>", "kiln:<path relative to kiln's device
// headers>", or an absolute path (system headers), so checkouts in different folders agree.
struct ManifestEntry {
  std::string label;
  Hash128 hash;
};
std::string label_for(const std::string& abs_path, const OpSpec& spec);
std::string path_for(const std::string& label, const OpSpec& spec);
std::string encode_manifest(const std::vector<ManifestEntry>& entries);
// Malformed text is kDataLoss (the store handed back something that is not a manifest), and so
// is text past the bounds checked before anything is decoded (16 MiB; a label past PATH_MAX).
Result<std::vector<ManifestEntry>> decode_manifest(std::string_view text);

// The folders a compile of `spec` may read headers from: the spec's folder, its sources' folders,
// its include folders (include_dirs, and -I, -isystem, -iquote, -idirafter among its flags and a
// library's CUDA flags), kiln's device headers, the compiler's own (Clang's resource folder,
// /usr/include, /usr/local/include, GCC's under /usr/lib/gcc and /usr/lib64/gcc), the CUDA
// toolkit's (cuda_toolkit_roots(), also with symlinks resolved), and those CPATH,
// C_INCLUDE_PATH and CPLUS_INCLUDE_PATH list. Absolute, normalised, sorted.
std::vector<std::string> header_roots(const OpSpec& spec);
// A manifest from elsewhere (a remote tier), checked before any header it names is read: each
// label a plain path of its kind (no empty, "." or ".." part), inside header_roots(spec), and,
// where it exists, a regular file of at most 64 MiB (never /dev/zero, a FIFO or a folder).
// kDataLoss naming the label and why. A header that is not here passes: rehash_manifest then
// says it is gone (a miss). A stat per header: the hit path's own manifests (written by this
// store's compiles) are not checked again.
Status check_manifest_headers(const std::vector<ManifestEntry>& manifest, const OpSpec& spec);

// The same check for any compile's labels: a label starting with one of `relative_prefixes` is
// a plain relative path after it, any other a plain absolute path; `path_of` maps it to the file
// here, which must lie within one of `roots`. `reader` names the compile in messages.
Status check_manifest_labels(const std::vector<ManifestEntry>& manifest, const std::vector<std::string_view>& relative_prefixes,
                             const std::vector<std::string>& roots, const std::function<std::string(const std::string&)>& path_of,
                             const std::string& reader);

// Hashes the current content of each header the manifest names; nullopt when one is gone.
std::optional<std::vector<ManifestEntry>> rehash_manifest(const std::vector<ManifestEntry>& manifest, const OpSpec& spec);
std::optional<std::vector<ManifestEntry>> rehash_manifest(const std::vector<ManifestEntry>& manifest,
                                                          const std::function<std::string(const std::string&)>& path_of);
// From a compile's dependency list (sources excluded), with the files' current hashes.
Result<std::vector<ManifestEntry>> manifest_from_dependencies(const std::vector<std::string>& deps,
                                                              const BuildRequest& request);
KeyParts artifact_key(const KeyParts& input, const std::vector<ManifestEntry>& headers);
// The union of two manifests, sorted by label (a label in both keeps the first's hash).
std::vector<ManifestEntry> merge_manifests(std::vector<ManifestEntry> a, const std::vector<ManifestEntry>& b);

// Diagnostics of a failed compile, as stored in the cache ("compile-error" artifacts).
std::string encode_diagnostics(const std::vector<jit::Diagnostic>& diagnostics);
Result<std::vector<jit::Diagnostic>> decode_diagnostics(std::string_view text);

// Kernel signatures as stored with an artifact: "name:8,8,8,8;name2:..."
std::string encode_kernels(const std::vector<runtime::KernelSignature>& kernels);
Result<std::vector<runtime::KernelSignature>> decode_kernels(std::string_view text);

}  // namespace kiln::builders
