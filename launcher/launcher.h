// `kiln cc COMPILER ARGS...`: a compiler launcher (ccache's place in a build: ninja's and CMake's
// COMPILER_LAUNCHER, FlashInfer's FLASHINFER_NVCC_LAUNCHER) with kiln's store, signatures and
// cluster single flight behind it.
//
// A compile of one source to one output (compile_command.h) is keyed like an op's (DESIGN.md):
// an input key over the compiler's identity (its binaries' content and version; nvcc's host
// compiler too), the arguments with their paths as labels (paths.h), the variables that change
// what the compiler reads, and the source's content; a manifest of every header the compile read
// (from the depfile, which kiln always asks for); and the artifact under the key the two make.
// A hit writes the output and the depfile where they were asked for and replays what the compiler
// printed, with no compiler process at all. A miss runs the real compiler (its bytes are what the
// build expects), then stores and publishes the result. Anything else runs the compiler
// untouched, counted with its reason (`kiln cache stats`).
//
// It never breaks a build: when the store or a tier fails, the compiler runs as if kiln were not
// there, with one warning.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kiln::launcher {

struct LauncherOptions {
  std::string cache_dir;              // empty: the cache_dir setting
  std::optional<std::string> remote;  // the tier list; nullopt: the setting
};

// Runs `compiler args` through the cache; returns the exit status to leave with (the compiler's).
// `compiler` is a path, or a name looked up in PATH.
int run_launcher(const std::string& compiler, const std::vector<std::string>& args, const LauncherOptions& options);

// Makes `dir` a CUDA_HOME whose bin/nvcc runs through `kiln_binary cc` on the toolkit at
// `cuda_home`, and whose every other entry is a link to the toolkit's: for JITs that call
// $CUDA_HOME/bin/nvcc themselves (tvm-ffi's load_inline, TileLang). Ok, or why not.
struct CudaHomeResult {
  bool ok = false;
  std::string message;
};
CudaHomeResult write_cuda_home(const std::string& dir, const std::string& cuda_home, const std::string& kiln_binary,
                               const LauncherOptions& options);

}  // namespace kiln::launcher
