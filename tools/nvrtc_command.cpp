// `kiln nvrtc`: where the NVRTC that keeps its compiles in kiln's cache is (nvrtc_preload/).
#include <dlfcn.h>
#include <unistd.h>

#include <iostream>

#include "support/install_paths.h"
#include "tools/cli_common.h"

namespace kiln::tools {

constexpr const char* k_nvrtc_help = R"(usage: kiln nvrtc --preload
       kiln nvrtc --real

Prints the path of libkiln_nvrtc.so: NVRTC's library with kiln's cache behind
nvrtcCompileProgram, for programs that compile CUDA C++ in-process through NVRTC (CuPy,
cuda.core, numba-cuda, DeepGEMM with DG_JIT_USE_NVRTC=1, TileLang's NVRTC backend):

  LD_PRELOAD=$(kiln nvrtc --preload) python serve.py

It takes the place of libnvrtc.so.13 (its name and symbol version), so a program linked against
NVRTC, or one that asks the loader for it, gets it; every call goes on to the real NVRTC. A
compile is looked up first (this node's cache, then the remote tiers: KILN_REMOTE_CACHE, else
the config file's); a hit answers every later call (PTX, CUBIN, LTO-IR, the log, lowered names)
without compiling, a miss compiles and keeps all of it. Nodes that start together compile each
program once. The key: the real NVRTC (build id, version), the source and the headers handed
to it, the options, the name expressions, and every file the compile looked at on disk (the
headers it read, the include folders where it found nothing). A compile with an option kiln
does not know (precompiled headers among them) runs uncached and is counted (`kiln cache stats`).

  --real                    print the real libnvrtc.so.13 it forwards to in this environment

  KILN_NVRTC_REAL_LIBRARY   the real libnvrtc.so.13 (default: the first in $LD_LIBRARY_PATH,
                            $VIRTUAL_ENV's or $CONDA_PREFIX's NVIDIA wheels, $CUDA_HOME/lib64,
                            $CUDA_PATH/lib64, /usr/local/cuda/lib64)
  KILN_NVRTC_LOG            stderr, or a file to append to: a line per compile (hit, miss,
                            not cached and why)
  KILN_NVRTC_LOG_PROBES=1   with KILN_NVRTC_LOG, every path, variable and folder a compile
                            looked at, as its key has them
  KILN_NVRTC_DISABLE=1      forward every call untouched
)";

int cmd_nvrtc(const std::vector<std::string>& argv, const GlobalOptions&) {
  if (argv.size() == 1 && (argv[0] == "--help" || argv[0] == "-h")) return std::cout << k_nvrtc_help, 0;
  if (argv.size() != 1 || (argv[0] != "--preload" && argv[0] != "--real"))
    return usage_error("usage: kiln nvrtc --preload | --real", k_nvrtc_help);
  std::string shim = find_kiln_file("libkiln_nvrtc.so", "KILN_NVRTC_PRELOAD", KILN_NVRTC_PRELOAD_BUILD_PATH);
  std::string store = shim.substr(0, shim.rfind('/') + 1) + "libkiln_nvrtc_store.so";
  for (auto& f : {shim, store})
    if (::access(f.c_str(), R_OK) != 0)
      return fail(Status(StatusCode::kNotFound, f + " is missing: this kiln was built without it (nvrtc_preload/)"));
  // The library itself says which real NVRTC it would forward to here: without one, every NVRTC
  // call in a preloaded process fails, which is worse than not preloading it.
  void* lib = ::dlopen(shim.c_str(), RTLD_NOW | RTLD_LOCAL);
  using RealPath = const char* (*)();
  auto real_path = lib ? reinterpret_cast<RealPath>(::dlsym(lib, "kiln_nvrtc_preload_real_library")) : nullptr;
  const char* real = real_path ? real_path() : nullptr;
  if (argv[0] == "--real") {
    if (!real) return fail(Status(StatusCode::kNotFound, "no real libnvrtc.so.13 found: set KILN_NVRTC_REAL_LIBRARY to its path"));
    std::cout << real << "\n";
    return 0;
  }
  if (!real)
    std::cerr << "kiln nvrtc: warning: no real libnvrtc.so.13 found here, so NVRTC calls in a process preloading this "
                 "library would fail: set KILN_NVRTC_REAL_LIBRARY to its path\n";
  std::cout << shim << "\n";
  return 0;
}

}  // namespace kiln::tools
