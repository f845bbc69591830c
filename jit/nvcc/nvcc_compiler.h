// The CUDA toolkit's nvcc as a subprocess: the last resort for a host library's CUDA source
// (a torch extension's .cu, host code and device code) that Clang's CUDA path refuses and nvcc
// accepts (C++ that nvcc's front end is lenient about, such as narrowing in braces). NVRTC
// cannot take such a source (it has no host code), so builders compile it with nvcc into an
// object that the Clang toolchain links in its place (CompileRequest::external_compiles).
// Nothing here loads LLVM or a CUDA library.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jit/toolchain.h"

namespace kiln::jit {

struct Nvcc {
  std::string path;      // <toolkit>/bin/nvcc
  std::string version;   // the toolkit's, "13.0" (CUDA_VERSION in cuda.h)
  // What enters the key of an artifact it built: "nvcc 13.0 (<path>);nvcc=<hash>;cicc=...;
  // ptxas=...;host=<g++'s path>=<hash>". From the files' contents (through the file memo), not
  // by running nvcc: a hit never starts it.
  std::string identity;
};

// nvcc of the toolkit kiln uses, the one whose headers and libdevice Clang's CUDA path takes
// (cuda_toolkit_root(): $CUDA_HOME, else $CUDA_PATH, else /usr/local/cuda): <root>/bin/nvcc;
// nullopt when it has none (never another release's nvcc).
std::optional<Nvcc> find_nvcc();

// Where find_nvcc() looked, for a message: "/usr/local/cuda/bin/nvcc, in the toolkit kiln
// uses: $CUDA_HOME and $CUDA_PATH unset".
std::string nvcc_search_text();

// nvcc's arguments for source `index` of a host library `request`, as torch's cpp_extension
// gives nvcc for that source: the library's include folders, defines and unit defines, its
// cuda_flags translated back from Clang's spelling (-fgpu-flush-denormals-to-zero -> --ftz=true,
// host-only -f/-W/-m options -> -Xcompiler), one -gencode per architecture (sm_90 ->
// arch=compute_90,code=sm_90; compute_90 -> arch=compute_90,code=compute_90),
// --expt-relaxed-constexpr and -Xcompiler -fPIC; `output` the object, `depfile` its
// dependency list (-MD -MF).
std::vector<std::string> nvcc_arguments(const Nvcc& nvcc, const CompileRequest& request, size_t index, const std::string& output,
                                        const std::string& depfile);

// Compiles source `index` of `request` with nvcc: success, the object in `artifact` (kind
// "host-object"), the headers it read in `dependencies` (absolute), its diagnostics and log.
CompileResult compile_with_nvcc(const Nvcc& nvcc, const CompileRequest& request, size_t index);

}  // namespace kiln::jit
