#include "backends/cpu/cpu_accelerator.h"

#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string_view>
#include <thread>

#include "runtime/host_cpu.h"
#include "runtime/registry.h"

namespace kiln::backends::cpu {

// Alignment of every allocation: a cache line, enough for AVX-512 loads.
static constexpr size_t k_alignment = 64;

static unsigned default_helper_threads() {
  if (const char* env = std::getenv("KILN_CPU_THREADS"); env && *env) {
    int n = std::atoi(env);
    if (n >= 1) return static_cast<unsigned>(n - 1);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 1 ? hw - 1 : 0;
}

static bool default_use_openmp() {
  const char* env = std::getenv("KILN_CPU_OPENMP");
  return !(env && std::string_view(env) == "0");
}

CpuAccelerator::CpuAccelerator(CpuOptions options)
    : m_pool(std::make_unique<WorkerPool>(
          options.helper_threads >= 0 ? static_cast<unsigned>(options.helper_threads) : default_helper_threads(),
          options.use_openmp >= 0 ? options.use_openmp != 0 : default_use_openmp())) {}

CpuAccelerator::~CpuAccelerator() = default;

std::string CpuAccelerator::device_name(int) const {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(pos + 2);
    }
  }
  return "host CPU";
}

std::string CpuAccelerator::native_target() const { return "cpu:" + runtime::x86_level_name(runtime::host_x86_level()); }

Status CpuAccelerator::can_load(std::string_view kind, std::string_view target) const {
  if (kind != "host-so") return unavailable("the cpu accelerator loads host-so artifacts, not " + std::string(kind));
  if (target.substr(0, 4) != "cpu:") return unavailable("artifact target " + std::string(target) + " is not a cpu target");
  auto level = runtime::parse_x86_level(target.substr(4));
  if (!level) return invalid_argument("unknown cpu level in target " + std::string(target));
  int host = runtime::host_x86_level();
  if (*level > host)
    return unavailable("artifact built for " + std::string(target.substr(4)) + ", but this CPU supports only " +
                       runtime::x86_level_name(host));
  return {};
}

Status CpuAccelerator::synchronize() {
  std::vector<CpuStream*> streams;
  {
    std::lock_guard lock(m_streams.mutex);
    streams = m_streams.streams;
  }
  // A stream destroyed meanwhile has drained in its destructor; the caller must not destroy
  // streams concurrently with synchronize (as with cudaDeviceSynchronize and stream destroy).
  for (auto* s : streams) KILN_RETURN_IF_ERROR(s->synchronize());
  return {};
}

Status CpuAccelerator::supports(runtime::Capability c) const {
  using runtime::Capability;
  switch (c) {
    case Capability::kMultiDevice:
      return unavailable("cpu: the host is one device; its worker pool already spans every core");
    case Capability::kPinnedMemory:
      return unavailable("cpu: device memory is host memory, so no copy needs page-locked memory; allocate_host "
                         "returns ordinary memory");
    case Capability::kExternalProfiler:
      return unavailable("cpu: profiling ranges are kept and timed by kiln; no external profiler is attached");
    case Capability::kEventTiming:
    case Capability::kGraphs:
    case Capability::kGraphEvents:
      return {};
    case Capability::kFloat16:
    case Capability::kBFloat16:
      // Clang's _Float16 and __bf16 compute through float on CPUs without native support.
      return {};
  }
  return invalid_argument("unknown capability");
}

std::vector<std::string> CpuAccelerator::environment_prefixes() const {
  return {"KILN_", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "GLOO_"};
}

std::vector<runtime::DType> CpuAccelerator::supported_dtypes() const {
  return {std::begin(runtime::k_all_dtypes), std::end(runtime::k_all_dtypes)};
}

static size_t rounded_size(size_t bytes) { return (std::max<size_t>(bytes, 1) + k_alignment - 1) / k_alignment * k_alignment; }

Result<void*> CpuAccelerator::allocate(size_t bytes) {
  size_t rounded = rounded_size(bytes);
  void* p = std::aligned_alloc(k_alignment, rounded);
  if (!p) return unavailable("cpu: cannot allocate " + std::to_string(bytes) + " bytes");
  m_memory.on_allocate(p, bytes, rounded);
  return p;
}

void CpuAccelerator::deallocate(void* ptr) {
  m_memory.on_free(ptr);
  std::free(ptr);
}

Result<void*> CpuAccelerator::allocate_host(size_t bytes) {
  void* p = std::aligned_alloc(k_alignment, rounded_size(bytes));
  if (!p) return unavailable("cpu: cannot allocate " + std::to_string(bytes) + " host bytes");
  return p;
}

void CpuAccelerator::deallocate_host(void* ptr) { std::free(ptr); }

Status CpuAccelerator::memset(void* dst, int value, size_t bytes) {
  std::memset(dst, value, bytes);
  return {};
}

runtime::MemoryStats CpuAccelerator::memory_stats() const {
  runtime::MemoryStats s;
  m_memory.fill(s);
  struct sysinfo info{};
  if (::sysinfo(&info) == 0) s.total = uint64_t{info.totalram} * info.mem_unit;
  s.available = runtime::host_available_memory();
  return s;
}

Status CpuAccelerator::copy(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
  return {};
}

runtime::Stream& CpuAccelerator::default_stream() {
  std::call_once(m_default_once, [&] { m_default_stream = std::make_unique<CpuStream>(*m_pool, m_streams); });
  return *m_default_stream;
}

Result<std::unique_ptr<runtime::Stream>> CpuAccelerator::create_stream() {
  return std::unique_ptr<runtime::Stream>(std::make_unique<CpuStream>(*m_pool, m_streams));
}

Result<std::unique_ptr<runtime::Event>> CpuAccelerator::create_event() {
  return std::unique_ptr<runtime::Event>(std::make_unique<CpuEvent>());
}

Result<std::shared_ptr<runtime::Module>> CpuAccelerator::load_module(const runtime::ModuleImage& image) {
  KILN_RETURN_IF_ERROR(can_load(image.kind, image.target));
  auto m = CpuModule::load(image);
  if (!m.ok()) return m.status();
  return std::shared_ptr<runtime::Module>(std::move(m).value());
}

namespace {
// Registration only remembers the factory; nothing is created until asked for.
const bool k_registered = [] {
  Status st = runtime::register_backend({
      .name = "cpu",
      .priority = runtime::k_priority_cpu,
      .is_available = [] { return Status{}; },
      .create = []() -> Result<std::unique_ptr<runtime::Accelerator>> {
        return std::unique_ptr<runtime::Accelerator>(std::make_unique<CpuAccelerator>());
      },
  });
  return st.ok();
}();
}  // namespace

}  // namespace kiln::backends::cpu
