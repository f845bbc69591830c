// kiln-spirv: runs LLVM's SPIR-V back end on one module, in a process of its own
// (jit/spirv/spirv_emit.cpp says why). The back end is in the toolchain library, found as kiln
// finds it (beside this program, $KILN_JIT_LIBRARY, or the build tree): this program links no LLVM.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "jit/toolchain.h"
#include "support/install_paths.h"

int main(int argc, char** argv) {
  std::string library = kiln::find_kiln_file("libkiln_jit_clang.so", "KILN_JIT_LIBRARY", KILN_JIT_BUILD_PATH);
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* error = ::dlerror();
    std::fprintf(stderr, "kiln-spirv: cannot load the toolchain library %s: %s\n", library.c_str(), error ? error : "dlopen failed");
    return 1;
  }
  auto emit = reinterpret_cast<kiln::jit::SpirvEmitMain>(::dlsym(handle, "kiln_spirv_emit_main"));
  if (!emit) {
    std::fprintf(stderr, "kiln-spirv: %s does not export kiln_spirv_emit_main\n", library.c_str());
    return 1;
  }
  return emit(argc, argv);
}
