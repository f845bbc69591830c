// The CUDA accelerator over the driver API: device 0's primary context, device memory,
// streams (CUstream), events (CUevent), modules loaded from kiln's cuda-module artifacts
// (the cubin when it was built for this GPU, else its PTX, which the driver compiles), and
// kernels launched with cuLaunchKernel. Registered as "cuda", ahead of "cpu".
//
// Thread-safety: every call makes the context current on the calling thread first, so any
// thread may use it.
#pragma once

#include <memory>
#include <mutex>

#include "backends/cuda/cuda_driver.h"
#include "runtime/accelerator.h"
#include "runtime/memory_tracker.h"

namespace kiln::backends::cuda {

class CudaAccelerator final : public runtime::Accelerator {
 public:
  static Result<std::unique_ptr<CudaAccelerator>> create(int device = 0);
  ~CudaAccelerator() override;

  std::string_view name() const override { return "cuda"; }
  int device_count() const override;
  std::string device_name(int device) const override;
  int current_device() const override { return m_device_index; }
  int multiprocessor_count() const override { return m_multiprocessors; }
  Status synchronize() override;
  std::string native_target() const override { return "cuda:sm_" + std::to_string(m_sm); }
  Status can_load(std::string_view kind, std::string_view target) const override;
  Status supports(runtime::Capability c) const override;
  std::string_view communication_backend() const override { return "nccl"; }
  std::vector<std::string> environment_prefixes() const override;
  std::vector<runtime::DType> supported_dtypes() const override;

  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status memset(void* dst, int value, size_t bytes) override;
  Result<void*> allocate_host(size_t bytes) override;
  void deallocate_host(void* ptr) override;
  bool is_pinned(const void* ptr) const override;
  bool on_accelerator(const void* ptr) const override;
  runtime::MemoryStats memory_stats() const override;
  void reset_peak_memory() override { m_memory.reset_peak(); }

  runtime::Stream& default_stream() override;
  Result<std::unique_ptr<runtime::Stream>> create_stream() override;
  Result<std::unique_ptr<runtime::Stream>> wrap_stream(void* native) override;
  Result<std::unique_ptr<runtime::Event>> create_event() override;
  Result<std::shared_ptr<runtime::Module>> load_module(const runtime::ModuleImage& image) override;

  // Makes this accelerator's context current on the calling thread.
  Status bind() const;
  const Driver& drv() const { return *m_driver; }
  int sm() const { return m_sm; }

  // Whether a CUDA GPU is visible, learnt without cuInit (which would keep a process that
  // forks afterwards from using CUDA in the child): CUDA_VISIBLE_DEVICES, the driver's
  // /proc entries or device nodes, and libcuda.so.1 being loadable.
  // Ok, or kUnavailable saying which of those is missing.
  static Status present_without_initialising();

 protected:
  void profiler_push(const std::string& name) override;
  void profiler_pop() override;

 private:
  CudaAccelerator() = default;
  const Driver* m_driver = nullptr;
  int m_device = 0;        // CUdevice
  int m_device_index = 0;  // its ordinal among the visible devices
  int m_sm = 0;
  int m_multiprocessors = 1;  // read once at creation: what a launch sizes its grid against
  void* m_context = nullptr;
  runtime::MemoryTracker m_memory;
  std::once_flag m_default_once;
  std::unique_ptr<runtime::Stream> m_default_stream;
};

}  // namespace kiln::backends::cuda
