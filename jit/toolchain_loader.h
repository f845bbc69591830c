// Loads a toolchain library on first use and says what it will be called, without loading
// it: the hit path needs the identity (it enters the key) but must not map libLLVM.
#pragma once

#include <string>

#include "jit/toolchain.h"
#include "support/elf_build_id.h"

namespace kiln::jit {

// Where the Clang toolchain library is: $KILN_JIT_LIBRARY, else beside the running
// program's library folder, else the build tree it was built in.
std::string clang_toolchain_library_path();

// The Clang toolchain's identity, computed from the files that would compile: the ELF
// build ids of libkiln_jit_clang, libclang-cpp and libLLVM (read, not loaded), and the
// LLVM version it was built against. What a cpu artifact depends on, and nothing else (not
// the CUDA toolkit). Cached after the first call; the build ids through the file memo.
Result<std::string> clang_toolchain_identity();

// The identity of CUDA compiles through Clang: the above, plus nvJitLink (it makes the
// cubins) and CUDA's libdevice (linked into the PTX).
Result<std::string> clang_cuda_toolchain_identity();

// The identity of OpenCL and SPIR-V compiles: the Clang toolchain's, plus kiln-spirv, the
// helper that runs the SPIR-V back end's last step (jit/toolchain.h).
Result<std::string> clang_spirv_toolchain_identity();

// True when this node can compile through Clang: kiln was built with it and the toolchain
// library is there (a stat; nothing is loaded, so the hit path may ask). A node that only names
// the identity of a Clang elsewhere (KILN_CLANG_IDENTITY) cannot.
bool clang_toolchain_present();

// dlopen()s the toolchain library once per process (thread-safe) and returns its toolchain,
// or says what is missing and where it looked.
Result<Toolchain*> load_clang_toolchain();

// Starts load_clang_toolchain() on a thread of its own and returns at once: the caller does
// what precedes its compile (finding its precompiled headers) while the library is mapped and
// relocated (~17 ms), and its load_clang_toolchain() then waits for that load. Call it only
// where a compile follows: the hit path never loads the compiler.
void start_loading_clang_toolchain();

// True once load_clang_toolchain() has loaded the library in this process.
bool clang_toolchain_loaded();

}  // namespace kiln::jit
