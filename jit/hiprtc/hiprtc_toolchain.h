// The hiprtc toolchain: CUDA sources (through kiln's hiprtc prelude) -> an AMD GPU code object,
// with ROCm's hiprtc. Every compile runs in a helper process (kiln-hiprtc): a hiprtc that
// aborts (Debian's, for gfx942) fails that compile with the reason, and kiln goes on.
// Chosen with KILN_HIP_TOOLCHAIN=hiprtc; the default for hip targets is the in-process Clang.
#pragma once

#include <string>
#include <vector>

#include "jit/toolchain.h"

namespace kiln::jit {

// The library holding hiprtc: $KILN_HIPRTC_LIBRARY, else the first found of ROCm 6's
// libhiprtc.so.6 and ROCm 5's libamdhip64.so.5 (hiprtc is inside it) in ROCm's and Debian's
// library folders. kUnavailable names where kiln looked.
Result<std::string> hiprtc_library_path();

// Where the helper is: $KILN_HIPRTC_HELPER, else beside the running program or its library
// (bin/, lib/kiln/), else the build tree.
std::string hiprtc_helper_path();

// "hiprtc;libamdhip64.so.5.2.21153=<ELF build id>;helper=<build id>", read without loading.
Result<std::string> hiprtc_toolchain_identity();

// The toolchain (it loads nothing in this process). kUnavailable when there is no hiprtc or helper.
Result<Toolchain*> load_hiprtc_toolchain();

}  // namespace kiln::jit
