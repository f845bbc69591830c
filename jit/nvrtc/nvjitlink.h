// nvJitLink, loaded with dlopen: PTX -> cubin in the calling process (10-20 ms, no GPU).
// Used by both CUDA paths (NVRTC and Clang) to make a cubin per listed architecture from
// one PTX.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::jit {

// True once nvJitLink can be used (loaded on the first call; thread-safe). Looks beside
// libnvrtc's folders (CUDA_HOME, CUDA_PATH, /usr/local/cuda), then the loader's path.
bool nvjitlink_available();

// ";libnvJitLink.so.13=<build id>", read without loading, or "" where there is none.
std::string nvjitlink_identity();

// The CUDA release of the nvJitLink loaded (13 for libnvJitLink.so.13), 0 where there is none:
// the driver its cubins need is at least that release's.
int nvjitlink_major();

// The cubin for compute capability `sm` (e.g. 90) linked from `ptx`; errors carry its log.
Result<std::string> link_cubin(std::string_view ptx, int sm);

// One cubin for sm_<sm> from several PTX modules (the parts of one split device pass: each
// defines its own kernels, and its other functions are internal to it), linked as nvJitLink links
// relocatable device code. A one-element list is link_cubin.
Result<std::string> link_cubin_parts(const std::vector<std::string_view>& ptx, int sm);

// One cubin for sm_<sm> from relocatable cubins (ptxas -c of each part of a split device pass):
// only the link, ~0.2 s for causal_conv1d_bwd.cu's four parts.
Result<std::string> link_relocatable_cubins(const std::vector<std::string_view>& cubins, int sm);

// A cubin for each of `archs` from one `ptx`, linked at once (one thread per architecture
// beyond the first): ptxas inside nvJitLink is most of a CUDA compile (~17 ms of row_softmax's
// ~40 for sm_90), and the links share nothing. The first error is returned.
Result<std::map<int, std::string>> link_cubins(std::string_view ptx, const std::vector<int>& archs);

// What ptxas reports about one entry point of a cubin (nvJitLink's info log with -Xptxas=-v):
// the figures that decide occupancy, and spills, which a change to a kernel should not add.
struct KernelResources {
  std::string entry;  // the kernel's symbol
  int registers = 0;  // per thread
  int64_t stack_frame = 0, spill_stores = 0, spill_loads = 0;  // bytes per thread
  int64_t shared_bytes = 0;  // static shared memory per block
  int barriers = 0;
};

// Links `ptx` for compute capability `sm` with ptxas's verbose report on and returns its
// figures for each entry point, in the order ptxas compiled them. kUnavailable without
// nvJitLink (or one without an info log); kCompileError with the log when the link fails.
Result<std::vector<KernelResources>> ptxas_resources(std::string_view ptx, int sm);

// The entry points' figures in ptxas's verbose output ("Compiling entry function 'k' for
// 'sm_90'", "... bytes stack frame, ... bytes spill stores, ... bytes spill loads", "Used N
// registers, used B barriers, S bytes smem"); lines about non-entry functions are passed over.
std::vector<KernelResources> parse_ptxas_report(std::string_view log);

// Several LTO-IR inputs (NVRTC -dlto, one per source) linked and optimised together: the PTX
// for the oldest of `archs` and, unless `ptx_only`, a cubin for each.
struct LinkedModule {
  std::string ptx;
  std::map<int, std::string> cubins;
};
Result<LinkedModule> link_lto(const std::vector<std::string>& irs, const std::vector<int>& archs, bool ptx_only);

// The cubins a CUDA target asks for, from the PTX made for its oldest architecture: none for
// a PTX-only target (cuda:compute_90), else link_cubins of its architectures.
Result<std::map<int, std::string>> cubins_for_target(std::string_view ptx, const std::string& target);

}  // namespace kiln::jit
