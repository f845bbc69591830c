// What every Accelerator shares whatever its backend: names of data types and capabilities,
// the calling thread's current stream, per-device random-number state and profiling ranges.
#include "runtime/accelerator.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <random>

extern char** environ;

namespace kiln::runtime {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kBool: return "bool";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
  }
  return "?";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8: return 1;
    case DType::kInt16:
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
  }
  return 0;
}

std::string_view capability_name(Capability c) {
  switch (c) {
    case Capability::kMultiDevice: return "multi_device";
    case Capability::kPinnedMemory: return "pinned_memory";
    case Capability::kEventTiming: return "event_timing";
    case Capability::kGraphs: return "graphs";
    case Capability::kGraphEvents: return "graph_events";
    case Capability::kExternalProfiler: return "external_profiler";
    case Capability::kFloat16: return "float16";
    case Capability::kBFloat16: return "bfloat16";
  }
  return "?";
}

namespace {

// Per thread: the current stream and the open profiling ranges of each accelerator that
// thread has touched. A handful of accelerators at most, so a flat vector.
struct ThreadState {
  struct Range {
    std::string name;
    std::chrono::steady_clock::time_point start;
  };
  struct PerAccelerator {
    const Accelerator* accelerator;
    Stream* current_stream = nullptr;
    std::vector<Range> ranges;
  };
  std::vector<PerAccelerator> entries;

  PerAccelerator& of(const Accelerator* a) {
    for (auto& e : entries)
      if (e.accelerator == a) return e;
    return entries.emplace_back(PerAccelerator{a, nullptr, {}});
  }
};
thread_local ThreadState t_state;

}  // namespace

struct Accelerator::Shared {
  struct Generator {
    RngState state;
    uint64_t initial_seed = 0;
  };
  mutable std::mutex mutex;
  // Per device; a device appears on its first use. Seed 0 until seeded (as in PyTorch's
  // default generator before torch.manual_seed, a fixed start keeps runs reproducible).
  std::map<int, Generator> generators;

  // The generator of `device` as it stands (a default one when never used); under `mutex`.
  Generator peek(int device) const {
    auto it = generators.find(device);
    return it == generators.end() ? Generator{} : it->second;
  }
};

Accelerator::Accelerator() : m_shared(std::make_unique<Shared>()) {}

Accelerator::~Accelerator() {
  // A thread that outlives this accelerator must not find it by a reused address.
  std::erase_if(t_state.entries, [&](auto& e) { return e.accelerator == this; });
}

Status Accelerator::set_device(int device) {
  if (device < 0 || device >= device_count())
    return invalid_argument(std::string(name()) + ": no device " + std::to_string(device) + " (" +
                            std::to_string(device_count()) + " found)");
  if (device == current_device()) return {};
  KILN_RETURN_IF_ERROR(supports(Capability::kMultiDevice));
  return unavailable(std::string(name()) + ": set_device is not implemented by this backend");
}

std::vector<std::pair<std::string, std::string>> Accelerator::environment_to_export() const {
  std::vector<std::pair<std::string, std::string>> out;
  auto prefixes = environment_prefixes();
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view key = entry.substr(0, eq);
    for (auto& p : prefixes) {
      if (key.substr(0, p.size()) == p) {
        out.emplace_back(std::string(key), std::string(entry.substr(eq + 1)));
        break;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

Stream& Accelerator::current_stream() {
  Stream* s = t_state.of(this).current_stream;
  return s ? *s : default_stream();
}

void Accelerator::set_current_stream(Stream* stream) { t_state.of(this).current_stream = stream; }

void Accelerator::manual_seed(uint64_t seed) {
  std::lock_guard lock(m_shared->mutex);
  m_shared->generators[current_device()] = {RngState{seed, 0}, seed};
}

void Accelerator::manual_seed_all(uint64_t seed) {
  int n = std::max(1, device_count());
  std::lock_guard lock(m_shared->mutex);
  for (int d = 0; d < n; ++d) m_shared->generators[d] = {RngState{seed, 0}, seed};
}

uint64_t Accelerator::seed() {
  std::random_device rd;
  uint64_t s = (uint64_t{rd()} << 32) ^ rd();
  manual_seed(s);
  return s;
}

uint64_t Accelerator::initial_seed() const {
  std::lock_guard lock(m_shared->mutex);
  return m_shared->peek(current_device()).initial_seed;
}

RngState Accelerator::get_rng_state() const {
  std::lock_guard lock(m_shared->mutex);
  return m_shared->peek(current_device()).state;
}

void Accelerator::set_rng_state(const RngState& state) {
  std::lock_guard lock(m_shared->mutex);
  m_shared->generators[current_device()].state = state;
}

RngState Accelerator::reserve_random(uint64_t count) {
  std::lock_guard lock(m_shared->mutex);
  RngState& s = m_shared->generators[current_device()].state;
  RngState out = s;
  s.offset += (count + 3) / 4;
  return out;
}

void Accelerator::range_push(std::string_view name) {
  auto& ranges = t_state.of(this).ranges;
  ranges.push_back({std::string(name), std::chrono::steady_clock::now()});
  profiler_push(ranges.back().name);
}

Result<std::pair<std::string, double>> Accelerator::range_pop() {
  auto& ranges = t_state.of(this).ranges;
  if (ranges.empty()) return invalid_argument("range_pop: no profiling range is open on this thread");
  auto r = std::move(ranges.back());
  ranges.pop_back();
  profiler_pop();
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start).count();
  return std::make_pair(std::move(r.name), ms);
}

}  // namespace kiln::runtime
