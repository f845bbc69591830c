// Facts about CUDA that several folders need and none owns: where the toolkit is, and which
// compute capabilities a target names. One rule each, so NVRTC, nvJitLink, Clang's CUDA path
// and the identity that enters keys never disagree about them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln {

// The toolkit folders to try, in order: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda.
std::vector<std::string> cuda_toolkit_roots();
// The first of them (where Clang's CUDA path finds libdevice).
std::string cuda_toolkit_root();

// <cuda_toolkit_root()>/bin/ptxas when it is there to run, else "": what compiles the parts of a
// split CUDA device pass (jit/clang/split_device.h), and whose bytes then enter the identity.
std::string cuda_ptxas_path();

// The headers of one CUDA toolkit: what NVRTC compiles against (cuda_fp16.h, cuda_bf16.h,
// cooperative_groups, and CUB, Thrust and libcu++ from CCCL, which CUDA 13 keeps in
// include/cccl).
struct CudaHeaders {
  std::string include_dir;        // <toolkit>/include
  std::vector<std::string> dirs;  // -I folders: include_dir, then include_dir/cccl when present
  std::string version;            // "13.0", from CUDA_VERSION in cuda.h ("unknown" without it)
};

// The headers of the toolkit a library belongs to (libnvrtc in <toolkit>/lib64, /lib or
// targets/<arch>/lib, symlinks resolved): NVRTC must see the headers of its own release.
// Falls back to the first of cuda_toolkit_roots() holding cuda_runtime.h; nullopt when none.
std::optional<CudaHeaders> cuda_headers_near(const std::string& library_path);

// The headers of the toolkit installed at `root` (e.g. /usr/local/cuda); nullopt without them.
std::optional<CudaHeaders> cuda_headers_at(const std::string& root);

// "cuda-headers=13.0:<XXH3-128 of the whole include folder>". NVRTC does not report the
// headers it reads, so every key of a compile that can see them carries this instead. The
// digest is remembered through the file memo while every file's stat holds (support/file_memo.h):
// ~2 ms of stat calls for CUDA 13's 1,982 header files, instead of reading 28 MB.
Result<std::string> cuda_headers_identity(const CudaHeaders& headers);

// "cuda:sm_80,sm_90" -> {80, 90}, in the order written (targets are normalised ascending);
// "cuda:compute_90" -> {90}.
std::vector<int> cuda_archs_in(std::string_view target);
// True for a PTX-only target (cuda:compute_90): no cubins are made.
bool cuda_ptx_only(std::string_view target);

}  // namespace kiln
