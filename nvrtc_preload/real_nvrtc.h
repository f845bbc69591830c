// The real NVRTC behind libkiln_nvrtc.so, and what its compiles look at on disk.
//
// The preloaded library carries NVRTC's SONAME, so asking the loader for "libnvrtc.so.13" by
// name answers with it: the real one is opened by its path (KILN_NVRTC_REAL_LIBRARY, else the
// first of real_nvrtc_candidates() that is not this library), RTLD_LOCAL so that its symbols
// never stand in for ours.
//
// NVRTC has no depfile. It reaches the disk through its own imports of open, fopen, fopen64,
// __xstat, __lxstat and access, reads the environment through getenv and the working folder
// through getcwd (-G and -lineinfo write it into the output), so kiln points those entries of the
// real library's GOT (its table of imported addresses: nothing else in the process is touched) at
// functions that record each for the compile running on this thread, with what was there then.
// A compile runs on its caller's thread (strace shows no thread started by nvrtcCompileProgram in
// NVRTC 13.0 but for --split-compile, which is not cached). A real NVRTC that imports another way
// to the disk (openat, stat, statx, ...) is not cached at all: probes_recorded is false.
#pragma once

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kiln::nvrtc_preload {

struct RealNvrtc {
  std::string path;      // the file opened
  std::string identity;  // "<ELF build id> <builtins' build id> <major>.<minor>": the compiler in every key
#define KILN_NVRTC_ENTRY(name, ret, params, args) ret(*name) params = nullptr;
#include "nvrtc_preload/nvrtc_entry_points.def"
#undef KILN_NVRTC_ENTRY
  void* cpex = nullptr;  // __nvrtcCPEx
  // Every import through which the real library reaches files was pointed at the recorders (and
  // it has no other such import): else its compiles are not cached.
  bool probes_recorded = false;
  std::string probes_why;  // why not
};

// Where a real libnvrtc.so.13 is looked for, in order: $LD_LIBRARY_PATH's folders, the NVIDIA
// wheels of $VIRTUAL_ENV and $CONDA_PREFIX (where cuda.pathfinder looks first), $CUDA_HOME/lib64,
// $CUDA_PATH/lib64, /usr/local/cuda/lib64.
std::vector<std::string> real_nvrtc_candidates();

// Loaded once, on first use; nullptr when no real NVRTC could be opened (`error` says why).
const RealNvrtc* real_nvrtc(std::string* error = nullptr);

// What one compile looked at ("env:NAME", "cwd:", or a path as NVRTC gave it), in the order first
// seen, each with its stamp then (program_key.h: stamp_now).
struct ProbeLog {
  std::vector<std::pair<std::string, std::string>> probes;
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
