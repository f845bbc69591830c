// OpSpec: the declarative description of an op, as parsed from specs/<op>.toml.
//
// Every field keeps where it came from, so later checks (a missing source, an entry point
// the compiler cannot find) can still point at file:line:col.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::builders {

struct SourcePos {
  std::string file;
  uint32_t line = 0, column = 0;
  // "file:line:col" (or just the file when there is no line).
  std::string str() const;
};

// Bad spec input: "file:line:col: message".
Status spec_error(const SourcePos& pos, const std::string& message);

// The scalar types a parameter may have, by value or through a pointer. kFloat16 and kBFloat16
// are spelled "half" (or _Float16) and "bfloat16" (or __bf16) in specs, _Float16 and __bf16 in
// the generated CPU entry points; a CUDA kernel takes __half and __nv_bfloat16 for them.
enum class ScalarType { kBool, kInt8, kUInt8, kInt16, kUInt16, kInt32, kUInt32, kInt64, kUInt64, kFloat16, kBFloat16, kFloat, kDouble, kVoid };

struct ParamSpec {
  std::string type;   // normalised C++ spelling: "const float*", "int64_t"
  std::string name;
  ScalarType scalar = ScalarType::kVoid;
  bool is_pointer = false;
  uint32_t size = 0;  // bytes when passed by value
  SourcePos pos;
};

struct EntryPoint {
  std::string name;
  // A template instance to compile as this entry ("softmax_forward<float, 256>"), by backend:
  // the spec's name_expression = "..." sets it for every backend, { cpu = "...", cuda = "..." }
  // for some. No instance: the entry is a plain function named `name`.
  std::map<std::string, std::string> instances;
  const std::string& instance_for(std::string_view backend) const;
  std::vector<ParamSpec> params;
  SourcePos pos;
};

struct SourceSpec {
  std::string path;      // absolute; for inline sources a virtual path beside the spec
  std::string rel_path;  // relative to the spec's folder: this, not `path`, enters keys
  std::optional<std::string> inline_text;
  SourcePos pos;
};

struct CheckBuffer {
  std::string name;
  ScalarType type = ScalarType::kFloat;
  std::string count;  // an expression over the dims
  std::string init;   // "random", "zero" or "ones"
  bool output = false;
  SourcePos pos;
};

// How `kiln run` checks an op: random inputs, one launch, the same call of a plain
// reference function, outputs compared within tolerances.
struct CheckSpec {
  std::map<std::string, int64_t> dims;  // default problem sizes; tests override them
  std::string entry;                    // which entry point to check
  std::string reference;                // a host function with the entry's parameters
  uint32_t block = 256;
  std::string grid;                     // expression over dims and `block`
  std::string shared_bytes;             // dynamic shared memory per block: expression ("" = none)
  std::vector<CheckBuffer> buffers;
  std::vector<std::string> args;        // one per parameter: a buffer, an expression, a number
  double rtol = 1e-5, atol = 1e-6;
  SourcePos pos;
};

// A backend's own version of the op: its sources in its language, its options and what it
// needs of the device. The entry points and the [check] are shared with the op.
struct CudaSpec {
  std::vector<SourceSpec> sources;  // CUDA C++: `extern "C" __global__` kernels named as the entries
  std::vector<std::string> defines;
  std::vector<std::string> flags;   // NVRTC options
  int min_sm = 0;                   // e.g. 70: older GPUs are refused before compiling
  uint32_t block = 0;               // threads per block for the check's launch (0: [check].block)
  // Blocks per launch on cuda and hip: an expression over the check's dims, the entries' integer
  // parameters, `block` and `sm_count` (builders/launch_shape.h); "" = [check].grid.
  std::string grid;
  // "auto": Clang for sources that include CCCL or cooperative groups where Clang is installed,
  // else NVRTC (cuda_toolchain_for); "nvrtc"; or "clang": NVPTX in-process, no NVRTC needed.
  std::string toolchain = "auto";
  SourcePos pos;
};

// [opencl]: the op's kernels in OpenCL C, one source file (helpers in headers it includes).
// Kernels are named as the entries and take the entries' parameters; a kernel that uses the
// launch's dynamic shared memory takes it as one more, last, `__local` pointer parameter.
struct OpenClSpec {
  std::vector<SourceSpec> sources;
  std::vector<std::string> defines;
  std::vector<std::string> flags;  // OpenCL build options (-cl-fast-relaxed-math, -cl-mad-enable, ...)
  uint32_t block = 0;              // work-items per work-group for the check's launch (0: [check].block)
  SourcePos pos;
};

// A host library instead of kernels: one shared object that its user loads itself (a torch C++
// extension, imported by Python as a module), built by the cpu toolchain with the options its
// user's build system would give (no -O3/-march/-std of kiln's own), linked against libraries.
// Made by the API (api/: Context::build_library), never parsed from a spec file.
struct LibrarySpec {
  // Headers every source is compiled with, as if each began by including them: they become one
  // precompiled header shared by every library with the same options (torch/extension.h).
  std::vector<std::string> prelude;
  // Defines that name the unit rather than configure its headers (TORCH_EXTENSION_NAME): given
  // to the compile, left out of precompiled headers, so one PCH serves every extension name.
  std::vector<std::string> unit_defines;
  std::vector<std::string> link_flags;  // for the link: -L, -l, -Wl,..., object files
  // Its CUDA sources (jit::is_cuda_source: a .cu file): Clang's options for them, in place of
  // the op's flags, and the GPU architectures their device code is for ("sm_90": a cubin,
  // "compute_90": PTX). See jit::CompileRequest.
  std::vector<std::string> cuda_flags;
  std::vector<std::string> cuda_archs;
  // What else decides the binary and is not a file the compiler reads (torch's version and C++
  // ABI, the Python version): each enters the key as name=value.
  std::vector<std::pair<std::string, std::string>> facts;
  // False: use stored precompiled headers, make none (LibraryOptions::make_precompiled_headers).
  bool make_precompiled_headers = true;
};

struct OpSpec {
  std::string name;
  int64_t version = 1;
  std::string language;  // "cpp" (later "cuda", "hip", "opencl")
  std::string description;
  std::string spec_path;  // absolute path of the .toml
  std::string spec_dir;   // its folder: the root that relative paths are resolved against
  std::vector<SourceSpec> sources;
  std::vector<EntryPoint> entries;
  std::vector<std::string> include_dirs;  // absolute
  std::vector<std::string> defines;
  std::vector<std::string> flags;
  std::optional<CheckSpec> check;
  std::optional<CudaSpec> cuda;  // [cuda]; also what hip targets compile (through kiln's HIP prelude)
  std::optional<OpenClSpec> opencl;  // [opencl]
  std::optional<LibrarySpec> library;  // set: a host library with no entry points (see above)

  const EntryPoint* find_entry(const std::string& name) const;
};

// Empty when `flag` is one of the options a spec's `flags` may give its C++ compile (code
// generation and diagnostics, from the lists in spec_parser.cpp); otherwise why it is refused. An
// option that writes or reads a file (-Wp,-MD,PATH, -o, -include, @FILE, -fprofile-use=...) or
// hands options to another tool is never one. -m options are checked further by the parser
// (cpu_level_for_flag).
std::string refused_spec_flag(std::string_view flag);

// Parses and validates a spec; source files must exist and stay inside the spec's folder.
Result<OpSpec> parse_spec_file(const std::string& path);
// The same from text; `path` names the file in messages and anchors relative paths.
Result<OpSpec> parse_spec_text(const std::string& text, const std::string& path);

const char* scalar_type_name(ScalarType t);
uint32_t scalar_size(ScalarType t);

}  // namespace kiln::builders
