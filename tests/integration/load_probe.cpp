// A program that links all of kiln (runtime, every backend, builders) and reports what
// loading it did, for load_test.cpp: nothing may happen at load time, and detection may
// not initialise a backend, so a child forked after detection can still run an op.
//
// usage: kiln_load_probe CACHE_DIR SPEC_DIR   (prints key=value lines; exit 0 when it ran)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "builders/ops.h"
#include "builders/self_check.h"
#include "runtime/registry.h"

namespace {

int thread_count() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// The driver and compiler libraries kiln must not map until something needs them.
std::string mapped_drivers() {
  std::ifstream in("/proc/self/maps");
  std::string line, found;
  for (const char* lib : {"libcuda.so", "libnvrtc", "libkiln_jit_clang", "libLLVM", "libOpenCL", "libamdhip"}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line))
      if (line.find(lib) != std::string::npos) {
        found += std::string(found.empty() ? "" : ",") + lib;
        break;
      }
  }
  return found.empty() ? "none" : found;
}

// Loads vector_add on the chosen accelerator and self-checks it; "ok <accelerator>" or why not.
std::string run_op(const char* cache_dir, const char* spec_dir) {
  kiln::builders::OpsOptions o;
  o.cache_dir = cache_dir;
  o.spec_dirs = {spec_dir};
  auto ops = kiln::builders::Ops::create(o);
  if (!ops.ok()) return "error " + ops.status().message();
  auto op = (*ops)->get("vector_add");
  if (!op.ok()) return "error " + op.status().message();
  auto report = kiln::builders::run_self_check(**ops, **op, {{{"n", 10000}}, 1});
  if (!report.ok()) return "error " + report.status().message();
  return (report->passed ? "ok " : "mismatch ") + std::string((*op)->accelerator().name());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: kiln_load_probe CACHE_DIR SPEC_DIR\n"), 2;
  std::printf("threads_at_load=%d\n", thread_count());
  std::printf("drivers_at_load=%s\n", mapped_drivers().c_str());

  std::string available;
  for (auto& b : kiln::runtime::backend_infos())
    if (b.available) available += (available.empty() ? "" : ",") + b.name;
  std::printf("available=%s\n", available.c_str());
  std::printf("threads_after_detection=%d\n", thread_count());
  std::fflush(stdout);

  pid_t pid = ::fork();
  if (pid == 0) {
    std::printf("child=%s\n", run_op(argv[1], argv[2]).c_str());
    std::fflush(stdout);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::printf("child_exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  std::printf("parent=%s\n", run_op(argv[1], argv[2]).c_str());
  return 0;
}
