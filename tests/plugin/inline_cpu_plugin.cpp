// A third-party accelerator as a plug-in: "inline-cpu" runs host-so artifacts on the thread
// that submits the work, one block after another. It exists to prove the plug-in path end
// to end (KILN_PLUGINS finds it, KILN_ACCELERATOR selects it, ops run on it) and that a
// backend written outside kiln passes the conformance suite. It is also the smallest
// complete Accelerator there is, so a starting point for a new backend.
//
// Its streams do their work before a call returns, so they are trivially in order and events
// complete when recorded. It refuses what it cannot do through supports(): no graphs, no
// pinned memory, no second device.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>

#include "kiln/cpu_kernel.h"
#include "runtime/host_cpu.h"
#include "runtime/host_object.h"
#include "runtime/memory_tracker.h"
#include "runtime/plugin.h"

namespace inline_cpu {
using namespace kiln;
using namespace kiln::runtime;

class InlineEvent final : public Event {
 public:
  bool query() override { return true; }
  Status synchronize() override { return {}; }
  Result<double> elapsed_ms_since(Event& start) override {
    auto* s = dynamic_cast<InlineEvent*>(&start);
    if (!s) return invalid_argument("inline-cpu: the events belong to different accelerators");
    if (!s->m_recorded || !m_recorded) return invalid_argument("inline-cpu: both events must have been recorded");
    return std::chrono::duration<double, std::milli>(m_at - s->m_at).count();
  }
  void mark() {
    m_recorded = true;
    m_at = std::chrono::steady_clock::now();
  }

 private:
  bool m_recorded = false;
  std::chrono::steady_clock::time_point m_at;
};

class InlineStream final : public Stream {
 public:
  Status copy_async(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
    return {};
  }
  Status memset_async(void* dst, int value, size_t bytes) override {
    std::memset(dst, value, bytes);
    return {};
  }
  Status record(Event& event) override {
    auto* e = dynamic_cast<InlineEvent*>(&event);
    if (!e) return invalid_argument("inline-cpu: the event belongs to another accelerator");
    e->mark();
    return {};
  }
  Status wait(Event& event) override { return {}; }
  Status synchronize() override { return {}; }
  bool query() override { return true; }
  // begin_capture/end_capture: the base class says graphs are unavailable.
};

class InlineKernel final : public Kernel {
 public:
  InlineKernel(KernelSignature sig, kiln_cpu_entry_fn entry) : m_sig(std::move(sig)), m_entry(entry) {}
  const KernelSignature& signature() const override { return m_sig; }
  using Kernel::launch;
  Status launch(Stream& stream, const LaunchConfig& config, const void* const* args, size_t num_args) override {
    const Dim3& grid = config.grid;
    const Dim3& block = config.block;
    if (!dynamic_cast<InlineStream*>(&stream)) return invalid_argument("inline-cpu: the stream belongs to another accelerator");
    if (num_args != m_sig.param_sizes.size())
      return invalid_argument("kernel " + m_sig.name + " takes " + std::to_string(m_sig.param_sizes.size()) +
                              " arguments, launch passed " + std::to_string(num_args));
    if (grid.count() == 0 || block.count() == 0) return invalid_argument("kernel " + m_sig.name + ": empty grid or block");
    std::vector<unsigned char> shared(config.shared_bytes);
    kiln_cpu_block b{{grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, {0, 0, 0}, shared.empty() ? nullptr : shared.data(),
                     config.shared_bytes};
    for (b.block_idx.z = 0; b.block_idx.z < grid.z; ++b.block_idx.z)
      for (b.block_idx.y = 0; b.block_idx.y < grid.y; ++b.block_idx.y)
        for (b.block_idx.x = 0; b.block_idx.x < grid.x; ++b.block_idx.x) m_entry(&b, const_cast<void* const*>(args));
    return {};
  }

 private:
  KernelSignature m_sig;
  kiln_cpu_entry_fn m_entry;
};

class InlineModule final : public Module {
 public:
  std::unique_ptr<HostObject> object;
  std::map<std::string, std::unique_ptr<InlineKernel>, std::less<>> kernels;
  std::string label;
  Result<Kernel*> kernel(std::string_view name) override {
    auto it = kernels.find(name);
    if (it == kernels.end()) return not_found(label + " has no kernel named '" + std::string(name) + "'");
    return static_cast<Kernel*>(it->second.get());
  }
};

class InlineCpu final : public Accelerator {
 public:
  std::string_view name() const override { return "inline-cpu"; }
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "host CPU, one thread (inline-cpu plug-in)"; }
  Status synchronize() override { return {}; }
  std::string native_target() const override { return "cpu:" + x86_level_name(host_x86_level()); }
  Status can_load(std::string_view kind, std::string_view target) const override {
    if (kind != "host-so" || target.substr(0, 4) != "cpu:")
      return unavailable("inline-cpu runs host-so artifacts for cpu targets, not " + std::string(kind) + " for " +
                         std::string(target));
    auto level = parse_x86_level(target.substr(4));
    if (!level || *level > host_x86_level()) return unavailable("inline-cpu: this CPU cannot run " + std::string(target));
    return {};
  }
  Status supports(Capability c) const override {
    switch (c) {
      case Capability::kEventTiming:
      case Capability::kFloat16:
      case Capability::kBFloat16: return {};
      default: return unavailable("inline-cpu does not do " + std::string(capability_name(c)));
    }
  }
  std::string_view communication_backend() const override { return "gloo"; }
  std::vector<std::string> environment_prefixes() const override { return {"KILN_"}; }
  std::vector<DType> supported_dtypes() const override { return {std::begin(k_all_dtypes), std::end(k_all_dtypes)}; }

  Result<void*> allocate(size_t bytes) override {
    size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) return unavailable("inline-cpu: out of memory");
    m_memory.on_allocate(p, bytes, rounded);
    return p;
  }
  void deallocate(void* p) override {
    m_memory.on_free(p);
    std::free(p);
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
    return {};
  }
  Status memset(void* dst, int value, size_t bytes) override {
    std::memset(dst, value, bytes);
    return {};
  }
  Result<void*> allocate_host(size_t bytes) override {
    void* p = std::malloc(std::max<size_t>(bytes, 1));
    if (!p) return unavailable("inline-cpu: out of memory");
    return p;
  }
  void deallocate_host(void* p) override { std::free(p); }
  bool is_pinned(const void*) const override { return false; }
  bool on_accelerator(const void* p) const override { return m_memory.contains(p); }
  MemoryStats memory_stats() const override {
    MemoryStats s;
    m_memory.fill(s);
    s.total = 1ull << 30;  // what it promises to manage, not what the machine has
    s.available = s.total > s.reserved ? s.total - s.reserved : 0;
    return s;
  }
  void reset_peak_memory() override { m_memory.reset_peak(); }

  Stream& default_stream() override { return m_default; }
  Result<std::unique_ptr<Stream>> create_stream() override { return std::unique_ptr<Stream>(new InlineStream); }
  Result<std::unique_ptr<Event>> create_event() override { return std::unique_ptr<Event>(new InlineEvent); }

  Result<std::shared_ptr<Module>> load_module(const ModuleImage& image) override {
    KILN_RETURN_IF_ERROR(can_load(image.kind, image.target));
    auto object = HostObject::load(image.bytes, image.label);
    if (!object.ok()) return object.status();
    auto m = std::make_shared<InlineModule>();
    m->object = std::move(object).value();
    m->label = image.label;
    for (auto& sig : image.kernels) {
      void* fn = m->object->symbol(KILN_CPU_ENTRY_PREFIX + sig.name);
      if (!fn) return not_found(image.label + ": no entry point for " + sig.name);
      m->kernels[sig.name] = std::make_unique<InlineKernel>(sig, reinterpret_cast<kiln_cpu_entry_fn>(fn));
    }
    return std::shared_ptr<Module>(std::move(m));
  }

 private:
  MemoryTracker m_memory;
  InlineStream m_default;
};

Status register_inline_cpu(const PluginHost& host) {
  return host.register_backend(
      {.name = "inline-cpu",
       .priority = -10,  // below the built-in cpu: chosen only by name
       .is_available = [] { return Status{}; },
       .create = []() -> Result<std::unique_ptr<Accelerator>> { return std::unique_ptr<Accelerator>(new InlineCpu); }},
      false);
}

}  // namespace inline_cpu

KILN_PLUGIN(inline_cpu::register_inline_cpu)
