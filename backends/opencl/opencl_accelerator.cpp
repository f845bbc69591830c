#include "backends/opencl/opencl_accelerator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backends/opencl/opencl_stream.h"
#include "runtime/registry.h"

namespace kiln::backends::opencl {

Result<std::unique_ptr<OpenClAccelerator>> OpenClAccelerator::create() {
  KILN_ASSIGN_OR_RETURN(const Api* cl, api());
  KILN_ASSIGN_OR_RETURN(DeviceChoice choice, choose_device(*cl));
  cl_platform_id platform = choice.platform;
  cl_device_id device = choice.device;
  auto acc = std::unique_ptr<OpenClAccelerator>(new OpenClAccelerator);
  acc->m_api = cl;
  acc->m_platform = platform;
  acc->m_device = device;
  cl_int rc = CL_SUCCESS;
  acc->m_context = cl->clCreateContext(nullptr, 1, &device, nullptr, nullptr, &rc);
  if (rc != CL_SUCCESS) return Status(StatusCode::kInternal, "creating an OpenCL context: " + error_name(rc));
  acc->m_device_name = device_string(*cl, device, CL_DEVICE_NAME);
  std::string extensions = device_string(*cl, device, CL_DEVICE_EXTENSIONS);
  acc->m_fp16 = extensions.find("cl_khr_fp16") != std::string::npos;
  acc->m_fp64 = extensions.find("cl_khr_fp64") != std::string::npos;
  acc->m_takes_il = device_string(*cl, device, CL_DEVICE_IL_VERSION).find("SPIR-V") != std::string::npos;
  acc->m_global_memory = device_value<cl_ulong>(*cl, device, CL_DEVICE_GLOBAL_MEM_SIZE);
  acc->m_compute_units = std::max(1, static_cast<int>(device_value<cl_uint>(*cl, device, CL_DEVICE_MAX_COMPUTE_UNITS)));
  acc->m_identity = platform_string(*cl, platform, CL_PLATFORM_NAME) + "|" + platform_string(*cl, platform, CL_PLATFORM_VERSION) + "|" +
                    acc->m_device_name + "|" + device_string(*cl, device, CL_DEVICE_VERSION) + "|" +
                    device_string(*cl, device, CL_DRIVER_VERSION);
  return acc;
}

OpenClAccelerator::~OpenClAccelerator() {
  m_default_stream.reset();
  if (m_context) m_api->clReleaseContext(m_context);
}

std::string OpenClAccelerator::device_name(int device) const { return device == 0 ? m_device_name : ""; }

void OpenClAccelerator::add_queue(cl_command_queue q) {
  std::lock_guard lock(m_queues_mutex);
  m_queues.insert(q);
}

void OpenClAccelerator::remove_queue(cl_command_queue q) {
  std::lock_guard lock(m_queues_mutex);
  m_queues.erase(q);
}

Result<cl_command_queue> OpenClAccelerator::new_queue() const {
  // In order (the default), with profiling for event timing.
  cl_queue_properties properties[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
  cl_int rc = CL_SUCCESS;
  cl_command_queue q = m_api->clCreateCommandQueueWithProperties(m_context, m_device, properties, &rc);
  if (rc != CL_SUCCESS) return Status(StatusCode::kInternal, "creating an OpenCL command queue: " + error_name(rc));
  return q;
}

Status OpenClAccelerator::synchronize() {
  std::lock_guard lock(m_queues_mutex);
  for (cl_command_queue q : m_queues) KILN_CL_CHECK(m_api->clFinish(q), "synchronize");
  return {};
}

Status OpenClAccelerator::can_load(std::string_view kind, std::string_view target) const {
  if (kind == "opencl-program" && target.rfind("opencl", 0) == 0) return {};
  if (kind == "spirv") {
    if (m_takes_il) return {};
    return unavailable("OpenCL device " + m_device_name + " takes no SPIR-V (CL_DEVICE_IL_VERSION is empty): build for target opencl, "
                       "which carries OpenCL C source too");
  }
  return unavailable("the OpenCL accelerator loads opencl-program artifacts (target opencl), not " + std::string(kind) + " for " +
                     std::string(target));
}

Status OpenClAccelerator::supports(runtime::Capability c) const {
  using runtime::Capability;
  switch (c) {
    case Capability::kEventTiming:
    case Capability::kGraphs:
    case Capability::kGraphEvents: return {};  // graphs: captured sequences replayed by kiln
    case Capability::kMultiDevice: return unavailable("kiln's OpenCL accelerator drives one device (choose it with KILN_OPENCL_DEVICE)");
    case Capability::kPinnedMemory:
      return unavailable("OpenCL has no page-locked host allocation; copies to and from SVM go through the driver");
    case Capability::kExternalProfiler: return unavailable("no external profiler is wired to OpenCL");
    case Capability::kFloat16:
      if (m_fp16) return {};
      return unavailable("OpenCL device " + m_device_name + " lacks cl_khr_fp16 (half is storage-only: vload_half/vstore_half)");
    case Capability::kBFloat16: return unavailable("OpenCL C has no bfloat16 type (kernels store it as ushort and compute in float)");
  }
  return unavailable("unknown capability");
}

std::vector<std::string> OpenClAccelerator::environment_prefixes() const {
  return {"KILN_OPENCL_", "OCL_ICD_", "OPENCL_VENDOR_PATH", "POCL_"};
}

std::vector<runtime::DType> OpenClAccelerator::supported_dtypes() const {
  using runtime::DType;
  std::vector<DType> out = {DType::kBool, DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat32};
  if (m_fp16) out.push_back(DType::kFloat16);
  if (m_fp64) out.push_back(DType::kFloat64);
  return out;
}

Result<void*> OpenClAccelerator::allocate(size_t bytes) {
  size_t size = std::max<size_t>(bytes, 1);
  void* p = m_api->clSVMAlloc(m_context, CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, size, 128);
  if (!p) return Status(StatusCode::kUnavailable, "OpenCL device " + m_device_name + ": cannot allocate " + std::to_string(bytes) + " bytes of SVM");
  m_memory.on_allocate(p, bytes, size);
  return p;
}

void OpenClAccelerator::deallocate(void* ptr) {
  if (!ptr || !m_memory.on_free(ptr)) return;
  // Work already queued may still use it: as cuMemFree, wait for it first.
  (void)synchronize();
  m_api->clSVMFree(m_context, ptr);
}

Status OpenClAccelerator::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return {};
  auto& s = static_cast<OpenClStream&>(default_stream());
  KILN_CL_CHECK(m_api->clEnqueueSVMMemcpy(s.queue(), CL_TRUE, dst, src, bytes, 0, nullptr, nullptr), "copy");
  return {};
}

Status OpenClAccelerator::memset(void* dst, int value, size_t bytes) {
  if (bytes == 0) return {};
  auto& s = static_cast<OpenClStream&>(default_stream());
  unsigned char byte = static_cast<unsigned char>(value);
  KILN_CL_CHECK(m_api->clEnqueueSVMMemFill(s.queue(), dst, &byte, 1, bytes, 0, nullptr, nullptr), "memset");
  KILN_CL_CHECK(m_api->clFinish(s.queue()), "memset");
  return {};
}

Result<void*> OpenClAccelerator::allocate_host(size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) return Status(StatusCode::kUnavailable, "cannot allocate " + std::to_string(bytes) + " bytes of host memory");
  return p;
}

void OpenClAccelerator::deallocate_host(void* ptr) { std::free(ptr); }

runtime::MemoryStats OpenClAccelerator::memory_stats() const {
  runtime::MemoryStats s;
  m_memory.fill(s);
  s.total = m_global_memory;
  // OpenCL reports no free figure: what kiln has not reserved.
  s.available = s.total > s.reserved ? s.total - s.reserved : 0;
  return s;
}

runtime::Stream& OpenClAccelerator::default_stream() {
  std::call_once(m_default_once, [this] {
    auto q = new_queue();
    // A context that cannot make one queue cannot run anything: fail loudly at first use.
    if (!q.ok()) {
      std::fprintf(stderr, "kiln: opencl: %s\n", q.status().message().c_str());
      std::abort();
    }
    m_default_stream = std::make_unique<OpenClStream>(*this, *q);
  });
  return *m_default_stream;
}

Result<std::unique_ptr<runtime::Stream>> OpenClAccelerator::create_stream() {
  KILN_ASSIGN_OR_RETURN(cl_command_queue q, new_queue());
  return std::unique_ptr<runtime::Stream>(std::make_unique<OpenClStream>(*this, q));
}

Result<std::unique_ptr<runtime::Event>> OpenClAccelerator::create_event() {
  return std::unique_ptr<runtime::Event>(std::make_unique<OpenClEvent>(*this));
}

Result<std::shared_ptr<runtime::Module>> OpenClAccelerator::load_module(const runtime::ModuleImage& image) {
  KILN_RETURN_IF_ERROR(can_load(image.kind, image.target));
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<OpenClModule> module, OpenClModule::load(*this, image, m_programs));
  return std::shared_ptr<runtime::Module>(std::move(module));
}

namespace {

[[maybe_unused]] const bool g_registered = [] {
  Status st = runtime::register_backend({
      .name = "opencl",
      .priority = runtime::k_priority_opencl,
      // Opening the loader reads no ICD and starts no driver.
      .is_available = [] { return loader_present(); },
      .create = []() -> Result<std::unique_ptr<runtime::Accelerator>> {
        auto acc = OpenClAccelerator::create();
        if (!acc.ok()) return acc.status();
        return std::unique_ptr<runtime::Accelerator>(std::move(acc).value());
      },
      .auto_select = false,
  });
  return st.ok();
}();

}  // namespace

}  // namespace kiln::backends::opencl
