// The real NVRTC behind libkiln_nvrtc.so, and what its compiles look at on disk.
//
// The preloaded library carries NVRTC's SONAME, so asking the loader for "libnvrtc.so.13" by
// name answers with it: the real one is opened by its path (KILN_NVRTC_REAL_LIBRARY, else the
// first libnvrtc.so.13 in $LD_LIBRARY_PATH, $CUDA_HOME/lib64, $CUDA_PATH/lib64,
// /usr/local/cuda/lib64 that is not this library), RTLD_LOCAL so that its symbols never stand in
// for ours.
//
// NVRTC has no depfile. It reaches the disk through its own imports of open, fopen, fopen64,
// __xstat and access, so kiln points those entries of the real library's GOT (its table of
// imported addresses: nothing else in the process is touched) at functions that record each path
// for the compile running on this thread (a compile runs on its caller's thread: strace shows no
// thread started by nvrtcCompileProgram in NVRTC 13.0).
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

namespace kiln::nvrtc_preload {

struct RealNvrtc {
  std::string path;      // the file opened
  std::string identity;  // "<ELF build id> <major>.<minor>": the compiler in every key
#define KILN_NVRTC_ENTRY(name, ret, params, args) ret(*name) params = nullptr;
#include "nvrtc_preload/nvrtc_entry_points.def"
#undef KILN_NVRTC_ENTRY
  void* cpex = nullptr;         // __nvrtcCPEx
  void* nvvm_handle = nullptr;  // __nvrtcNvvmHandle
  bool probes_recorded = false;  // the GOT entries were found and pointed at the recorder
};

// Loaded once, on first use; nullptr when no real NVRTC could be opened (`error` says why).
const RealNvrtc* real_nvrtc(std::string* error = nullptr);

// The paths one compile looked at, in the order first seen.
struct ProbeLog {
  std::vector<std::string> paths;
  std::unordered_set<std::string> seen;
};
// Records this thread's NVRTC probes into `log` until the guard ends.
class RecordProbes {
 public:
  explicit RecordProbes(ProbeLog& log);
  ~RecordProbes();
  RecordProbes(const RecordProbes&) = delete;
  RecordProbes& operator=(const RecordProbes&) = delete;
};

}  // namespace kiln::nvrtc_preload
