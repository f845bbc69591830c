#include "backends/hip/hip_accelerator.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

#include "runtime/registry.h"

namespace kiln::backends::hip {
namespace {

constexpr int k_memcpy_default = 4;  // hipMemcpyDefault: the runtime tells host from device

class HipEvent final : public runtime::Event {
 public:
  HipEvent(const HipAccelerator& acc, void* event) : m_acc(acc), m_event(event) {}
  ~HipEvent() override {
    if (m_acc.bind().ok()) m_acc.rt().hipEventDestroy(m_event);
  }
  bool query() override { return m_acc.bind().ok() && m_acc.rt().hipEventQuery(m_event) == 0; }
  Status synchronize() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipEventSynchronize(m_event), "event synchronize");
    return {};
  }
  Result<double> elapsed_ms_since(runtime::Event& start) override {
    auto* s = dynamic_cast<HipEvent*>(&start);
    if (!s) return invalid_argument("elapsed time: the events belong to different accelerators");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    float ms = 0;
    KILN_HIP_CHECK(m_acc.rt(), hipEventElapsedTime(&ms, s->handle(), m_event), "elapsed time");
    return static_cast<double>(ms);
  }
  void* handle() const { return m_event; }

 private:
  const HipAccelerator& m_acc;
  void* m_event;
};

class HipGraph final : public runtime::Graph {
 public:
  HipGraph(const HipAccelerator& acc, void* graph, void* exec) : m_acc(acc), m_graph(graph), m_exec(exec) {}
  ~HipGraph() override {
    if (m_acc.bind().ok()) {
      m_acc.rt().hipGraphExecDestroy(m_exec);
      m_acc.rt().hipGraphDestroy(m_graph);
    }
  }
  Status launch(runtime::Stream& stream) override;

 private:
  const HipAccelerator& m_acc;
  void* m_graph;
  void* m_exec;
};

class HipStream final : public runtime::Stream {
 public:
  HipStream(const HipAccelerator& acc, void* stream) : m_acc(acc), m_stream(stream) {}
  ~HipStream() override {
    if (m_acc.bind().ok()) m_acc.rt().hipStreamDestroy(m_stream);
  }
  Status copy_async(void* dst, const void* src, size_t bytes) override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipMemcpyAsync(dst, src, bytes, k_memcpy_default, m_stream), "copy");
    return {};
  }
  Status memset_async(void* dst, int value, size_t bytes) override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipMemsetAsync(dst, value, bytes, m_stream), "memset");
    return {};
  }
  Status record(runtime::Event& event) override {
    auto* e = dynamic_cast<HipEvent*>(&event);
    if (!e) return invalid_argument("record: the event belongs to another accelerator");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipEventRecord(e->handle(), m_stream), "event record");
    return {};
  }
  Status wait(runtime::Event& event) override {
    auto* e = dynamic_cast<HipEvent*>(&event);
    if (!e) return invalid_argument("wait: the event belongs to another accelerator");
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipStreamWaitEvent(m_stream, e->handle(), 0), "stream wait");
    return {};
  }
  Status synchronize() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipStreamSynchronize(m_stream), "stream synchronize");
    return {};
  }
  bool query() override { return m_acc.bind().ok() && m_acc.rt().hipStreamQuery(m_stream) == 0; }
  Status begin_capture() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    KILN_HIP_CHECK(m_acc.rt(), hipStreamBeginCapture(m_stream, 1 /* hipStreamCaptureModeThreadLocal */), "begin capture");
    return {};
  }
  Result<std::unique_ptr<runtime::Graph>> end_capture() override {
    KILN_RETURN_IF_ERROR(m_acc.bind());
    void* graph = nullptr;
    KILN_HIP_CHECK(m_acc.rt(), hipStreamEndCapture(m_stream, &graph), "end capture");
    void* exec = nullptr;
    if (int rc = m_acc.rt().hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0); rc != 0) {
      m_acc.rt().hipGraphDestroy(graph);
      return Status(StatusCode::kInternal, "instantiate the captured graph: " + m_acc.rt().error("hipGraphInstantiate", rc));
    }
    return std::unique_ptr<runtime::Graph>(std::make_unique<HipGraph>(m_acc, graph, exec));
  }
  void* handle() const { return m_stream; }

 private:
  const HipAccelerator& m_acc;
  void* m_stream;
};

Status HipGraph::launch(runtime::Stream& stream) {
  auto* s = dynamic_cast<HipStream*>(&stream);
  if (!s) return invalid_argument("graph launch: the stream belongs to another accelerator");
  KILN_RETURN_IF_ERROR(m_acc.bind());
  KILN_HIP_CHECK(m_acc.rt(), hipGraphLaunch(m_exec, s->handle()), "graph launch");
  return {};
}

class HipKernel final : public runtime::Kernel {
 public:
  HipKernel(const HipAccelerator& acc, runtime::KernelSignature sig, void* function)
      : m_acc(acc), m_sig(std::move(sig)), m_function(function) {}
  const runtime::KernelSignature& signature() const override { return m_sig; }
  using runtime::Kernel::launch;
  Status launch(runtime::Stream& stream, const runtime::LaunchConfig& config, const void* const* args, size_t num_args) override {
    auto* s = dynamic_cast<HipStream*>(&stream);
    if (!s) return invalid_argument("kernel " + m_sig.name + ": the stream belongs to another accelerator");
    if (num_args != m_sig.param_sizes.size())
      return invalid_argument("kernel " + m_sig.name + " takes " + std::to_string(m_sig.param_sizes.size()) +
                              " arguments, launch passed " + std::to_string(num_args));
    KILN_RETURN_IF_ERROR(m_acc.bind());
    const runtime::Dim3 &g = config.grid, &b = config.block;
    // hipModuleLaunchKernel copies the argument values before it returns, as Kernel::launch promises.
    KILN_HIP_CHECK(m_acc.rt(),
                   hipModuleLaunchKernel(m_function, g.x, g.y, g.z, b.x, b.y, b.z, config.shared_bytes, s->handle(),
                                         const_cast<void**>(args), nullptr),
                   "launch of " + m_sig.name);
    return {};
  }

 private:
  const HipAccelerator& m_acc;
  runtime::KernelSignature m_sig;
  void* m_function;
};

class HipModule final : public runtime::Module {
 public:
  HipModule(const HipAccelerator& acc, void* module, std::string label, std::string image)
      : m_acc(acc), m_module(module), m_label(std::move(label)), m_image(std::move(image)) {}
  ~HipModule() override {
    m_kernels.clear();
    if (m_acc.bind().ok()) m_acc.rt().hipModuleUnload(m_module);
  }
  Result<runtime::Kernel*> kernel(std::string_view name) override {
    auto it = m_kernels.find(name);
    if (it == m_kernels.end()) return not_found(m_label + " has no kernel named '" + std::string(name) + "'");
    return static_cast<runtime::Kernel*>(it->second.get());
  }
  Status add(const runtime::KernelSignature& sig) {
    void* fn = nullptr;
    const std::string& symbol = sig.symbol.empty() ? sig.name : sig.symbol;
    KILN_HIP_CHECK(m_acc.rt(), hipModuleGetFunction(&fn, m_module, symbol.c_str()),
                   m_label + ": kernel " + sig.name + " (is it extern \"C\" __global__?)");
    m_kernels[sig.name] = std::make_unique<HipKernel>(m_acc, sig, fn);
    return {};
  }

 private:
  const HipAccelerator& m_acc;
  void* m_module;
  std::string m_label;
  std::string m_image;  // the code object stays with the module that was loaded from it
  std::map<std::string, std::unique_ptr<HipKernel>, std::less<>> m_kernels;
};

}  // namespace

std::string arch_from_properties(const void* props, size_t size) {
  const char* bytes = static_cast<const char*>(props);
  for (size_t i = 0; i + 4 < size; ++i) {
    if (std::memcmp(bytes + i, "gfx", 3) != 0 || (i > 0 && bytes[i - 1] != '\0')) continue;
    size_t end = i + 3;
    while (end < size && (std::isdigit(static_cast<unsigned char>(bytes[end])) || (bytes[end] >= 'a' && bytes[end] <= 'f'))) ++end;
    if (end - i >= 6 && (end == size || bytes[end] == '\0' || bytes[end] == ':')) return std::string(bytes + i, end - i);
  }
  return "";
}

Result<std::unique_ptr<HipAccelerator>> HipAccelerator::create(int device) {
  KILN_RETURN_IF_ERROR(gpu_present_without_initialising());
  KILN_ASSIGN_OR_RETURN(const Runtime* rt, runtime_api());
  int count = 0;
  KILN_HIP_CHECK(*rt, hipGetDeviceCount(&count), "count devices");
  if (count <= device) return unavailable("no HIP device " + std::to_string(device) + " (" + std::to_string(count) + " found)");
  std::unique_ptr<HipAccelerator> acc(new HipAccelerator);
  acc->m_rt = rt;
  acc->m_device = device;
  // hipDeviceProp_t is a few KiB in every ROCm release; this buffer is larger than any.
  alignas(64) static thread_local char props[16384];
  std::memset(props, 0, sizeof props);
  KILN_HIP_CHECK(*rt, hipGetDeviceProperties(props, device), "device properties");
  acc->m_arch = arch_from_properties(props, sizeof props);
  if (acc->m_arch.empty()) return unavailable("HIP device " + std::to_string(device) + " reports no gfx architecture");
  // hipDeviceAttributeMultiprocessorCount: 63 in HIP 7.1's hip_runtime_api.h. Read, not
  // required: a runtime that numbers its attributes otherwise and answers nonsense leaves 1
  // (grids then sized for one compute unit: correct, slower).
  int units = 0;
  if (rt->hipDeviceGetAttribute(&units, 63, device) == 0 && units >= 1 && units <= 4096) acc->m_multiprocessors = units;
  return acc;
}

HipAccelerator::~HipAccelerator() { m_default_stream.reset(); }

Status HipAccelerator::bind() const {
  thread_local int t_bound = -1;
  if (t_bound == m_device) return {};
  KILN_HIP_CHECK(*m_rt, hipSetDevice(m_device), "make the HIP device current");
  t_bound = m_device;
  return {};
}

int HipAccelerator::device_count() const {
  int n = 0;
  return m_rt->hipGetDeviceCount(&n) == 0 ? n : 0;
}

std::string HipAccelerator::device_name(int device) const {
  char name[256] = {};
  if (m_rt->hipDeviceGetName(name, sizeof name, device) != 0) return "HIP device";
  return name;
}

Status HipAccelerator::can_load(std::string_view kind, std::string_view target) const {
  if (kind != "hsaco") return unavailable("the hip accelerator loads hsaco artifacts, not " + std::string(kind));
  if (target != native_target())
    return unavailable("artifact built for " + std::string(target) + ", but this GPU (" + device_name(m_device) + ") is " + native_target() +
                       ": an AMD code object runs on the architecture it was built for");
  return {};
}

Status HipAccelerator::synchronize() {
  KILN_RETURN_IF_ERROR(bind());
  KILN_HIP_CHECK(*m_rt, hipDeviceSynchronize(), "synchronize the device");
  return {};
}

Status HipAccelerator::supports(runtime::Capability c) const {
  using runtime::Capability;
  switch (c) {
    case Capability::kMultiDevice:
      return unavailable("hip: kiln drives one GPU per process (the first visible one); start one process per GPU "
                         "with HIP_VISIBLE_DEVICES, as launchers do");
    case Capability::kPinnedMemory:
    case Capability::kEventTiming:
    case Capability::kGraphs:
    case Capability::kGraphEvents:
    case Capability::kFloat16:
    case Capability::kBFloat16: return {};
    case Capability::kExternalProfiler: return unavailable("hip: no roctx wiring yet");
  }
  return invalid_argument("unknown capability");
}

std::vector<std::string> HipAccelerator::environment_prefixes() const {
  return {"KILN_", "HIP_", "ROCR_", "HSA_", "RCCL_", "MASTER_ADDR", "MASTER_PORT"};
}

std::vector<runtime::DType> HipAccelerator::supported_dtypes() const {
  return std::vector<runtime::DType>(std::begin(runtime::k_all_dtypes), std::end(runtime::k_all_dtypes));
}

Status HipAccelerator::memset(void* dst, int value, size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  KILN_HIP_CHECK(*m_rt, hipMemset(dst, value, bytes), "memset");
  return {};
}

bool HipAccelerator::is_pinned(const void* ptr) const {
  std::lock_guard lock(m_pinned_mutex);
  return m_pinned.count(ptr) != 0;
}

Result<void*> HipAccelerator::allocate(size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  void* p = nullptr;
  KILN_HIP_CHECK(*m_rt, hipMalloc(&p, bytes ? bytes : 1), "allocate " + std::to_string(bytes) + " bytes");
  m_memory.on_allocate(p, bytes, (std::max<size_t>(bytes, 1) + 511) / 512 * 512);
  return p;
}

void HipAccelerator::deallocate(void* ptr) {
  m_memory.on_free(ptr);
  if (ptr && bind().ok()) m_rt->hipFree(ptr);
}

Result<void*> HipAccelerator::allocate_host(size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  void* p = nullptr;
  KILN_HIP_CHECK(*m_rt, hipHostMalloc(&p, bytes ? bytes : 1, 0), "allocate " + std::to_string(bytes) + " pinned bytes");
  std::lock_guard lock(m_pinned_mutex);
  m_pinned.insert(p);
  return p;
}

void HipAccelerator::deallocate_host(void* ptr) {
  {
    std::lock_guard lock(m_pinned_mutex);
    m_pinned.erase(ptr);
  }
  if (ptr && bind().ok()) m_rt->hipHostFree(ptr);
}

runtime::MemoryStats HipAccelerator::memory_stats() const {
  runtime::MemoryStats s;
  m_memory.fill(s);
  size_t free = 0, total = 0;
  if (bind().ok() && m_rt->hipMemGetInfo(&free, &total) == 0) {
    s.total = total;
    s.available = free;
  }
  return s;
}

Status HipAccelerator::copy(void* dst, const void* src, size_t bytes) {
  KILN_RETURN_IF_ERROR(bind());
  KILN_HIP_CHECK(*m_rt, hipMemcpy(dst, src, bytes, k_memcpy_default), "copy " + std::to_string(bytes) + " bytes");
  return {};
}

runtime::Stream& HipAccelerator::default_stream() {
  std::call_once(m_default_once, [&] {
    auto s = create_stream();
    if (s.ok()) m_default_stream = std::move(s).value();
  });
  return *m_default_stream;
}

Result<std::unique_ptr<runtime::Stream>> HipAccelerator::create_stream() {
  KILN_RETURN_IF_ERROR(bind());
  void* s = nullptr;
  KILN_HIP_CHECK(*m_rt, hipStreamCreateWithFlags(&s, 1 /* hipStreamNonBlocking */), "create a stream");
  return std::unique_ptr<runtime::Stream>(std::make_unique<HipStream>(*this, s));
}

Result<std::unique_ptr<runtime::Event>> HipAccelerator::create_event() {
  KILN_RETURN_IF_ERROR(bind());
  void* e = nullptr;
  KILN_HIP_CHECK(*m_rt, hipEventCreate(&e), "create an event");
  return std::unique_ptr<runtime::Event>(std::make_unique<HipEvent>(*this, e));
}

Result<std::shared_ptr<runtime::Module>> HipAccelerator::load_module(const runtime::ModuleImage& image) {
  KILN_RETURN_IF_ERROR(can_load(image.kind, image.target));
  if (image.bytes.size() < 4 || image.bytes.substr(0, 4) != "\x7f" "ELF")
    return Status(StatusCode::kDataLoss, image.label + ": not an AMD GPU code object (no ELF header)");
  KILN_RETURN_IF_ERROR(bind());
  std::string owned(image.bytes);
  void* module = nullptr;
  KILN_HIP_CHECK(*m_rt, hipModuleLoadData(&module, owned.data()), image.label + " (code object for " + image.target + ")");
  auto out = std::make_shared<HipModule>(*this, module, image.label, std::move(owned));
  for (auto& sig : image.kernels) KILN_RETURN_IF_ERROR(out->add(sig));
  return std::shared_ptr<runtime::Module>(std::move(out));
}

namespace {
const bool k_registered = [] {
  Status st = runtime::register_backend({
      .name = "hip",
      .priority = runtime::k_priority_hip,
      // Nothing loaded or initialised: a process that forks after asking must still get the GPU.
      .is_available = [] { return gpu_present_without_initialising(); },
      .create = []() -> Result<std::unique_ptr<runtime::Accelerator>> {
        auto acc = HipAccelerator::create(0);
        if (!acc.ok()) return acc.status();
        return std::unique_ptr<runtime::Accelerator>(std::move(acc).value());
      },
  });
  return st.ok();
}();
}  // namespace

}  // namespace kiln::backends::hip
