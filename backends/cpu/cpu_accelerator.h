// The CPU as an accelerator: one device (the host), host memory, streams served by their
// own threads over one shared worker pool. Registered as "cpu" with the lowest priority,
// so any GPU backend that is available wins auto-detection.
#pragma once

#include <memory>
#include <mutex>

#include "backends/cpu/cpu_module.h"
#include "backends/cpu/cpu_stream.h"
#include "backends/cpu/worker_pool.h"
#include "runtime/accelerator.h"
#include "runtime/memory_tracker.h"

namespace kiln::backends::cpu {

struct CpuOptions {
  // Helper threads of the worker pool; the stream's own thread works too.
  // Default: KILN_CPU_THREADS, else one fewer than the hardware threads.
  int helper_threads = -1;
  // A launch whose caller waits for it may run on the caller's OpenMP team, where the process
  // has an OpenMP runtime (worker_pool.h). Default: on, unless KILN_CPU_OPENMP=0.
  int use_openmp = -1;
};

class CpuAccelerator final : public runtime::Accelerator {
 public:
  explicit CpuAccelerator(CpuOptions options = {});
  ~CpuAccelerator() override;

  std::string_view name() const override { return "cpu"; }
  int device_count() const override { return 1; }
  // The worker pool's helpers and the stream's own thread: the blocks that run at once.
  int multiprocessor_count() const override { return static_cast<int>(m_pool->helper_count()) + 1; }
  std::string device_name(int device) const override;
  Status synchronize() override;
  std::string native_target() const override;
  Status can_load(std::string_view kind, std::string_view target) const override;
  Status supports(runtime::Capability c) const override;
  std::string_view communication_backend() const override { return "gloo"; }
  std::vector<std::string> environment_prefixes() const override;
  std::vector<runtime::DType> supported_dtypes() const override;

  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status memset(void* dst, int value, size_t bytes) override;
  // Ordinary host memory: the device is the host, so no copy needs it page-locked.
  Result<void*> allocate_host(size_t bytes) override;
  void deallocate_host(void* ptr) override;
  bool is_pinned(const void* ptr) const override { return false; }
  bool on_accelerator(const void* ptr) const override { return m_memory.contains(ptr); }
  runtime::MemoryStats memory_stats() const override;
  void reset_peak_memory() override { m_memory.reset_peak(); }

  runtime::Stream& default_stream() override;
  Result<std::unique_ptr<runtime::Stream>> create_stream() override;
  Result<std::unique_ptr<runtime::Event>> create_event() override;

  Result<std::shared_ptr<runtime::Module>> load_module(const runtime::ModuleImage& image) override;

 private:
  std::unique_ptr<WorkerPool> m_pool;
  CpuStreamList m_streams;  // before the default stream, which unregisters from it
  runtime::MemoryTracker m_memory;
  std::once_flag m_default_once;
  std::unique_ptr<CpuStream> m_default_stream;
};

}  // namespace kiln::backends::cpu
