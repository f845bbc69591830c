// An op's first use in a fresh process, as a framework's first call of it is: open the cache,
// find the op (a hit: no compiler is loaded), load it on the CPU and launch it once on its
// check's inputs. tools/bench/compare times this whole process next to PyTorch's
// torch.utils.cpp_extension.load of the same kernel with its build folder already built.
//
// usage: kiln_first_use OP CACHE_DIR [NAME=VALUE]...   (dims of the op's check, to keep its inputs small)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "builders/ops.h"
#include "builders/self_check.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kiln_first_use OP CACHE_DIR [NAME=VALUE]...\n");
    return 2;
  }
  kiln::builders::OpsOptions options;
  options.cache_dir = argv[2];
  kiln::builders::CheckOptions check{{}, 1};
  for (int i = 3; i < argc; ++i) {
    std::string dim = argv[i];
    auto eq = dim.find('=');
    if (eq == std::string::npos) return std::fprintf(stderr, "not NAME=VALUE: %s\n", argv[i]), 2;
    check.dims[dim.substr(0, eq)] = std::atoll(dim.c_str() + eq + 1);
  }
  options.accelerator = "cpu";
  auto ops = kiln::builders::Ops::create(options);
  if (!ops.ok()) return std::fprintf(stderr, "%s\n", ops.status().message().c_str()), 1;
  auto op = (*ops)->get(argv[1]);
  if (!op.ok()) return std::fprintf(stderr, "%s\n", op.status().message().c_str()), 1;
  auto launch = kiln::builders::CheckLaunch::prepare(**op, check);
  if (!launch.ok()) return std::fprintf(stderr, "%s\n", launch.status().message().c_str()), 1;
  auto& stream = (*op)->accelerator().default_stream();
  if (!(*launch)->launch(stream).ok() || !stream.synchronize().ok()) return 1;
  std::printf("%s\n", (*op)->outcome().cache == kiln::builders::CacheOutcome::kCompiled ? "compiled" : "hit");
  return 0;
}
