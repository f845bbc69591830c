// The small interface through which builders reach a compiler. Implementations live in
// shared libraries loaded on the first cache miss (see toolchain_loader.h), so this header
// must stay free of LLVM types.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::jit {

// One translation unit. `path` is absolute: it is where diagnostics point and where
// relative #includes are resolved; `text` is what gets compiled (the bytes that were hashed
// into the key, even if the file on disk changed since).
struct SourceFile {
  std::string path;
  std::string text;
};

struct CompileResult;

struct CompileRequest {
  std::string language;      // "cpp"
  std::string target;        // "cpu:x86-64-v3"
  std::vector<SourceFile> sources;
  std::vector<std::string> include_dirs;  // absolute
  std::vector<std::string> defines;       // "NAME" or "NAME=VALUE"
  std::vector<std::string> flags;         // extra compiler flags, already validated
  std::string label;                      // "op vector_add", for messages
  // CUDA: expressions naming template instances to compile, e.g. "scale<float>"; the result's
  // lowered_names gives each one's symbol.
  std::vector<std::string> name_expressions;
  // CUDA through Clang: compile against the CUDA toolkit's headers (through Clang's own CUDA
  // wrapper headers) instead of kiln's small prelude. Builders sets it when a source includes
  // a header in <...>; it is part of the key.
  bool cuda_toolkit_headers = false;

  // A host library (builders' LibrarySpec): no options of kiln's own (the flags say -O, -std,
  // -march), `prelude` headers before each source (through a precompiled header when one is
  // given, else -include), `unit_defines` for the sources only, and a link that the Clang driver
  // lays out (C runtime start files, libstdc++, libc) with `link_flags` added.
  bool host_library = false;
  std::vector<std::string> prelude;
  std::vector<std::string> unit_defines;
  std::vector<std::string> link_flags;
  // A host library's CUDA sources (is_cuda_source): compiled by Clang's CUDA path with
  // `cuda_flags` in place of `flags`: device code for each of `cuda_archs` ("sm_90": a cubin;
  // "compute_90": PTX the driver compiles on newer GPUs) wrapped in one fat binary that the host
  // object embeds and registers with the CUDA runtime when the library loads.
  std::vector<std::string> cuda_flags;
  std::vector<std::string> cuda_archs;
  // A host library's sources compiled by another compiler (the CUDA toolkit's nvcc, where
  // Clang's CUDA path refused a .cu source or is slower by construction: builders/nvcc_route.h):
  // by source index, what compiles that source (success; artifact: the object to link in the
  // source's place; its diagnostics, log and dependencies become the compile's). The toolchain
  // calls it on one of its threads, holding one of its job slots, beside its own sources, as
  // ninja runs a build's compilers side by side.
  std::map<size_t, std::function<CompileResult()>> external_compiles;

  // What to make: the artifact, or a precompiled header of sources[0] (whose text is an include
  // prefix) that later compiles with the same options can use. Toolchains that cannot say so
  // in the result (success false, a diagnostic).
  enum class Output { kArtifact, kPrecompiledHeader };
  Output output = Output::kArtifact;
  // Precompiled headers of some sources' include prefixes, by source index: the bytes of a
  // kPrecompiledHeader result for the same options. Not owned; they outlive the compile.
  std::map<size_t, std::string_view> precompiled_headers;
  // A host library's CUDA source compiles in passes (the device pass for each architecture, then
  // the host pass), each a parse of its own: a kPrecompiledHeader request with `pch_cuda_pass`
  // set makes the PCH of one pass (> 0: the device pass for sm_<N>; 0: the host pass), with
  // `cuda_flags` and `cuda_archs` as that pass compiles with them. `cuda_pass_pchs` hands such
  // PCHs to a compile, by (source index, pass). Not owned; they outlive the compile.
  int pch_cuda_pass = -1;
  std::map<std::pair<size_t, int>, std::string_view> cuda_pass_pchs;
};

// True for a source that a host library compiles as CUDA: its name ends in ".cu" or ".cuh", as
// for torch's extension loader.
bool is_cuda_source(std::string_view path);
// True when `request` is a host library with a CUDA source.
bool has_cuda_sources(const CompileRequest& request);

// "sm_90" -> 90 (a cubin), "compute_90" -> -90 (PTX); 0 for anything else.
int cuda_arch_code(std::string_view arch);
// The architectures a host library's device code is compiled for (one device pass each): every
// sm and compute of `cuda_archs`, ascending.
std::vector<int> cuda_device_sms(const CompileRequest& request);

// The headers `text` #includes in <...> (toolkit or system headers), in order: "cuda_bf16.h".
std::vector<std::string_view> angled_includes(std::string_view text);
// True when `text` has an #include of a header in <...>.
bool has_angled_include(std::string_view text);

struct Diagnostic {
  enum class Severity { kNote, kWarning, kError, kFatal };
  Severity severity = Severity::kError;
  std::string file;  // empty when the diagnostic has no location
  unsigned line = 0, column = 0;
  std::string message;

  // "file:line:col: error: message", as a compiler prints it.
  std::string to_string() const;
};

const char* severity_name(Diagnostic::Severity s);

// The lines of a compiler's log that are diagnostics, by a pattern whose groups give the file,
// line, column (group 0: none), severity word and message. "warning" is a warning, "note" and
// "remark" notes, "error" an error, anything else ("fatal error", "catastrophic error") fatal.
struct LogLineFormat {
  const char* pattern;  // an ECMAScript regular expression for a whole line
  int file, line, column, severity, message;
};
std::vector<Diagnostic> parse_log_lines(const std::string& log, const LogLineFormat& format);

struct CompileResult {
  bool success = false;
  std::string artifact;   // the artifact's bytes (a host shared object for cpu targets)
  std::string kind;       // "host-so"
  std::vector<Diagnostic> diagnostics;
  // Every file the compile read besides the sources themselves (absolute paths), as the
  // compiler reported them: these enter the cache key.
  std::vector<std::string> dependencies;
  // Headers an #include named that were not found. A failure that names one is not cached:
  // the header may appear (a new file in an include folder) without any input changing.
  std::vector<std::string> missing_files;
  std::string log;        // the compiler's output, as text
  // A host library: the indexes of the sources that did not compile, ascending.
  std::vector<size_t> failed_sources;
  double compile_ms = 0;
  // The CPU time of every thread the compile ran on (support/cpu_time.h), when the toolchain
  // measures it; 0: it does not (the caller measures its own thread).
  double cpu_ms = 0;
  // How many header files the compiler's preprocessor read itself, not through a precompiled
  // header: 0 when a PCH stood for every header. Empty when the toolchain does not say (NVRTC).
  std::optional<size_t> headers_parsed;
  // For each requested name expression, its symbol in the artifact (the mangled name).
  std::vector<std::pair<std::string, std::string>> lowered_names;
};

// Thread-safety: compile() may be called from several threads at once.
class Toolchain {
 public:
  virtual ~Toolchain() = default;
  // For people: "clang 22.1.8 (in-process, lld)". The key uses the loader's identity,
  // which is computed from the library files without loading them.
  virtual std::string version() const = 0;
  virtual CompileResult compile(const CompileRequest& request) = 0;
};

// Where kiln-spirv (LLVM's SPIR-V back end, one module per process) is: $KILN_SPIRV_HELPER,
// else beside the toolchain library or the program, else the build tree.
std::string spirv_helper_path();

// The Clang installation the in-process driver acts as: its resource headers (stddef.h, the CUDA
// wrappers, omp.h), compiler-rt's builtins, libomp. A wheel carries one beside the toolchain
// library (lib/kiln/llvm, the layout of an LLVM prefix: the driver finds everything from the
// path it is given, and no program is ever run from it); a build from source uses the system's
// LLVM. $KILN_LLVM_DIR names another prefix laid out the same way.
//   clang_driver_path():   <prefix>/bin/clang++ (never executed)
//   clang_resource_dir():  <prefix>/lib/clang/<major>
//   clang_builtins_path(): compiler-rt's builtins archive in it, linked into host artifacts
const std::string& clang_driver_path();
std::string clang_resource_dir();
std::string clang_builtins_path();

// The exported entry of kiln-spirv's work, inside the toolchain library (kiln-spirv is a small
// program that loads the library and calls it, so the wheel carries one copy of LLVM).
using SpirvEmitMain = int (*)(int argc, char** argv);

}  // namespace kiln::jit

// The symbol a toolchain library exports. Returns a toolchain that lives until exit.
extern "C" kiln::jit::Toolchain* kiln_jit_clang_toolchain();
// kiln-spirv's body (jit/spirv/spirv_emit.cpp): bitcode on stdin, SPIR-V on stdout.
extern "C" int kiln_spirv_emit_main(int argc, char** argv);
