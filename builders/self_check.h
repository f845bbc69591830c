// Runs an op's [check]: random inputs, one launch of the entry point, one call of the plain
// reference on copies of the same inputs, outputs compared element by element.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "builders/ops.h"

namespace kiln::builders {

struct CheckReport {
  bool passed = false;
  std::string message;        // what differed, or a short summary
  uint64_t elements_compared = 0;
  double max_abs_error = 0;
  uint64_t grid = 0;          // blocks launched
  double kernel_ms = 0;       // the launch, including waiting for it
};

struct CheckOptions {
  std::map<std::string, int64_t> dims;  // override the spec's dims
  uint64_t seed = 1;
};

// kInvalidArgument when the op has no [check] or the dims make no sense; a mismatch is a
// report with passed == false. The reference always runs on the host: for an op loaded on
// another accelerator, `ops` loads the same op's cpu artifact for it.
Result<CheckReport> run_self_check(Ops& ops, const LoadedOp& op, const CheckOptions& options = {});

struct DeviceLaunch;

// The launch an op's [check] describes, its buffers allocated on the op's accelerator and filled
// as the check fills them, ready to run as many times as wanted (throughput benchmarks). Frees
// its buffers on destruction; must not outlive the op.
class CheckLaunch {
 public:
  static Result<std::unique_ptr<CheckLaunch>> prepare(const LoadedOp& op, const CheckOptions& options = {});
  ~CheckLaunch();
  // Queues one launch of the checked entry.
  Status launch(runtime::Stream& stream);
  // The check's buffers together, in bytes.
  uint64_t buffer_bytes() const { return m_bytes; }
  const runtime::LaunchConfig& config() const { return m_config; }

 private:
  CheckLaunch();
  std::unique_ptr<DeviceLaunch> m_device;
  runtime::Kernel* m_kernel = nullptr;
  runtime::LaunchConfig m_config;
  uint64_t m_bytes = 0;
};

}  // namespace kiln::builders
