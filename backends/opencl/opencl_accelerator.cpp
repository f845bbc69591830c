#include "backends/opencl/opencl_accelerator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "runtime/registry.h"
#include "support/hash.h"
#include "support/log.h"
#include "support/opencl_program_format.h"

namespace kiln::backends::opencl {

namespace {

// A string property through clGetPlatformInfo or clGetDeviceInfo (asked for its size first).
template <class Handle, class What>
std::string info_string(cl_int (*get)(Handle, What, size_t, void*, size_t*), Handle h, What what) {
  size_t size = 0;
  if (get(h, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string out(size, '\0');
  get(h, what, size, out.data(), nullptr);
  out.resize(std::strlen(out.c_str()));
  return out;
}

std::string platform_string(const Api& cl, cl_platform_id p, cl_platform_info what) { return info_string(cl.clGetPlatformInfo, p, what); }
std::string device_string(const Api& cl, cl_device_id d, cl_device_info what) { return info_string(cl.clGetDeviceInfo, d, what); }

template <class T>
T device_value(const Api& cl, cl_device_id d, cl_device_info what) {
  T v{};
  if (cl.clGetDeviceInfo(d, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

std::vector<cl_platform_id> platforms(const Api& cl) {
  cl_uint n = 0;
  if (cl.clGetPlatformIDs(0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::vector<cl_platform_id> out(n);
  cl.clGetPlatformIDs(n, out.data(), nullptr);
  return out;
}

std::vector<cl_device_id> devices_of(const Api& cl, cl_platform_id p) {
  cl_uint n = 0;
  if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::vector<cl_device_id> out(n);
  cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, out.data(), nullptr);
  return out;
}

bool fine_grained_svm(const Api& cl, cl_device_id d) {
  return (device_value<cl_device_svm_capabilities>(cl, d, CL_DEVICE_SVM_CAPABILITIES) & CL_DEVICE_SVM_FINE_GRAIN_BUFFER) != 0;
}

std::string type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "gpu";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (t & CL_DEVICE_TYPE_CPU) return "cpu";
  return "other";
}

// ---- events, streams, graphs

// An event is the marker its last record() enqueued. A record on one thread may replace it while
// another thread waits on it: readers take their own reference (Held) first.
class OpenClEvent final : public runtime::Event {
 public:
  explicit OpenClEvent(const OpenClAccelerator& acc) : m_acc(acc) {}
  ~OpenClEvent() override { reset(nullptr); }
  void reset(cl_event e) {
    std::lock_guard lock(m_mutex);
    if (m_event) m_acc.cl().clReleaseEvent(m_event);
    m_event = e;
  }
  // The current marker, retained for as long as the Held lives (null when never recorded).
  class Held {
   public:
    Held(const Api& cl, cl_event e) : m_cl(cl), m_event(e) {}
    Held(const Held&) = delete;
    ~Held() {
      if (m_event) m_cl.clReleaseEvent(m_event);
    }
    cl_event get() const { return m_event; }

   private:
    const Api& m_cl;
    cl_event m_event;
  };
  Held hold() {
    std::lock_guard lock(m_mutex);
    if (m_event) m_acc.cl().clRetainEvent(m_event);
    return Held(m_acc.cl(), m_event);
  }
  bool query() override {
    Held e = hold();
    if (!e.get()) return true;
    cl_int status = CL_COMPLETE;
    m_acc.cl().clGetEventInfo(e.get(), CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
    return status == CL_COMPLETE || status < 0;
  }
  Status synchronize() override {
    Held e = hold();
    if (!e.get()) return {};
    cl_event event = e.get();
    KILN_CL_CHECK(m_acc.cl().clWaitForEvents(1, &event), "waiting for an event");
    return {};
  }
  Result<double> elapsed_ms_since(runtime::Event& start) override {
    auto* s = dynamic_cast<OpenClEvent*>(&start);
    if (!s) return invalid_argument("elapsed_ms_since: the start event belongs to another accelerator");
    Held a = s->hold(), b = hold();
    if (!a.get() || !b.get()) return invalid_argument("elapsed_ms_since: both events must have been recorded");
    cl_event both[] = {a.get(), b.get()};
    KILN_CL_CHECK(m_acc.cl().clWaitForEvents(2, both), "waiting for the events");
    cl_ulong t0 = 0, t1 = 0;
    KILN_CL_CHECK(m_acc.cl().clGetEventProfilingInfo(a.get(), CL_PROFILING_COMMAND_END, sizeof t0, &t0, nullptr), "timing an event");
    KILN_CL_CHECK(m_acc.cl().clGetEventProfilingInfo(b.get(), CL_PROFILING_COMMAND_END, sizeof t1, &t1, nullptr), "timing an event");
    return (static_cast<double>(t1) - static_cast<double>(t0)) / 1e6;
  }

 private:
  const OpenClAccelerator& m_acc;
  std::mutex m_mutex;
  cl_event m_event = nullptr;
};

class OpenClStream;
// One piece of captured work, replayed on whichever stream the graph is launched on.
using CapturedWork = std::function<Status(OpenClStream&)>;

class OpenClGraph final : public runtime::Graph {
 public:
  explicit OpenClGraph(std::vector<CapturedWork> work) : m_work(std::move(work)) {}
  Status launch(runtime::Stream& stream) override;

 private:
  std::vector<CapturedWork> m_work;
};

class OpenClStream final : public runtime::Stream {
 public:
  OpenClStream(OpenClAccelerator& acc, cl_command_queue q) : m_acc(acc), m_queue(q) { acc.add_queue(q); }
  ~OpenClStream() override {
    m_acc.cl().clFinish(m_queue);
    if (m_last) m_acc.cl().clReleaseEvent(m_last);
    m_acc.remove_queue(m_queue);
    m_acc.cl().clReleaseCommandQueue(m_queue);
  }
  cl_command_queue queue() const { return m_queue; }
  const Api& cl() const { return m_acc.cl(); }

  bool capturing() {
    std::lock_guard lock(m_mutex);
    return m_capturing;
  }

  // Runs `work` now, or records it when capturing.
  Status submit(CapturedWork work) {
    {
      std::lock_guard lock(m_mutex);
      if (m_capturing) {
        m_captured.push_back(std::move(work));
        return {};
      }
    }
    return work(*this);
  }

  Status copy_async(void* dst, const void* src, size_t bytes) override {
    return submit([dst, src, bytes](OpenClStream& s) -> Status {
      cl_event done = nullptr;
      KILN_CL_CHECK(s.cl().clEnqueueSVMMemcpy(s.queue(), CL_FALSE, dst, src, bytes, 0, nullptr, &done), "copy_async");
      s.track(done);
      return {};
    });
  }
  Status memset_async(void* dst, int value, size_t bytes) override {
    return submit([dst, value, bytes](OpenClStream& s) -> Status {
      unsigned char byte = static_cast<unsigned char>(value);
      cl_event done = nullptr;
      KILN_CL_CHECK(s.cl().clEnqueueSVMMemFill(s.queue(), dst, &byte, 1, bytes, 0, nullptr, &done), "memset_async");
      s.track(done);
      return {};
    });
  }
  Status record(runtime::Event& event) override {
    auto* e = dynamic_cast<OpenClEvent*>(&event);
    if (!e) return invalid_argument("record: the event belongs to another accelerator");
    return submit([e](OpenClStream& s) -> Status {
      cl_event marker = nullptr;
      KILN_CL_CHECK(s.cl().clEnqueueMarkerWithWaitList(s.queue(), 0, nullptr, &marker), "recording an event");
      s.cl().clFlush(s.queue());  // so that another queue waiting on it sees it submitted
      e->reset(marker);
      return {};
    });
  }
  Status wait(runtime::Event& event) override {
    auto* e = dynamic_cast<OpenClEvent*>(&event);
    if (!e) return invalid_argument("wait: the event belongs to another accelerator");
    return submit([e](OpenClStream& s) -> Status {
      OpenClEvent::Held held = e->hold();
      cl_event marker = held.get();
      if (!marker) return {};  // never recorded: nothing to wait for
      cl_event done = nullptr;
      KILN_CL_CHECK(s.cl().clEnqueueBarrierWithWaitList(s.queue(), 1, &marker, &done), "waiting on an event");
      s.track(done);
      return {};
    });
  }
  Status synchronize() override {
    KILN_CL_CHECK(cl().clFinish(m_queue), "synchronizing a stream");
    return {};
  }
  bool query() override {
    // In order: the last command done means all are.
    std::lock_guard lock(m_last_mutex);
    if (!m_last) return true;
    cl().clFlush(m_queue);
    cl_int status = CL_COMPLETE;
    cl().clGetEventInfo(m_last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr);
    return status == CL_COMPLETE || status < 0;
  }
  // Keeps the event of the newest command, for query(); the one before is released.
  void track(cl_event e) {
    std::lock_guard lock(m_last_mutex);
    if (m_last) cl().clReleaseEvent(m_last);
    m_last = e;
  }
  Status begin_capture() override {
    std::lock_guard lock(m_mutex);
    if (m_capturing) return invalid_argument("begin_capture: this stream is already capturing");
    m_capturing = true;
    m_captured.clear();
    return {};
  }
  Result<std::unique_ptr<runtime::Graph>> end_capture() override {
    std::lock_guard lock(m_mutex);
    if (!m_capturing) return invalid_argument("end_capture: this stream is not capturing (call begin_capture first)");
    m_capturing = false;
    return std::unique_ptr<runtime::Graph>(std::make_unique<OpenClGraph>(std::move(m_captured)));
  }

 private:
  OpenClAccelerator& m_acc;
  cl_command_queue m_queue;
  std::mutex m_mutex;
  bool m_capturing = false;
  std::vector<CapturedWork> m_captured;
  std::mutex m_last_mutex;
  cl_event m_last = nullptr;
};

Status OpenClGraph::launch(runtime::Stream& stream) {
  auto* s = dynamic_cast<OpenClStream*>(&stream);
  if (!s) return invalid_argument("graph launch: the stream belongs to another accelerator");
  for (auto& work : m_work) KILN_RETURN_IF_ERROR(work(*s));
  return {};
}

// ---- modules and kernels

class OpenClKernel final : public runtime::Kernel {
 public:
  OpenClKernel(const OpenClAccelerator& acc, runtime::KernelSignature sig, cl_kernel kernel, std::string kinds)
      : m_acc(acc), m_sig(std::move(sig)), m_kernel(kernel), m_kinds(std::move(kinds)) {}
  ~OpenClKernel() override { m_acc.cl().clReleaseKernel(m_kernel); }
  const runtime::KernelSignature& signature() const override { return m_sig; }
  using runtime::Kernel::launch;

  Status launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args, size_t num_args) override {
    auto* s = dynamic_cast<OpenClStream*>(&stream);
    if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
    if (num_args != m_sig.param_sizes.size())
      return invalid_argument("kernel " + m_sig.name + " takes " + std::to_string(m_sig.param_sizes.size()) +
                              " arguments, launch passed " + std::to_string(num_args));
    if (config.grid.count() == 0 || config.block.count() == 0) return invalid_argument("kernel " + m_sig.name + ": empty grid or block");
    // Now: clSetKernelArg copies the values, so nothing is allocated. Captured: the values are
    // copied into the graph, as Kernel::launch promises, and set when it runs.
    if (!s->capturing()) return enqueue(*s, args, config);
    std::vector<std::string> values(num_args);
    for (size_t i = 0; i < num_args; ++i) values[i].assign(static_cast<const char*>(args[i]), m_sig.param_sizes[i]);
    return s->submit([this, values = std::move(values), config](OpenClStream& on) {
      std::vector<const void*> pointers;
      for (auto& v : values) pointers.push_back(v.data());
      return enqueue(on, pointers.data(), config);
    });
  }

 private:
  Status enqueue(OpenClStream& s, const void* const* args, const runtime::LaunchConfig& config) {
    const Api& cl = m_acc.cl();
    // Arguments live in the kernel object until the enqueue: one launch at a time per kernel.
    std::lock_guard lock(m_mutex);
    for (size_t i = 0; i < m_kinds.size(); ++i) {
      cl_uint index = static_cast<cl_uint>(i);
      if (m_kinds[i] == k_opencl_local) {
        KILN_CL_CHECK(cl.clSetKernelArg(m_kernel, index, std::max<size_t>(config.shared_bytes, 4), nullptr),
                      "kernel " + m_sig.name + ": its local memory (" + std::to_string(config.shared_bytes) + " bytes)");
      } else if (m_kinds[i] == k_opencl_value) {
        KILN_CL_CHECK(cl.clSetKernelArg(m_kernel, index, m_sig.param_sizes[i], args[i]),
                      "kernel " + m_sig.name + ": argument " + std::to_string(i));
      } else {
        void* pointer = nullptr;
        std::memcpy(&pointer, args[i], sizeof pointer);
        KILN_CL_CHECK(cl.clSetKernelArgSVMPointer(m_kernel, index, pointer),
                      "kernel " + m_sig.name + ": argument " + std::to_string(i) + " (memory from this accelerator's allocate?)");
      }
    }
    size_t global[3] = {size_t{config.grid.x} * config.block.x, size_t{config.grid.y} * config.block.y,
                        size_t{config.grid.z} * config.block.z};
    size_t local[3] = {config.block.x, config.block.y, config.block.z};
    cl_event done = nullptr;
    KILN_CL_CHECK(cl.clEnqueueNDRangeKernel(s.queue(), m_kernel, 3, nullptr, global, local, 0, nullptr, &done),
                  "launch of " + m_sig.name);
    s.track(done);
    return {};
  }

  const OpenClAccelerator& m_acc;
  runtime::KernelSignature m_sig;
  cl_kernel m_kernel;
  std::string m_kinds;
  std::mutex m_mutex;
};

class OpenClModule final : public runtime::Module {
 public:
  OpenClModule(const OpenClAccelerator& acc, cl_program program, std::string label)
      : m_acc(acc), m_program(program), m_label(std::move(label)) {}
  ~OpenClModule() override {
    m_kernels.clear();
    m_acc.cl().clReleaseProgram(m_program);
  }
  Result<runtime::Kernel*> kernel(std::string_view name) override {
    auto it = m_kernels.find(name);
    if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
    return static_cast<runtime::Kernel*>(it->second.get());
  }
  // Checks the signature the spec gives against the kernel the compiler made, then creates it.
  Status add(const runtime::KernelSignature& sig, const OpenClKernelInfo& info) {
    size_t n = sig.param_sizes.size();
    bool trailing_local = info.params.size() == n + 1 && info.params.back() == k_opencl_local;
    if (info.params.size() != n && !trailing_local)
      return invalid_argument(m_label + ": kernel " + sig.name + " has " + std::to_string(info.params.size()) +
                              " parameters; the spec's entry has " + std::to_string(n) +
                              " (a kernel may take one more: a last __local pointer for the launch's shared memory)");
    for (size_t i = 0; i < n; ++i) {
      if (info.params[i] == k_opencl_local)
        return invalid_argument(m_label + ": kernel " + sig.name + " parameter " + std::to_string(i) +
                                " is __local; only the last, extra parameter may be (the launch's shared memory)");
      if (info.value_sizes[i] != sig.param_sizes[i])
        return invalid_argument(m_label + ": kernel " + sig.name + " parameter " + std::to_string(i) + " is " +
                                std::to_string(info.value_sizes[i]) + " bytes; the spec's is " + std::to_string(sig.param_sizes[i]) +
                                " (OpenCL's long is int64_t, int is int32_t)");
    }
    const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
    cl_int rc = CL_SUCCESS;
    cl_kernel k = m_acc.cl().clCreateKernel(m_program, symbol.c_str(), &rc);
    if (rc != CL_SUCCESS) return Status(StatusCode::kNotFound, m_label + ": kernel " + sig.name + ": " + error_name(rc));
    m_kernels[sig.name] = std::make_unique<OpenClKernel>(m_acc, sig, k, info.params);
    return {};
  }

 private:
  const OpenClAccelerator& m_acc;
  cl_program m_program;
  std::string m_label;
  std::map<std::string, std::unique_ptr<OpenClKernel>, std::less<>> m_kernels;
};

// The build log of `program` on `device`, for a failed build's message.
std::string build_log(const Api& cl, cl_program program, cl_device_id device) {
  size_t size = 0;
  if (cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  cl.clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  log.resize(std::strlen(log.c_str()));
  return log;
}

std::optional<std::string> program_binary(const Api& cl, cl_program program) {
  size_t size = 0;
  if (cl.clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0) return std::nullopt;
  std::string bytes(size, '\0');
  unsigned char* out = reinterpret_cast<unsigned char*>(bytes.data());
  if (cl.clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof out, &out, nullptr) != CL_SUCCESS) return std::nullopt;
  return bytes;
}

}  // namespace

Result<std::vector<DeviceListing>> list_devices() {
  KILN_ASSIGN_OR_RETURN(const Api* cl, api());
  std::vector<DeviceListing> out;
  for (cl_platform_id p : platforms(*cl)) {
    DeviceListing l;
    l.platform = platform_string(*cl, p, CL_PLATFORM_NAME) + " (" + platform_string(*cl, p, CL_PLATFORM_VERSION) + ")";
    for (cl_device_id d : devices_of(*cl, p)) {
      std::string il = device_string(*cl, d, CL_DEVICE_IL_VERSION);
      l.devices.push_back(type_name(device_value<cl_device_type>(*cl, d, CL_DEVICE_TYPE)) + " " +
                          device_string(*cl, d, CL_DEVICE_NAME) + ", driver " + device_string(*cl, d, CL_DRIVER_VERSION) +
                          ", SVM " + (fine_grained_svm(*cl, d) ? "fine-grained" : "none (kiln cannot use it)") + ", IL " +
                          (il.empty() ? "none (OpenCL C source)" : il));
    }
    out.push_back(std::move(l));
  }
  return out;
}

Result<std::unique_ptr<OpenClAccelerator>> OpenClAccelerator::create() {
  KILN_ASSIGN_OR_RETURN(const Api* cl, api());
  std::vector<cl_platform_id> all = platforms(*cl);
  if (all.empty()) return unavailable("the OpenCL ICD loader finds no platform (install a driver such as pocl-opencl-icd)");
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  if (const char* env = std::getenv("KILN_OPENCL_DEVICE"); env && *env) {
    std::string spec = env;
    size_t colon = spec.find(':');
    int p = colon == std::string::npos ? 0 : std::atoi(spec.substr(0, colon).c_str());
    int d = std::atoi(colon == std::string::npos ? spec.c_str() : spec.substr(colon + 1).c_str());
    if (p < 0 || p >= static_cast<int>(all.size())) return invalid_argument("KILN_OPENCL_DEVICE=" + spec + ": no platform " + std::to_string(p));
    auto devices = devices_of(*cl, all[p]);
    if (d < 0 || d >= static_cast<int>(devices.size())) return invalid_argument("KILN_OPENCL_DEVICE=" + spec + ": no device " + std::to_string(d));
    platform = all[p];
    device = devices[d];
  } else {
    for (cl_device_type wanted : {cl_device_type{CL_DEVICE_TYPE_GPU}, cl_device_type{CL_DEVICE_TYPE_ALL}})
      for (cl_platform_id p : all)
        for (cl_device_id d : devices_of(*cl, p))
          if (!device && (device_value<cl_device_type>(*cl, d, CL_DEVICE_TYPE) & wanted) && fine_grained_svm(*cl, d)) {
            platform = p;
            device = d;
          }
    if (!device) return unavailable("no OpenCL device with fine-grained SVM (kiln hands out device memory as SVM pointers)");
  }
  if (!fine_grained_svm(*cl, device))
    return unavailable("OpenCL device " + device_string(*cl, device, CL_DEVICE_NAME) +
                       " has no fine-grained SVM buffers, which kiln's OpenCL backend needs for device pointers");
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
  OpenClProgramImage program_image;
  if (image.kind == "spirv") {
    program_image.spirv = std::string(image.bytes);
  } else {
    auto decoded = decode_opencl_program(image.bytes);
    if (!decoded.ok()) return Status(StatusCode::kDataLoss, image.label + ": " + decoded.status().message());
    program_image = std::move(decoded).value();
  }
  // What this device built from these bytes before, in this process or another.
  std::string derived_key = "opencl-binary|" + m_identity + "|" + xxh3_128(image.bytes).hex();
  cl_int rc = CL_SUCCESS;
  cl_program program = nullptr;
  bool from_cache = false;
  double build_start = log_clock_ms();
  if (image.derived_cache)
    if (auto binary = image.derived_cache->get(derived_key)) {
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(binary->data());
      size_t size = binary->size();
      cl_int binary_status = CL_SUCCESS;
      program = m_api->clCreateProgramWithBinary(m_context, 1, &m_device, &size, &bytes, &binary_status, &rc);
      if (rc == CL_SUCCESS && binary_status == CL_SUCCESS &&
          m_api->clBuildProgram(program, 1, &m_device, program_image.build_options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
        from_cache = true;
        m_reloaded_binaries.fetch_add(1);
      } else if (program) {
        m_api->clReleaseProgram(program);  // a binary this driver no longer takes: build again
        program = nullptr;
      }
    }
  if (!program) {
    bool from_il = m_takes_il && !program_image.spirv.empty();
    (from_il ? m_built_from_il : m_built_from_source).fetch_add(1);
    if (from_il) {
      program = m_api->clCreateProgramWithIL(m_context, program_image.spirv.data(), program_image.spirv.size(), &rc);
    } else if (!program_image.source.empty()) {
      const char* text = program_image.source.c_str();
      size_t length = program_image.source.size();
      program = m_api->clCreateProgramWithSource(m_context, 1, &text, &length, &rc);
    } else {
      return unavailable(image.label + ": the artifact holds SPIR-V only, and OpenCL device " + m_device_name + " takes no IL");
    }
    if (rc != CL_SUCCESS) return Status(StatusCode::kInternal, image.label + ": creating an OpenCL program: " + error_name(rc));
    rc = m_api->clBuildProgram(program, 1, &m_device, program_image.build_options.c_str(), nullptr, nullptr);
    if (rc != CL_SUCCESS) {
      std::string log = build_log(*m_api, program, m_device);
      m_api->clReleaseProgram(program);
      return Status(StatusCode::kCompileError, image.label + ": OpenCL device " + m_device_name + " could not build it (" +
                                                   error_name(rc) + "):\n" + log);
    }
  }
  KILN_LOG_AT(kDebug, "load", image.label + ": OpenCL program " + (from_cache ? "reloaded from its device binary" : "built by the device") +
                                  " in " + std::to_string(log_clock_ms() - build_start) + " ms");
  auto module = std::make_shared<OpenClModule>(*this, program, image.label);
  for (auto& sig : image.kernels) {
    const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
    auto info = std::find_if(program_image.kernels.begin(), program_image.kernels.end(), [&](auto& k) { return k.name == symbol; });
    if (info == program_image.kernels.end()) {
      if (image.kind == "spirv") continue;  // bare SPIR-V says nothing of its kernels
      return not_found(image.label + " has no OpenCL kernel named '" + symbol + "' (__kernel void " + symbol + "(...))");
    }
    KILN_RETURN_IF_ERROR(module->add(sig, *info));
  }
  if (!from_cache && image.derived_cache)
    if (auto binary = program_binary(*m_api, program))
      image.derived_cache->put(derived_key, *binary, "opencl-binary", "opencl:" + m_device_name, image.label);
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
