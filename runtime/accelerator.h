// The one interface every backend implements (CPU here; CUDA, HIP, OpenCL later).
//
// It is modeled on the accelerator abstractions training frameworks use and on the CUDA
// driver API: an Accelerator owns devices, memory, streams, events and loaded modules; a
// Module holds Kernels; a Kernel launches on a Stream with a grid of blocks and arguments
// passed as an array of pointers to the values (like cuLaunchKernel's kernelParams).
//
// Ownership: objects returned by unique_ptr/shared_ptr belong to the caller but must not
// outlive the Accelerator that made them. Thread-safety: an Accelerator and its Modules are
// safe to use from any thread; a Stream may be fed from several threads, and work submitted
// to it runs in submission order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

// The shape of one launch. Maps to cuLaunchKernel's grid, block and sharedMemBytes.
struct LaunchConfig {
  Dim3 grid, block;
  // Dynamic shared memory per block, in bytes: on CUDA, `extern __shared__` memory; on the CPU,
  // a scratch buffer of this size that each block's Block::shared points to (per block,
  // uninitialised, as on a GPU).
  uint32_t shared_bytes = 0;
  // The caller synchronizes the stream right after this launch (a synchronous op call): a
  // backend may run it on the calling thread when the stream has nothing else queued (the CPU
  // does, on the caller's OpenMP team where there is one). Only a hint: order is kept either way.
  bool caller_waits = false;
};

// What the loader needs to know about one entry point: its name and the size in bytes of
// each parameter as passed by value (a pointer is 8). Launch copies exactly these bytes.
struct KernelSignature {
  std::string name;
  std::vector<uint32_t> param_sizes;
  std::string symbol;  // the name in the module when it differs (a templated kernel's mangled name)
};

// Where a backend keeps what it derives from an image for one device, across processes: an
// OpenCL device binary built from an op's source (a source build costs ~0.6 s on PoCL, loading
// its binary ~1 ms). Whoever loads the image provides it (builders: over kiln's store); keys
// are the backend's, and must name everything the bytes depend on (device, driver, image).
class DerivedCodeCache {
 public:
  virtual ~DerivedCodeCache() = default;
  // The bytes stored under `key`, or nothing (a miss, or bytes that failed their check).
  virtual std::optional<std::string> get(std::string_view key) = 0;
  // Best effort: a cache that cannot store says nothing; the next load builds again. `kind`
  // ("opencl-binary"), `device` ("opencl:<device name>") and `label` ("op gelu") describe the
  // bytes in listings.
  virtual void put(std::string_view key, std::string_view bytes, std::string_view kind, std::string_view device,
                   std::string_view label) = 0;
};

// Bytes to load and what they are. The runtime never parses specs: whoever built the
// artifact says what it holds.
struct ModuleImage {
  std::string kind;         // "host-so", later "ptx", "cubin", "hsaco", ...
  std::string target;       // "cpu:x86-64-v3", "cuda:sm_90", ...
  std::string_view bytes;   // not owned; load_module copies what it keeps
  std::vector<KernelSignature> kernels;
  std::string label;        // names the module in messages, e.g. "op vector_add"
  DerivedCodeCache* derived_cache = nullptr;  // not owned; may be null (nothing kept)
};

// Marks a point in a stream's work. Maps to CUevent / hipEvent_t.
class Event {
 public:
  virtual ~Event() = default;
  // True when all work recorded before it has completed (or it was never recorded).
  virtual bool query() = 0;
  // Blocks the calling thread until query() would be true.
  virtual Status synchronize() = 0;
  // Milliseconds between `start` completing and this event completing; both must have been
  // recorded and completed. Maps to cuEventElapsedTime.
  virtual Result<double> elapsed_ms_since(Event& start) = 0;
};

class Stream;

// Recorded work replayed as a whole, its launch arguments already resolved. Maps to
// CUgraphExec. Made by Stream::end_capture; lives no longer than its accelerator.
class Graph {
 public:
  virtual ~Graph() = default;
  virtual Status launch(Stream& stream) = 0;
};

// An in-order queue of work. Maps to CUstream / hipStream_t.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Status copy_async(void* dst, const void* src, size_t bytes) = 0;
  virtual Status memset_async(void* dst, int value, size_t bytes) = 0;
  // Marks the point after everything submitted so far.
  virtual Status record(Event& event) = 0;
  // Work submitted after this waits until `event` completes.
  virtual Status wait(Event& event) = 0;
  // Blocks until everything submitted so far has completed.
  virtual Status synchronize() = 0;
  // True when everything submitted so far has completed (cuStreamQuery), without blocking.
  virtual bool query() = 0;

  // Capture: work submitted until end_capture() is recorded instead of run, and comes back
  // as a Graph to replay (cuStreamBeginCapture / cuStreamEndCapture + cuGraphInstantiate).
  // Backends without graphs say so here and in Accelerator::supports(Capability::kGraphs).
  virtual Status begin_capture() { return unavailable("this accelerator does not capture graphs yet"); }
  virtual Result<std::unique_ptr<Graph>> end_capture() { return unavailable("this accelerator does not capture graphs yet"); }
};

// One entry point of a loaded module. Maps to CUfunction.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const KernelSignature& signature() const = 0;
  // Queues a launch of config.grid.count() blocks of config.block threads. `args[i]` points to
  // the value of parameter i; the values are copied before launch returns, so the caller may
  // reuse them at once. The number of args must equal the signature's.
  virtual Status launch(Stream& stream, const LaunchConfig& config, const void* const* args, size_t num_args) = 0;
  // The same without dynamic shared memory.
  Status launch(Stream& stream, Dim3 grid, Dim3 block, const void* const* args, size_t num_args) {
    return launch(stream, LaunchConfig{grid, block, 0}, args, num_args);
  }
};

// Loaded code. Maps to CUmodule. Kernels it returns live as long as the module.
class Module {
 public:
  virtual ~Module() = default;
  virtual Result<Kernel*> kernel(std::string_view name) = 0;
};

// Device memory as the accelerator sees it. Maps to torch.cuda.memory_stats and cuMemGetInfo.
struct MemoryStats {
  uint64_t allocated = 0;      // bytes handed out by allocate() and not yet freed, as asked for
  uint64_t max_allocated = 0;  // the peak of `allocated` since creation or reset_peak_memory()
  uint64_t reserved = 0;       // bytes held from the driver or OS for those allocations (with rounding)
  uint64_t max_reserved = 0;   // the peak of `reserved`
  uint64_t total = 0;          // the device's memory
  uint64_t available = 0;      // free on the device now, as its driver or OS reports it
};

// Element types a kernel may compute in. Maps to torch.dtype.
enum class DType : uint8_t { kBool, kInt8, kUInt8, kInt16, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };
inline constexpr DType k_all_dtypes[] = {DType::kBool,    DType::kInt8,     DType::kUInt8,   DType::kInt16,
                                         DType::kInt32,   DType::kInt64,    DType::kFloat16, DType::kBFloat16,
                                         DType::kFloat32, DType::kFloat64};
std::string_view dtype_name(DType t);  // "float16", "bfloat16", "int32", ...
size_t dtype_size(DType t);

// What a backend may or may not do. Accelerator::supports() answers each with ok or a
// reason; a method behind a capability the backend lacks returns that reason, never crashes.
enum class Capability : uint8_t {
  kMultiDevice,       // set_device() to devices other than 0
  kPinnedMemory,      // allocate_host() gives page-locked memory that async copies need
  kEventTiming,       // Event::elapsed_ms_since
  kGraphs,            // Stream::begin_capture / end_capture / Graph::launch
  kGraphEvents,       // Stream::record and wait while capturing
  kExternalProfiler,  // range_push/range_pop reach an external profiler (NVTX)
  kFloat16,           // kernels may compute in float16
  kBFloat16,          // kernels may compute in bfloat16
};
inline constexpr Capability k_all_capabilities[] = {
    Capability::kMultiDevice,      Capability::kPinnedMemory, Capability::kEventTiming, Capability::kGraphs,
    Capability::kGraphEvents,      Capability::kExternalProfiler, Capability::kFloat16, Capability::kBFloat16};
std::string_view capability_name(Capability c);  // "graphs", "pinned_memory", ...

// The state of one device's random-number generator: a Philox4x32-10 key (`seed`) and how
// many 128-bit counter blocks have been handed out (`offset`). A kernel given (seed, offset)
// draws element i from philox(counter = offset + i / 4, key = seed), so what it draws
// depends only on the state and the element, never on which thread ran first. Maps to
// torch.cuda.get_rng_state / the philox (seed, offset) pair of PyTorch's CUDA generator.
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  bool operator==(const RngState&) const = default;
};

class Accelerator {
 public:
  Accelerator();
  virtual ~Accelerator();
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  // ---- identity and devices
  // Registry name: "cpu", "cuda", ...
  virtual std::string_view name() const = 0;
  virtual int device_count() const = 0;
  virtual std::string device_name(int device) const = 0;
  // The device this accelerator's memory, streams and modules belong to. kiln drives one
  // device per Accelerator; set_device to another one needs Capability::kMultiDevice.
  virtual int current_device() const { return 0; }
  virtual Status set_device(int device);
  // Blocks until all work on every stream of the device has completed.
  virtual Status synchronize() = 0;
  // The processors a grid spreads over on the current device, what a launch sizes its grid
  // against (a spec's launch expressions read it as `sm_count`): streaming multiprocessors
  // (maps to CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), AMD compute units
  // (hipDeviceAttributeMultiprocessorCount), OpenCL's CL_DEVICE_MAX_COMPUTE_UNITS, the CPU
  // backend's threads. At least 1; a backend that cannot tell says 1.
  virtual int multiprocessor_count() const { return 1; }
  // The target string this device runs best: "cpu:x86-64-v4", "cuda:sm_90".
  virtual std::string native_target() const = 0;
  // Ok when an artifact of this kind and target can run here; otherwise says why not.
  virtual Status can_load(std::string_view kind, std::string_view target) const = 0;
  // Ok when this backend does `c`; otherwise kUnavailable saying why not.
  virtual Status supports(Capability c) const = 0;
  // The collective-communication library frameworks pair with it: "gloo", "nccl", "rccl".
  virtual std::string_view communication_backend() const = 0;
  // Prefixes (or whole names) of the environment variables a launcher must pass on to the
  // processes it starts on other nodes for this backend to behave the same there.
  virtual std::vector<std::string> environment_prefixes() const = 0;
  // Those variables as set in this process, sorted by name.
  std::vector<std::pair<std::string, std::string>> environment_to_export() const;

  // ---- data types
  virtual std::vector<DType> supported_dtypes() const = 0;
  bool is_fp16_supported() const { return supports(Capability::kFloat16).ok(); }
  bool is_bf16_supported() const { return supports(Capability::kBFloat16).ok(); }

  // ---- memory
  // Device memory. On the CPU this is host memory, aligned for vector loads.
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  // Synchronous copy in any direction (host and device pointers are told apart by the backend).
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Synchronous memset of device memory.
  virtual Status memset(void* dst, int value, size_t bytes) = 0;
  // Page-locked host memory, which the device can copy to and from asynchronously (maps to
  // cuMemAllocHost). On the CPU it is ordinary memory.
  virtual Result<void*> allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* ptr) = 0;
  // True for memory from allocate_host (or pinned by the driver some other way).
  virtual bool is_pinned(const void* ptr) const = 0;
  // True when `ptr` is memory of this accelerator's device (from allocate).
  virtual bool on_accelerator(const void* ptr) const = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;

  // ---- streams and events
  virtual Stream& default_stream() = 0;
  // The calling thread's current stream on this accelerator: the default stream until
  // set_current_stream() names another (maps to torch.cuda.current_stream / set_stream).
  Stream& current_stream();
  // `stream` must outlive its use as current; nullptr goes back to the default stream.
  void set_current_stream(Stream* stream);
  virtual Result<std::unique_ptr<Stream>> create_stream() = 0;
  // A stream of the backend's own API that kiln does not own (torch's current CUDA stream, a
  // CUstream / hipStream_t as an address): work queued on it is ordered with the framework's,
  // and destroying the wrapper leaves the stream alone. kUnavailable where a backend has no
  // native streams to adopt.
  virtual Result<std::unique_ptr<Stream>> wrap_stream(void* native) {
    return unavailable(std::string(name()) + " has no native streams to adopt (asked for " +
                       std::to_string(reinterpret_cast<uintptr_t>(native)) + ")");
  }
  virtual Result<std::unique_ptr<Event>> create_event() = 0;

  // ---- modules
  virtual Result<std::shared_ptr<Module>> load_module(const ModuleImage& image) = 0;

  // ---- random-number state, per device (torch.manual_seed and friends)
  // Seeds the current device's generator and restarts its offset.
  void manual_seed(uint64_t seed);
  // Seeds every device's generator.
  void manual_seed_all(uint64_t seed);
  // Seeds the current device from a non-deterministic source; returns the seed.
  uint64_t seed();
  uint64_t initial_seed() const;
  RngState get_rng_state() const;
  void set_rng_state(const RngState& state);
  // Reserves `count` random 32-bit values for one kernel launch: returns the state the
  // kernel draws from and advances the offset past them (rounded up to whole blocks of 4),
  // so the next launch draws fresh numbers.
  RngState reserve_random(uint64_t count);

  // ---- profiling ranges (torch.cuda.nvtx.range_push / range_pop)
  // Opens a named range on the calling thread; ranges nest. Where the backend has an external
  // profiler (Capability::kExternalProfiler) the range is also sent there.
  void range_push(std::string_view name);
  // Closes the calling thread's innermost range; returns its name and length in ms.
  // kInvalidArgument when no range is open on this thread.
  Result<std::pair<std::string, double>> range_pop();

 protected:
  // Hooks for backends that forward ranges to a profiler; the base class keeps the stack.
  virtual void profiler_push(const std::string& name) {}
  virtual void profiler_pop() {}

 private:
  struct Shared;
  std::unique_ptr<Shared> m_shared;  // random state and other bookkeeping the base keeps
};

}  // namespace kiln::runtime
