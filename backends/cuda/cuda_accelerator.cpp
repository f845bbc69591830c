#include "backends/cuda/cuda_accelerator.h"

#include <atomic>
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "backends/cuda/nvtx.h"

#include "runtime/registry.h"
#include "support/cuda_module_format.h"
#include "support/cuda_toolkit.h"

namespace kiln::backends::cuda {
namespace {

// CUdevice_attribute values (cuda.h): the compute capability, the multiprocessor count.
constexpr int k_attr_cc_major = 75, k_attr_cc_minor = 76, k_attr_multiprocessor_count = 16;

using DevicePtr = unsigned long long;
DevicePtr dptr(const void* p) { return reinterpret_cast<DevicePtr>(p); }

class CudaEvent final : public runtime::Event {
 public:
  CudaEvent(const CudaAccelerator& acc, void* event) : m_acc(acc), m_event(event) {}
  ~CudaEvent() override {
    if (m_acc.bind().ok()) m_acc.drv().cuEventDestroy_v2(m_event);
  }
  bool query() override { return m_acc.bind().ok() && m_acc.drv().cuEventQuery(m_event) == 0; }
  Status synchronize() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuEventSynchronize(m_event), "event synchronize");
    return {};
  }
  Result<double> elapsed_ms_since(runtime::Event& start) override {
    auto* s = dynamic_cast<CudaEvent*>(&start);
    if (!s) return invalid_argument("elapsed time: the events belong to different accelerators");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    float ms = 0;
    KILN_CU_CHECK(m_acc.drv(), cuEventElapsedTime(&ms, s->handle(), m_event), "elapsed time");
    return static_cast<double>(ms);
  }
  void* handle() const { return m_event; }

 private:
  const CudaAccelerator& m_acc;
  void* m_event;
};

class CudaGraph final : public runtime::Graph {
 public:
  CudaGraph(const CudaAccelerator& acc, void* graph, void* exec) : m_acc(acc), m_graph(graph), m_exec(exec) {}
  ~CudaGraph() override {
    if (m_acc.bind().ok()) {
      m_acc.drv().cuGraphExecDestroy(m_exec);
      m_acc.drv().cuGraphDestroy(m_graph);
    }
  }
  Status launch(runtime::Stream& stream) override;

 private:
  const CudaAccelerator& m_acc;
  void* m_graph;
  void* m_exec;
};

class CudaStream final : public runtime::Stream {
 public:
  CudaStream(const CudaAccelerator& acc, void* stream, bool owned = true) : m_acc(acc), m_stream(stream), m_owned(owned) {}
  ~CudaStream() override {
    if (m_owned && m_acc.bind().ok()) m_acc.drv().cuStreamDestroy_v2(m_stream);
  }
  Status copy_async(void* dst, const void* src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuMemcpyAsync(dptr(dst), dptr(src), bytes, m_stream), "copy");
    return {};
  }
  Status memset_async(void* dst, int value, size_t bytes) override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuMemsetD8Async(dptr(dst), static_cast<unsigned char>(value), bytes, m_stream), "memset");
    return {};
  }
  Status record(runtime::Event& event) override {
    auto* e = dynamic_cast<CudaEvent*>(&event);
    if (!e) return invalid_argument("record: the event belongs to another accelerator");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuEventRecord(e->handle(), m_stream), "event record");
    return {};
  }
  Status wait(runtime::Event& event) override {
    auto* e = dynamic_cast<CudaEvent*>(&event);
    if (!e) return invalid_argument("wait: the event belongs to another accelerator");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuStreamWaitEvent(m_stream, e->handle(), 0), "stream wait");
    return {};
  }
  Status synchronize() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_CU_CHECK(m_acc.drv(), cuStreamSynchronize(m_stream), "stream synchronize");
    return {};
  }
  bool query() override { return m_acc.bind().ok() && m_acc.drv().cuStreamQuery(m_stream) == 0; }
  Status begin_capture() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    // Thread-local mode: other threads' unrelated CUDA calls do not break this capture.
    KILN_CU_CHECK(m_acc.drv(), cuStreamBeginCapture_v2(m_stream, 1 /* CU_STREAM_CAPTURE_MODE_THREAD_LOCAL */),
                  "begin capture");
    return {};
  }
  Result<std::unique_ptr<runtime::Graph>> end_capture() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    void* graph = nullptr;
    KILN_CU_CHECK(m_acc.drv(), cuStreamEndCapture(m_stream, &graph), "end capture");
    void* exec = nullptr;
    if (int rc = m_acc.drv().cuGraphInstantiateWithFlags(&exec, graph, 0); rc != 0) {
      m_acc.drv().cuGraphDestroy(graph);
      return Status(StatusCode::kInternal, "instantiate the captured graph: " + m_acc.drv().error("cuGraphInstantiateWithFlags", rc));
    }
    return std::unique_ptr<runtime::Graph>(std::make_unique<CudaGraph>(m_acc, graph, exec));
  }
  void* handle() const { return m_stream; }

 private:
  const CudaAccelerator& m_acc;
  void* m_stream;
  bool m_owned;  // false: adopted (wrap_stream), the framework destroys it
};

Status CudaGraph::launch(runtime::Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream);
  if (!s) return invalid_argument("graph launch: the stream belongs to another accelerator");
  KILN_RETURN_IF_ERROR(m_acc.bind());
  KILN_CU_CHECK(m_acc.drv(), cuGraphLaunch(m_exec, s->handle()), "graph launch");
  return {};
}

class CudaKernel final : public runtime::Kernel {
 public:
  CudaKernel(const CudaAccelerator& acc, runtime::KernelSignature sig, void* function)
      : m_acc(acc), m_sig(std::move(sig)), m_function(function) {}
  const runtime::KernelSignature& signature() const override { return m_sig; }
  using runtime::Kernel::launch;
  Status launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args,
                size_t num_args) override {
    const runtime::Dim3& grid = config.grid;
    const runtime::Dim3& block = config.block;
    auto* s = dynamic_cast<CudaStream*>(&stream);
    if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
    if (num_args != m_sig.param_sizes.size())
      return invalid_argument("kernel " + m_sig.name + " takes " + std::to_string(m_sig.param_sizes.size()) +
                              " arguments, launch passed " + std::to_string(num_args));
    KILN_RETURN_IF_ERROR(m_acc.bind());
    // Past 48 KiB of dynamic shared memory a kernel must opt in, once per size it grows to.
    if (config.shared_bytes > k_default_shared_limit && config.shared_bytes > m_shared_limit.load()) {
      KILN_CU_CHECK(m_acc.drv(),
                    cuFuncSetAttribute(m_function, k_cu_func_attribute_max_dynamic_shared_size_bytes,
                                       static_cast<int>(config.shared_bytes)),
                    "allowing " + std::to_string(config.shared_bytes) + " bytes of shared memory to " + m_sig.name);
      m_shared_limit.store(config.shared_bytes);
    }
    // cuLaunchKernel copies the argument values before it returns, as Kernel::launch promises.
    KILN_CU_CHECK(m_acc.drv(),
                  cuLaunchKernel(m_function, grid.x, grid.y, grid.z, block.x, block.y, block.z, config.shared_bytes,
                                 s->handle(), const_cast<void**>(args), nullptr),
                  "launch of " + m_sig.name);
    return {};
  }

 private:
  // CUDA's default cap on dynamic shared memory, and CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  static constexpr uint32_t k_default_shared_limit = 48 * 1024;
  static constexpr int k_cu_func_attribute_max_dynamic_shared_size_bytes = 8;
  const CudaAccelerator& m_acc;
  runtime::KernelSignature m_sig;
  void* m_function;
  std::atomic<uint32_t> m_shared_limit{k_default_shared_limit};
};

class CudaModule final : public runtime::Module {
 public:
  CudaModule(const CudaAccelerator& acc, void* module, std::string label) : m_acc(acc), m_module(module), m_label(std::move(label)) {}
  ~CudaModule() override {
    if (m_acc.bind().ok()) m_acc.drv().cuModuleUnload(m_module);
  }
  Result<runtime::Kernel*> kernel(std::string_view name) override {
    auto it = m_kernels.find(name);
    if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
    return static_cast<runtime::Kernel*>(it->second.get());
  }
  Status add(const runtime::KernelSignature& sig) {
    void* fn = nullptr;
    const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
    KILN_CU_CHECK(m_acc.drv(), cuModuleGetFunction(&fn, m_module, symbol.c_str()),
                  m_label + ": kernel " + sig.name + " (is it extern \"C\" __global__?)");
    m_kernels[sig.name] = std::make_unique<CudaKernel>(m_acc, sig, fn);
    return {};
  }

 private:
  const CudaAccelerator& m_acc;
  void* m_module;
  std::string m_label;
  std::map<std::string, std::unique_ptr<CudaKernel>, std::less<>> m_kernels;
};

// The oldest compute capability of a target such as cuda:sm_80,sm_90 (lists are sorted).
int sm_of(std::string_view target) {
  auto archs = cuda_archs_in(target);
  return archs.empty() ? -1 : archs.front();
}

}  // namespace

Result<std::unique_ptr<CudaAccelerator>> CudaAccelerator::create(int device) {
  KILN_ASSIGN_OR_RETURN(const Driver* d, driver());
  int count = 0;
  KILN_CU_CHECK(*d, cuDeviceGetCount(&count), "count devices");
  if (count <= device) return unavailable("no CUDA device " + std::to_string(device) + " (" + std::to_string(count) + " found)");
  std::unique_ptr<CudaAccelerator> acc(new CudaAccelerator);
  acc->m_driver = d;
  KILN_CU_CHECK(*d, cuDeviceGet(&acc->m_device, device), "get device");
  int major = 0, minor = 0;
  KILN_CU_CHECK(*d, cuDeviceGetAttribute(&major, k_attr_cc_major, acc->m_device), "compute capability");
  KILN_CU_CHECK(*d, cuDeviceGetAttribute(&minor, k_attr_cc_minor, acc->m_device), "compute capability");
  acc->m_sm = major * 10 + minor;
  KILN_CU_CHECK(*d, cuDeviceGetAttribute(&acc->m_multiprocessors, k_attr_multiprocessor_count, acc->m_device), "multiprocessor count");
  acc->m_device_index = device;
  KILN_CU_CHECK(*d, cuDevicePrimaryCtxRetain(&acc->m_context, acc->m_device), "retain the primary context");
  return acc;
}

CudaAccelerator::~CudaAccelerator() {
  m_default_stream.reset();
  if (m_context) m_driver->cuDevicePrimaryCtxRelease_v2(m_device);
}

Status CudaAccelerator::bind() const {
  // Remember per thread which context kiln made current, so a launch does not pay for
  // cuCtxSetCurrent each time (it measured ~10% of a queued launch on an H100). A program
  // that switches contexts behind kiln's back on the same thread must call this again.
  thread_local void* t_bound = nullptr;
  if (t_bound == m_context) return {};
  KILN_CU_CHECK(*m_driver, cuCtxSetCurrent(m_context), "make the CUDA context current");
  t_bound = m_context;
  return {};
}

int CudaAccelerator::device_count() const {
  int n = 0;
  return m_driver->cuDeviceGetCount(&n) == 0 ? n : 0;
}

std::string CudaAccelerator::device_name(int device) const {
  int dev = 0;
  char name[256] = {};
  if (m_driver->cuDeviceGet(&dev, device) != 0 || m_driver->cuDeviceGetName(name, sizeof name, dev) != 0) return "CUDA device";
  return name;
}

Status CudaAccelerator::can_load(std::string_view kind, std::string_view target) const {
  if (kind != "cuda-module") return unavailable("the cuda accelerator loads cuda-module artifacts, not " + std::string(kind));
  int sm = sm_of(target);
  if (target.substr(0, 5) != "cuda:" || sm < 0) return unavailable("artifact target " + std::string(target) + " is not a CUDA target");
  if (sm > m_sm)
    return unavailable("artifact built for sm_" + std::to_string(sm) + ", but this GPU (" + device_name(0) + ") is sm_" +
                       std::to_string(m_sm));
  return {};
}

Status CudaAccelerator::synchronize() {
  KILN_RETURN_IF_ERROR(bind());
  KILN_CU_CHECK(*m_driver, cuCtxSynchronize(), "synchronize the device");
  return {};
}

Status CudaAccelerator::supports(runtime::Capability c) const {
  using runtime::Capability;
  switch (c) {
    case Capability::kMultiDevice:
      return unavailable("cuda: kiln drives one GPU per process (the first visible one); start one process per GPU "
                         "with CUDA_VISIBLE_DEVICES, as launchers do");
    case Capability::kPinnedMemory:
    case Capability::kEventTiming:
    case Capability::kGraphs:
    case Capability::kGraphEvents:
      return {};
    case Capability::kExternalProfiler: {
      auto n = nvtx();
      return n.ok() ? Status{} : n.status();
    }
    case Capability::kFloat16:
      if (m_sm >= 53) return {};
      return unavailable("cuda: float16 arithmetic needs sm_53 or newer, this GPU is sm_" + std::to_string(m_sm));
    case Capability::kBFloat16:
      if (m_sm >= 80) return {};
      return unavailable("cuda: bfloat16 arithmetic needs sm_80 or newer, this GPU is sm_" + std::to_string(m_sm));
  }
  return invalid_argument("unknown capability");
}

std::vector<std::string> CudaAccelerator::environment_prefixes() const {
  return {"KILN_", "CUDA_", "NCCL_", "NVIDIA_", "MASTER_ADDR", "MASTER_PORT"};
}

std::vector<runtime::DType> CudaAccelerator::supported_dtypes() const {
  std::vector<runtime::DType> out;
  for (auto t : runtime::k_all_dtypes) {
    if (t == runtime::DType::kFloat16 && !supports(runtime::Capability::kFloat16).ok()) continue;
    if (t == runtime::DType::kBFloat16 && !supports(runtime::Capability::kBFloat16).ok()) continue;
    out.push_back(t);
  }
  return out;
}

void CudaAccelerator::profiler_push(const std::string& name) {
  if (auto n = nvtx(); n.ok()) (*n)->range_push(name.c_str());
}

void CudaAccelerator::profiler_pop() {
  if (auto n = nvtx(); n.ok()) (*n)->range_pop();
}

Status CudaAccelerator::memset(void* dst, int value, size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  KILN_CU_CHECK(*m_driver, cuMemsetD8_v2(dptr(dst), static_cast<unsigned char>(value), bytes), "memset");
  return {};
}

bool CudaAccelerator::is_pinned(const void* ptr) const {
  unsigned flags = 0;
  return ptr && bind().ok() && m_driver->cuMemHostGetFlags(&flags, const_cast<void*>(ptr)) == 0;
}

bool CudaAccelerator::on_accelerator(const void* ptr) const {
  // CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) -> CU_MEMORYTYPE_DEVICE (2); also true for memory
  // other libraries allocated on this GPU.
  unsigned type = 0;
  return ptr && bind().ok() && m_driver->cuPointerGetAttribute(&type, 2, dptr(ptr)) == 0 && type == 2;
}

Status CudaAccelerator::present_without_initialising() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && (!*v || v[0] == '-'))
    return unavailable("CUDA_VISIBLE_DEVICES=\"" + std::string(v) + "\" hides every GPU");
  bool gpu = false;
  if (DIR* d = ::opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') gpu = true;
    ::closedir(d);
  }
  struct stat st{};
  if (!gpu && ::stat("/dev/nvidia0", &st) != 0)
    return unavailable("no NVIDIA GPU: /proc/driver/nvidia/gpus lists none and /dev/nvidia0 does not exist");
  // Loading the library runs no cuInit; driver() loads it again when a backend is created.
  void* h = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    return unavailable(std::string("a GPU is present but the CUDA driver library is not: ") + (e ? e : "libcuda.so.1"));
  }
  ::dlclose(h);
  return {};
}

Result<void*> CudaAccelerator::allocate(size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  DevicePtr p = 0;
  KILN_CU_CHECK(*m_driver, cuMemAlloc_v2(&p, bytes ? bytes : 1), "allocate " + std::to_string(bytes) + " bytes");
  // cuMemAlloc hands out whole 512-byte-aligned pieces; count what it reserves that way.
  m_memory.on_allocate(reinterpret_cast<void*>(p), bytes, (std::max<size_t>(bytes, 1) + 511) / 512 * 512);
  return reinterpret_cast<void*>(p);
}

void CudaAccelerator::deallocate(void* ptr) {
  m_memory.on_free(ptr);
  if (ptr && bind().ok()) m_driver->cuMemFree_v2(dptr(ptr));
}

Result<void*> CudaAccelerator::allocate_host(size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  void* p = nullptr;
  KILN_CU_CHECK(*m_driver, cuMemAllocHost_v2(&p, bytes ? bytes : 1), "allocate " + std::to_string(bytes) + " pinned bytes");
  return p;
}

void CudaAccelerator::deallocate_host(void* ptr) {
  if (ptr && bind().ok()) m_driver->cuMemFreeHost(ptr);
}

runtime::MemoryStats CudaAccelerator::memory_stats() const {
  runtime::MemoryStats s;
  m_memory.fill(s);
  size_t free = 0, total = 0;
  if (bind().ok() && m_driver->cuMemGetInfo_v2(&free, &total) == 0) {
    s.total = total;
    s.available = free;
  }
  return s;
}

Status CudaAccelerator::copy(void* dst, const void* src, size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  // Unified addressing: the driver tells host and device pointers apart.
  KILN_CU_CHECK(*m_driver, cuMemcpy(dptr(dst), dptr(src), bytes), "copy " + std::to_string(bytes) + " bytes");
  return {};
}

runtime::Stream& CudaAccelerator::default_stream() {
  std::call_once(m_default_once, [&] {
    auto s = create_stream();
    if (s.ok()) m_default_stream = std::move(s).value();
  });
  return *m_default_stream;
}

Result<std::unique_ptr<runtime::Stream>> CudaAccelerator::create_stream() {
  KILN_RETURN_IF_ERROR(bind());
  void* s = nullptr;
  KILN_CU_CHECK(*m_driver, cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */), "create a stream");
  return std::unique_ptr<runtime::Stream>(std::make_unique<CudaStream>(*this, s));
}

Result<std::unique_ptr<runtime::Stream>> CudaAccelerator::wrap_stream(void* native) {
  // Torch's streams live in the primary context, which is the one this backend binds.
  KILN_RETURN_IF_ERROR(bind());
  return std::unique_ptr<runtime::Stream>(std::make_unique<CudaStream>(*this, native, /*owned=*/false));
}

Result<std::unique_ptr<runtime::Event>> CudaAccelerator::create_event() {
  KILN_RETURN_IF_ERROR(bind());
  void* e = nullptr;
  KILN_CU_CHECK(*m_driver, cuEventCreate(&e, 0), "create an event");
  return std::unique_ptr<runtime::Event>(std::make_unique<CudaEvent>(*this, e));
}

Result<std::shared_ptr<runtime::Module>> CudaAccelerator::load_module(const runtime::ModuleImage& image) {
  KILN_RETURN_IF_ERROR(can_load(image.kind, image.target));
  auto decoded = decode_cuda_module(image.bytes);
  if (!decoded.ok()) return Status(decoded.status().code(), image.label + ": " + decoded.status().message());
  CudaModuleImage& m = decoded.value();
  KILN_RETURN_IF_ERROR(bind());
  // A cubin runs on its own major version at an equal or newer minor; otherwise the PTX of
  // an older compute capability is compiled by the driver for this GPU.
  bool cubin = false;
  int sm_used = 0;
  std::string_view code = pick_cuda_code(m, m_sm, &cubin, &sm_used);
  if (code.empty()) return unavailable(image.label + ": the artifact has no code this GPU (sm_" + std::to_string(m_sm) + ") can load");
  std::string owned(code);  // cuModuleLoadData wants a NUL-terminated image for PTX
  void* module = nullptr;
  KILN_CU_CHECK(*m_driver, cuModuleLoadData(&module, owned.c_str()),
                image.label + " (" + (cubin ? "cubin for sm_" : "PTX for compute_") + std::to_string(sm_used) +
                    ", device sm_" + std::to_string(m_sm) + ")");
  auto out = std::make_shared<CudaModule>(*this, module, image.label);
  for (auto& sig : image.kernels) KILN_RETURN_IF_ERROR(out->add(sig));
  return std::shared_ptr<runtime::Module>(std::move(out));
}

namespace {
const bool k_registered = [] {
  Status st = runtime::register_backend({
      .name = "cuda",
      .priority = runtime::k_priority_cuda,
      // No cuInit here: a process that forks after asking must still get CUDA in the child.
      .is_available = [] { return CudaAccelerator::present_without_initialising(); },
      .create = []() -> Result<std::unique_ptr<runtime::Accelerator>> {
        auto acc = CudaAccelerator::create(0);
        if (!acc.ok()) return acc.status();
        return std::unique_ptr<runtime::Accelerator>(std::move(acc).value());
      },
  });
  return st.ok();
}();
}  // namespace

}  // namespace kiln::backends::cuda
