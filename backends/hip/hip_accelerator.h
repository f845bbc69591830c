// The HIP accelerator over the HIP runtime (ROCm), loaded with dlopen: device 0, device memory,
// streams, events, code objects (hsaco) loaded with hipModuleLoadData, kernels launched with
// hipModuleLaunchKernel, graphs from stream capture. Its calls mirror the CUDA backend's one for
// one. Registered as "hip", after "cuda" and ahead of "cpu"; where there is no AMD GPU (this
// project has none) it is unavailable with the reason, and the conformance suite skips it.
#pragma once

#include <memory>
#include <mutex>
#include <set>

#include "backends/hip/hip_runtime_api.h"
#include "runtime/accelerator.h"
#include "runtime/memory_tracker.h"

namespace kiln::backends::hip {

// "gfx90a" from hipDeviceProp_t's gcnArchName ("gfx90a:sramecc+:xnack-"), found by scanning
// the structure's bytes: its layout differs between ROCm releases, the name's form does not.
std::string arch_from_properties(const void* props, size_t size);

class HipAccelerator final : public runtime::Accelerator {
 public:
  static Result<std::unique_ptr<HipAccelerator>> create(int device = 0);
  ~HipAccelerator() override;

  std::string_view name() const override { return "hip"; }
  int device_count() const override;
  std::string device_name(int device) const override;
  Status synchronize() override;
  std::string native_target() const override { return "hip:" + m_arch; }
  int multiprocessor_count() const override { return m_multiprocessors; }
  Status can_load(std::string_view kind, std::string_view target) const override;
  Status supports(runtime::Capability c) const override;
  std::string_view communication_backend() const override { return "rccl"; }
  std::vector<std::string> environment_prefixes() const override;
  std::vector<runtime::DType> supported_dtypes() const override;

  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status memset(void* dst, int value, size_t bytes) override;
  Result<void*> allocate_host(size_t bytes) override;
  void deallocate_host(void* ptr) override;
  bool is_pinned(const void* ptr) const override;
  bool on_accelerator(const void* ptr) const override { return m_memory.contains(ptr); }
  runtime::MemoryStats memory_stats() const override;
  void reset_peak_memory() override { m_memory.reset_peak(); }

  runtime::Stream& default_stream() override;
  Result<std::unique_ptr<runtime::Stream>> create_stream() override;
  Result<std::unique_ptr<runtime::Event>> create_event() override;
  Result<std::shared_ptr<runtime::Module>> load_module(const runtime::ModuleImage& image) override;

  // Makes this accelerator's device current on the calling thread.
  Status bind() const;
  const Runtime& rt() const { return *m_rt; }

 private:
  HipAccelerator() = default;
  const Runtime* m_rt = nullptr;
  int m_device = 0;
  std::string m_arch;  // "gfx90a"
  int m_multiprocessors = 1;  // compute units, read once at creation
  runtime::MemoryTracker m_memory;
  mutable std::mutex m_pinned_mutex;
  std::set<const void*> m_pinned;
  std::once_flag m_default_once;
  std::unique_ptr<runtime::Stream> m_default_stream;
};

}  // namespace kiln::backends::hip
