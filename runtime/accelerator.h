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
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"

namespace kiln::runtime {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
};

// What the loader needs to know about one entry point: its name and the size in bytes of
// each parameter as passed by value (a pointer is 8). Launch copies exactly these bytes.
struct KernelSignature {
  std::string name;
  std::vector<uint32_t> param_sizes;
  std::string symbol;  // the name in the module when it differs (a templated kernel's mangled name)
};

// Bytes to load and what they are. The runtime never parses specs: whoever built the
// artifact says what it holds.
struct ModuleImage {
  std::string kind;         // "host-so", later "ptx", "cubin", "hsaco", ...
  std::string target;       // "cpu:x86-64-v3", "cuda:sm_90", ...
  std::string_view bytes;   // not owned; load_module copies what it keeps
  std::vector<KernelSignature> kernels;
  std::string label;        // names the module in messages, e.g. "op vector_add"
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

  // Capture: work submitted until end_capture() is recorded instead of run, and comes back
  // as a Graph to replay (cuStreamBeginCapture / cuStreamEndCapture + cuGraphInstantiate).
  // Backends without graphs say so here.
  virtual Status begin_capture() { return unavailable("this accelerator does not capture graphs yet"); }
  virtual Result<std::unique_ptr<Graph>> end_capture() { return unavailable("this accelerator does not capture graphs yet"); }
};

// One entry point of a loaded module. Maps to CUfunction.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const KernelSignature& signature() const = 0;
  // Queues a launch of grid.count() blocks of `block` threads. `args[i]` points to the
  // value of parameter i; the values are copied before launch returns, so the caller may
  // reuse them at once. The number of args must equal the signature's.
  virtual Status launch(Stream& stream, Dim3 grid, Dim3 block, const void* const* args, size_t num_args) = 0;
};

// Loaded code. Maps to CUmodule. Kernels it returns live as long as the module.
class Module {
 public:
  virtual ~Module() = default;
  virtual Result<Kernel*> kernel(std::string_view name) = 0;
};

// Device memory as the accelerator sees it. Maps to torch.cuda.memory_stats and cuMemGetInfo.
struct MemoryStats {
  uint64_t allocated = 0;      // bytes handed out by allocate() and not yet freed
  uint64_t max_allocated = 0;  // the peak of `allocated` since creation or reset_peak_memory()
  uint64_t total = 0;          // the device's memory
  uint64_t available = 0;      // free on the device now, as its driver or OS reports it
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  // Registry name: "cpu", "cuda", ...
  virtual std::string_view name() const = 0;
  virtual int device_count() const = 0;
  virtual std::string device_name(int device) const = 0;
  // The target string this device runs best: "cpu:x86-64-v4", "cuda:sm_90".
  virtual std::string native_target() const = 0;
  // Ok when an artifact of this kind and target can run here; otherwise says why not.
  virtual Status can_load(std::string_view kind, std::string_view target) const = 0;

  // Device memory. On the CPU this is host memory, aligned for vector loads.
  virtual Result<void*> allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  // Synchronous copy in any direction (host and device pointers are told apart by the backend).
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Page-locked host memory, which the device can copy to and from asynchronously (maps to
  // cuMemAllocHost). On the CPU it is ordinary memory.
  virtual Result<void*> allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* ptr) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;

  virtual Stream& default_stream() = 0;
  virtual Result<std::unique_ptr<Stream>> create_stream() = 0;
  virtual Result<std::unique_ptr<Event>> create_event() = 0;

  virtual Result<std::shared_ptr<Module>> load_module(const ModuleImage& image) = 0;
};

}  // namespace kiln::runtime
