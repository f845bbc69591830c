// `kiln cc`: the compiler launcher (launcher/launcher.h).
#include <unistd.h>

#include <climits>
#include <iostream>

#include "launcher/launcher.h"
#include "tools/cli_common.h"

namespace kiln::tools {

constexpr const char* k_cc_help = R"(usage: kiln cc COMPILER [ARGS...]
       kiln cc --cuda-home DIR [--toolkit CUDA_HOME]

Runs COMPILER with ARGS through kiln's cache, as ccache or sccache would: put it where a build
takes a compiler launcher (CMAKE_CXX_COMPILER_LAUNCHER, CMAKE_CUDA_COMPILER_LAUNCHER, ninja
rules, FLASHINFER_NVCC_LAUNCHER and FLASHINFER_CXX_LAUNCHER).

Cached: a compile of one source to one output: nvcc -c, -dc, -cubin, -ptx or -fatbin; gcc,
g++, cc, c++, clang or clang++ -c; with the depfile it asks for (-MD/-MMD with -MF, nvcc's
--generate-dependencies-with-compile with --dependency-output). A hit writes the output and
the depfile and replays the compiler's warnings, without running the compiler. A miss runs
it, then keeps the result (checked, signed, under the cap, `kiln cache ls`) and publishes it to
the remote tiers; nodes that start together compile each source once. Anything else (links,
-E, several sources, options kiln does not know) runs the compiler untouched and is counted
with its reason (`kiln cache stats`). A cache or tier that fails never fails the build: the
compiler runs, with one warning.

The key: the compiler's binaries and version (nvcc's tools and its host compiler too), the
arguments, the source's and every header's content. Paths inside the working folder and
inside the folders of KILN_CC_BASEDIR (':'-separated) enter it relative to them, so nodes
whose workspaces lie in different places share: a moved workspace is a hit, a changed
header, flag, toolkit or host compiler a miss. An entry DIR/* stands for the one folder
under DIR that holds the source (a JIT's fresh temporary folder: TileLang's /tmp/tmpXXXX).

  --cuda-home DIR     make DIR a CUDA_HOME whose bin/nvcc runs through kiln cc (every
                      other entry links to the toolkit), for JITs that run
                      $CUDA_HOME/bin/nvcc themselves (tvm-ffi's load_inline, TileLang);
                      prints DIR
  --toolkit DIR       the toolkit it stands for (default: $CUDA_HOME, else /usr/local/cuda)

docs/LLM-SERVING.md says how to turn it on for FlashInfer, tvm-ffi, TileLang and CMake.
)";

int cmd_cc(const std::vector<std::string>& argv, const GlobalOptions& global) {
  launcher::LauncherOptions options{global.cache_dir, global.remote};
  if (argv.empty()) return usage_error("cc needs a compiler to run", k_cc_help);
  if (argv[0] == "--help" || argv[0] == "-h") return std::cout << k_cc_help, 0;
  if (argv[0] == "--cuda-home") {
    if (argv.size() != 2 && !(argv.size() == 4 && argv[2] == "--toolkit"))
      return usage_error("usage: kiln cc --cuda-home DIR [--toolkit CUDA_HOME]", k_cc_help);
    std::string toolkit = argv.size() == 4 ? argv[3] : (std::getenv("CUDA_HOME") ? std::getenv("CUDA_HOME") : "/usr/local/cuda");
    char self[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return fail(Status(StatusCode::kIoError, "cannot find the kiln program itself (/proc/self/exe)"));
    auto made = launcher::write_cuda_home(argv[1], toolkit, std::string(self, static_cast<size_t>(n)), options);
    if (!made.ok) return fail(Status(StatusCode::kIoError, "kiln cc --cuda-home: " + made.message));
    std::cout << made.message << "\n";
    return 0;
  }
  return launcher::run_launcher(argv[0], std::vector<std::string>(argv.begin() + 1, argv.end()), options);
}

}  // namespace kiln::tools
