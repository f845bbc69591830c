// Facts about CUDA that several folders need and none owns: where the toolkit is, and which
// compute capabilities a target names. One rule each, so NVRTC, nvJitLink, Clang's CUDA path
// and the identity that enters keys never disagree about them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// The toolkit folders to try, in order: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::vector<std::string> cuda_toolkit_roots();
// The first of them (where Clang's CUDA path finds libdevice).
std::string cuda_toolkit_root();

// "cuda:sm_80,sm_90" -> {80, 90}, in the order written (targets are normalised ascending);
// "cuda:compute_90" -> {90}.
std::vector<int> cuda_archs_in(std::string_view target);
// True for a PTX-only target (cuda:compute_90): no cubins are made.
bool cuda_ptx_only(std::string_view target);

}  // namespace kiln
