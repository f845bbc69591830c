// The OpenCL accelerator: one device of one platform through the ICD loader (dlopen), device
// memory as fine-grained SVM (so a device pointer is a pointer, as on every other backend),
// in-order command queues as streams, markers as events, and graphs of kiln's own
// (opencl_stream.h); programs built from SPIR-V where the device takes IL and from the
// preprocessed OpenCL C otherwise, with the device binary kept in the caller's DerivedCodeCache
// so the next process builds nothing (opencl_module.h); the platforms and devices
// (opencl_devices.h).
//
// Registered as "opencl" and chosen by name only (KILN_ACCELERATOR=opencl): an ICD loader is on
// most machines, and telling a GPU from a CPU device would mean initialising every platform.
// Device choice: $KILN_OPENCL_DEVICE ("platform:device" indexes, or a device index on the first
// platform), else the first GPU, else the first device.
#pragma once

#include <memory>
#include <mutex>
#include <set>

#include "backends/opencl/opencl_api.h"
#include "backends/opencl/opencl_devices.h"  // list_devices, for kiln doctor
#include "backends/opencl/opencl_module.h"
#include "runtime/accelerator.h"
#include "runtime/memory_tracker.h"

namespace kiln::backends::opencl {

class OpenClAccelerator final : public runtime::Accelerator {
 public:
  static Result<std::unique_ptr<OpenClAccelerator>> create();
  ~OpenClAccelerator() override;

  std::string_view name() const override { return "opencl"; }
  int device_count() const override { return 1; }
  int multiprocessor_count() const override { return m_compute_units; }
  std::string device_name(int device) const override;
  Status synchronize() override;
  std::string native_target() const override { return "opencl:generic"; }
  Status can_load(std::string_view kind, std::string_view target) const override;
  Status supports(runtime::Capability c) const override;
  std::string_view communication_backend() const override { return "gloo"; }
  std::vector<std::string> environment_prefixes() const override;
  std::vector<runtime::DType> supported_dtypes() const override;

  Result<void*> allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status memset(void* dst, int value, size_t bytes) override;
  Result<void*> allocate_host(size_t bytes) override;
  void deallocate_host(void* ptr) override;
  bool is_pinned(const void*) const override { return false; }
  bool on_accelerator(const void* ptr) const override { return m_memory.contains(ptr); }
  runtime::MemoryStats memory_stats() const override;
  void reset_peak_memory() override { m_memory.reset_peak(); }

  runtime::Stream& default_stream() override;
  Result<std::unique_ptr<runtime::Stream>> create_stream() override;
  Result<std::unique_ptr<runtime::Event>> create_event() override;
  Result<std::shared_ptr<runtime::Module>> load_module(const runtime::ModuleImage& image) override;

  const Api& cl() const { return *m_api; }
  cl_context context() const { return m_context; }
  cl_device_id device() const { return m_device; }
  // What a device binary depends on besides the program: platform, device and driver.
  const std::string& device_identity() const { return m_identity; }
  bool takes_il() const { return m_takes_il; }

  // How the programs loaded so far were made: built by the device's compiler (from SPIR-V or
  // OpenCL C), or reloaded from a device binary a DerivedCodeCache kept.
  struct ProgramCounts {
    uint64_t built_from_source = 0, built_from_il = 0, reloaded_binaries = 0;
  };
  ProgramCounts program_counts() const {
    return {m_programs.built_from_source.load(), m_programs.built_from_il.load(), m_programs.reloaded_binaries.load()};
  }

  // Streams register their queues so that deallocate can wait for work that may still use memory.
  void add_queue(cl_command_queue q);
  void remove_queue(cl_command_queue q);
  Result<cl_command_queue> new_queue() const;

 private:
  OpenClAccelerator() = default;
  const Api* m_api = nullptr;
  cl_platform_id m_platform = nullptr;
  cl_device_id m_device = nullptr;
  cl_context m_context = nullptr;
  std::string m_device_name, m_identity;
  bool m_takes_il = false, m_fp16 = false, m_fp64 = false;
  uint64_t m_global_memory = 0;
  int m_compute_units = 1;
  runtime::MemoryTracker m_memory;
  ProgramCounters m_programs;
  std::mutex m_queues_mutex;
  std::set<cl_command_queue> m_queues;
  std::once_flag m_default_once;
  std::unique_ptr<runtime::Stream> m_default_stream;
  Status m_default_status;
};

}  // namespace kiln::backends::opencl
