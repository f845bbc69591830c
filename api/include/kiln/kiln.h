// kiln's C++ API: the one header an application includes to use ops.
//
//   kiln::Context ctx;                                   // the accelerator here, the cache
//   kiln::Op add = ctx.op("vector_add");                 // found by name; compiled on first use
//   auto a = ctx.buffer<float>(n), b = ctx.buffer<float>(n), out = ctx.buffer<float>(n);
//   a.upload(host_a); b.upload(host_b);
//   add.launch({kiln::cdiv(n, 256), 256}, a.data(), b.data(), out.data(), int64_t(n));
//   ctx.synchronize();
//   std::vector<float> result = out.download();
//
// Arguments are checked against the parameter list in the op's spec before anything runs: a
// wrong count or a wrong type throws kiln::Error naming the parameter. A compile error throws
// kiln::Error carrying the compiler's diagnostics (file, line, column). Every artifact goes
// through kiln's cache, so the second process that asks for an op compiles nothing.
//
// This header needs C++17 and nothing but the standard library; link with kiln::kiln
// (find_package(kiln)) or `pkg-config --libs kiln`. Thread-safety: a Context and its Ops may
// be used from any thread; concurrent first uses of one op compile it once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#define KILN_API __attribute__((visibility("default")))

namespace kiln {

// One message from a compiler, as it printed it.
struct Diagnostic {
  std::string severity;  // "error", "warning", "note", "fatal"
  std::string file;      // empty when the message has no location
  unsigned line = 0, column = 0;
  std::string message;
};

// What every kiln call throws. code() is one word ("not_found", "invalid_argument",
// "compile_error", "unavailable", ...); what() is the whole message, diagnostics included.
class KILN_API Error : public std::runtime_error {
 public:
  Error(std::string code, const std::string& message, std::vector<Diagnostic> diagnostics = {});
  const std::string& code() const noexcept { return m_code; }
  const std::vector<Diagnostic>& diagnostics() const noexcept { return m_diagnostics; }

 private:
  std::string m_code;
  std::vector<Diagnostic> m_diagnostics;
};

// Element types for half-precision buffers: the same bits as the kernels' half and bfloat16.
struct float16 {
  uint16_t bits;
};
struct bfloat16 {
  uint16_t bits;
};

struct Dim3 {
  Dim3(uint32_t x_ = 1, uint32_t y_ = 1, uint32_t z_ = 1) : x(x_), y(y_), z(z_) {}
  uint32_t x, y, z;
};

// Blocks of `block` needed to cover n items (ceil(n / block)).
inline uint32_t cdiv(uint64_t n, uint64_t block) { return static_cast<uint32_t>((n + block - 1) / block); }

class Stream;

// The shape of one launch: grid, block, dynamic shared memory per block, and the stream
// (nullptr: the calling thread's current stream).
struct Launch {
  Launch(Dim3 grid_, Dim3 block_, uint32_t shared_bytes_ = 0, Stream* stream_ = nullptr)
      : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(stream_) {}
  Dim3 grid, block;
  uint32_t shared_bytes;
  Stream* stream;
  // Return once the launch, and the stream's work before it, is done (a synchronous op call).
  // On the CPU an idle stream's launch then runs on the calling thread, and on its OpenMP team
  // where the process has one (torch's): KILN_CPU_OPENMP=0 keeps it on kiln's own threads.
  bool wait = false;
};

// One launch argument with its C++ type, so that it can be checked against the spec.
class KILN_API Arg {
 public:
  enum class Kind : uint8_t { kPointer, kBool, kInt8, kUInt8, kInt16, kUInt16, kInt32, kUInt32, kInt64, kUInt64, kFloat16, kBFloat16, kFloat, kDouble, kVoid };

  template <class T, std::enable_if_t<std::is_arithmetic_v<T> || std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>, int> = 0>
  Arg(T value) : m_kind(kind_of<T>()) {  // NOLINT: implicit on purpose (launch(..., n))
    static_assert(sizeof(T) <= sizeof(m_value));
    std::memcpy(m_value, &value, sizeof(T));
    m_size = sizeof(T);
  }
  template <class T>
  Arg(T* pointer)  // NOLINT
      : m_kind(Kind::kPointer), m_pointee(kind_of<std::remove_cv_t<T>>()), m_const(std::is_const_v<T>) {
    const void* p = pointer;
    std::memcpy(m_value, &p, sizeof p);
    m_size = sizeof p;
  }

  Kind kind() const { return m_kind; }
  Kind pointee() const { return m_pointee; }  // kVoid for void*, which any pointer parameter takes
  bool pointee_const() const { return m_const; }
  const void* value() const { return m_value; }
  size_t size() const { return m_size; }
  // The C++ spelling of the type, for messages ("const float*", "int32_t").
  std::string type_name() const;

 private:
  template <class T>
  static constexpr Kind kind_of() {
    if constexpr (std::is_same_v<T, bool>) return Kind::kBool;
    else if constexpr (std::is_same_v<T, float16>) return Kind::kFloat16;
    else if constexpr (std::is_same_v<T, bfloat16>) return Kind::kBFloat16;
    else if constexpr (std::is_same_v<T, float>) return Kind::kFloat;
    else if constexpr (std::is_same_v<T, double>) return Kind::kDouble;
    else if constexpr (std::is_integral_v<T>) {
      constexpr bool s = std::is_signed_v<T>;
      if constexpr (sizeof(T) == 1) return s ? Kind::kInt8 : Kind::kUInt8;
      else if constexpr (sizeof(T) == 2) return s ? Kind::kInt16 : Kind::kUInt16;
      else if constexpr (sizeof(T) == 4) return s ? Kind::kInt32 : Kind::kUInt32;
      else return s ? Kind::kInt64 : Kind::kUInt64;
    } else return Kind::kVoid;  // void, or a type kiln does not know: only void* parameters take it
  }

  Kind m_kind;
  Kind m_pointee = Kind::kVoid;
  bool m_const = false;
  size_t m_size = 0;
  alignas(8) unsigned char m_value[8] = {};
};

// A parameter of an entry point, as its spec declares it.
struct Param {
  std::string type;  // "const float*", "int64_t"
  std::string name;
};

class Context;

// An op of one Context, for that Context's accelerator. Cheap to copy; copies share the
// loaded code. It stays usable as long as its Context lives.
class KILN_API Op {
 public:
  const std::string& name() const;
  std::string target() const;  // what it is built for: "cpu:x86-64-v3", "cuda:sm_90"
  // The entry points and their parameters (the first entry is the default one).
  std::vector<std::string> entries() const;
  std::vector<Param> params(std::string_view entry = "") const;

  // Ahead of time: compiles it now (or finds it in the cache) and loads it. Launching does the
  // same on first use. Throws Error("compile_error") with the diagnostics.
  void build();
  bool loaded() const;
  // Where the code came from once built: "memory", "disk", "remote" or "compiled".
  std::string cache_source() const;

  // Launches the default entry, or `entry`, with typed arguments.
  template <class... Args>
  void launch(const Launch& config, Args&&... args) {
    const Arg list[] = {Arg(args)..., Arg(0)};
    launch_args("", config, list, sizeof...(Args));
  }
  template <class... Args>
  void launch_entry(std::string_view entry, const Launch& config, Args&&... args) {
    const Arg list[] = {Arg(args)..., Arg(0)};
    launch_args(entry, config, list, sizeof...(Args));
  }
  void launch_args(std::string_view entry, const Launch& config, const Arg* args, size_t count);

  // The launch the op's spec gives for a problem of these sizes on the accelerator that runs it:
  // on CUDA, [cuda] block and grid, the grid sized to the device (its `sm_count`); elsewhere the
  // [check]'s (README, "A spec"). Sizes are named as the spec's dims and the entry's integer
  // parameters ({"n", 1 << 20}); dims not given keep the spec's values. `block` non-zero
  // replaces the spec's. Throws Error("invalid_argument") when the spec gives no launch or its
  // expressions fail for these sizes. Costs an expression evaluation: keep the result for
  // repeated launches of one size.
  Launch launch_for(const std::map<std::string, int64_t>& sizes, uint32_t block = 0) const;

  struct Impl;

 private:
  friend class Context;
  explicit Op(std::shared_ptr<Impl> impl) : m_impl(std::move(impl)) {}
  std::shared_ptr<Impl> m_impl;
};

class Graph;

// Marks a point in a stream's work (maps to CUevent). Made by Context::create_event.
class KILN_API Event {
 public:
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  bool query();        // true when the work recorded before it is done (or it was never recorded)
  void synchronize();  // blocks until query() would be true
  double elapsed_ms_since(Event& start);  // both recorded and done; needs the event_timing capability
  struct Impl;

 private:
  friend class Context;
  friend class Stream;
  explicit Event(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// An in-order queue of work on the Context's accelerator (maps to CUstream). Launches name it
// in Launch::stream; one made by Context::wrap_stream is a framework's, which kiln never frees.
class KILN_API Stream {
 public:
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void synchronize();
  bool query();  // true when everything queued so far is done, without blocking
  void record(Event& event);
  void wait(Event& event);  // later work on this stream waits for `event`
  // Capture: work queued until end_capture() is recorded, not run, and comes back as a Graph
  // that replays it (cuStreamBeginCapture / cuGraphInstantiate). Needs the graphs capability.
  void begin_capture();
  std::unique_ptr<Graph> end_capture();
  struct Impl;

 private:
  friend class Context;
  friend class Op;
  friend class Graph;
  explicit Stream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// Captured work, replayed as a whole with its arguments already resolved (maps to CUgraphExec).
class KILN_API Graph {
 public:
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void launch(Stream& stream);
  struct Impl;

 private:
  friend class Stream;
  explicit Graph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// Device memory as the accelerator sees it (maps to torch.cuda.memory_stats).
struct MemoryStats {
  uint64_t allocated = 0, max_allocated = 0;  // bytes handed out by allocate(), and their peak
  uint64_t reserved = 0, max_reserved = 0;    // bytes held from the driver or OS, and their peak
  uint64_t total = 0, available = 0;          // the device's memory, and what is free on it now
};

template <class T>
class Buffer;

// A host shared library built from C++ sources through kiln's pipeline: the same key, cache,
// single compile per key, remote tiers and bundles as an op, but loaded by its user (a torch
// C++ extension imported by Python: kiln.torch.load builds one). Every path is absolute or
// relative to the working directory.
struct LibraryOptions {
  std::string name;                              // names it in messages and in the cache's index
  std::vector<std::string> sources;              // C++ source files, and CUDA ones (*.cu)
  std::vector<std::string> include_dirs;         // -I: the library's own headers
  std::vector<std::string> system_include_dirs;  // -isystem: what it builds against (torch's headers)
  std::vector<std::string> defines;              // "NAME" or "NAME=VALUE"
  // Defines that name this library rather than configure its headers (TORCH_EXTENSION_NAME):
  // left out of precompiled headers, so one serves every library with the same options.
  std::vector<std::string> unit_defines;
  std::vector<std::string> flags;       // compiler flags as clang++ takes them (-O3, -std=c++17, ...)
  std::vector<std::string> link_flags;  // -L, -l, -Wl,..., after the objects
  // Headers every source is compiled after, through one precompiled header kept in the cache
  // (torch/extension.h): the first library with these options makes it, later ones reuse it.
  std::vector<std::string> prelude;
  // What else decides the binary and is no file the compiler reads (a framework's version and
  // C++ ABI, the Python version): each enters the key as name=value.
  std::vector<std::pair<std::string, std::string>> facts;
  // Files under `root` enter the key by their path relative to it, so two checkouts in other
  // folders share keys. Empty: the folder that holds every source.
  std::string root;
  // Where to write the library. Empty: an anonymous memory file, named "/proc/self/fd/N",
  // which lives as long as the process.
  std::string output;
  // CUDA sources (*.cu) are compiled by Clang's CUDA path in-process with these flags (as Clang
  // takes them) in place of `flags`, after the system include folders, defines and unit defines
  // that all sources get, and no prelude. Their device code is compiled for each of `cuda_archs`
  // ("sm_90": a cubin for that GPU; "compute_90": PTX that the driver compiles for newer GPUs) and
  // embedded as one fat binary that registers with the CUDA runtime when the library loads, so
  // link the runtime (link_flags: -L<cuda>/lib64 -lcudart). Needs the CUDA toolkit
  // ($CUDA_HOME, $CUDA_PATH or /usr/local/cuda: headers, libdevice) and nvJitLink.
  std::vector<std::string> cuda_flags;
  std::vector<std::string> cuda_archs;
  // False for a one-off build (Inductor's probe of a vector ISA, compiled once per machine): a
  // stored precompiled header is still used, but none is made for it, since nothing would use it
  // again and making one costs more CPU than the build itself.
  bool make_precompiled_headers = true;
};

// What build_library made or found.
struct Library {
  std::string path;          // the shared object, ready for dlopen
  std::string key;           // its artifact key (hex)
  std::string cache_source;  // "memory", "disk", "remote" or "compiled"
  double compile_ms = 0;     // 0 on a hit
  double total_ms = 0;
  std::string log;                    // the compiler's output, when it compiled
  std::vector<std::string> warnings;  // e.g. the cache could not be written
  size_t precompiled_headers_used = 0;
  // A library with CUDA sources: "clang" (Clang's CUDA path, in-process), or "nvcc" when the
  // toolkit's nvcc compiled the sources Clang refused (`nvcc_sources`), as the last resort.
  std::string route;
  std::vector<std::string> nvcc_sources;
};

// ---- Artifacts that another compiler makes, kept by kiln (Triton's kernels: the group of files
// one compile makes). kiln stores such a group as one artifact of the caller's `kind` under the
// caller's key (text: whatever decides the files; kiln hashes it with the kind): written whole,
// checked when read, published to the remote tiers (signed when the cluster signs) and carried
// by bundles like every other artifact. Its files are handed out as real files in a folder of
// their own under the cache, copies of the checked artifact, put there whole (written to a
// temporary folder, then renamed into place), so no reader sees part of a group or files of two
// writers mixed. Once the copies have settled, a hit checks them by a stat each against the
// stamp (`.kiln-checked`, in the folder) written when they were last found equal to the checked
// blob; `kiln cache verify` reads them (cache/file_group.h).
//
// Kinds are lowercase letters, digits and '-' ("triton-group"), none of kiln's own ("cubin",
// "host-so", ...). File names are plain names (no '/', not "." or "..", not starting ".kiln-").

// A stored group's files.
struct FileGroup {
  std::string key;     // the artifact key (hex)
  std::string folder;  // the folder that holds them (not to be written)
  std::vector<std::pair<std::string, std::string>> files;  // (name, path), as stored
  std::string cache_source;  // "disk", "remote", or "stored" by store_files
};

// What an artifact's record says beside its bytes (`kiln cache list/show`).
struct ArtifactInfo {
  std::string label;      // what it is ("add_kernel"): the op column
  std::string target;     // "cuda:sm_90"
  std::string toolchain;  // what made it ("triton 3.9.0")
  double compile_ms = 0;      // what making it cost in wall time: a hit saves that much
  double compile_cpu_ms = 0;  // and in CPU time (the compiler's threads and child processes)
  std::string log;
  // Whether what is stored was made by a compile (counted as one in `kiln cache stats`, with its
  // times); false for what merely goes with one (Triton's record of a compile's arguments).
  bool compiled = true;
};

// The right to make an artifact no one has yet (Context::find_or_claim_files): while it is held,
// every other process of this node asking for the key waits (a lock the kernel drops however
// this process dies), and so does every other node (a lease on the first remote tier that has
// leases, Redis: renewed while held, it expires `remote.lease` seconds after its holder dies).
// It ends when the artifact is stored (store_files), when release() is called (the make failed:
// a waiter then makes it), or when it is destroyed.
class KILN_API Claim {
 public:
  ~Claim();
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  // False once released or stored, and when nothing could be taken (a wait timed out; no cache).
  bool held() const;
  void release();
  struct Impl;

 private:
  friend class Context;
  explicit Claim(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

struct FilesOrClaim {
  std::optional<FileGroup> found;  // set: someone made it (perhaps while this call waited)
  std::unique_ptr<Claim> claim;    // set when not found: make it, then store_files(..., claim)
};

struct Options {
  // Folders searched for <op>.toml before the bundled specs (then $KILN_SPEC_PATH's).
  std::vector<std::string> spec_dirs;
  std::string cache_dir;    // empty: the cache_dir setting (KILN_CACHE_DIR, config file, ~/.cache/kiln)
  // "cpu", "cuda"; empty: KILN_ACCELERATOR or the best one here; "none": no accelerator, for a
  // Context that only builds libraries (nothing is initialised on any device).
  std::string accelerator;
};

// The accelerator, the spec folders and the cache: one per process is the usual case.
class KILN_API Context {
 public:
  explicit Context(const Options& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  std::string accelerator() const;    // "cpu", "cuda"
  std::string native_target() const;  // what ops build for unless told: "cpu:x86-64-v3"
  // The cache folder in use; empty when it could not be opened (ops then compile into memory).
  std::string cache_dir() const;

  // The op of that name from the spec folders. Throws Error("not_found") naming the folders
  // searched, or Error("invalid_spec") with the file and line of what is wrong in its spec.
  Op op(const std::string& name, const std::string& target = "");
  // An op whose spec is given as text; relative paths in it (sources, include_dirs) are
  // relative to `base_dir`.
  Op op_from_spec(const std::string& toml, const std::string& base_dir, const std::string& target = "");

  // Builds (or finds in the cache) a host library. Throws Error("compile_error") with the
  // diagnostics, Error("invalid_argument") for a source that cannot be read.
  Library build_library(const LibraryOptions& options);

  // A stored group of files of `kind` under the caller's `key`: this node's cache, then the remote
  // tiers (a hit there is stored here too); nullopt on a miss. A damaged artifact is a miss (and
  // removed). Throws Error("invalid_argument") for a bad kind or an empty key.
  std::optional<FileGroup> find_files(const std::string& kind, const std::string& key);
  // find_files, and on a miss one make per key across processes and nodes: it waits while
  // another process or node holds the key's claim, looking again after each wait, and when the
  // group is still missing returns a Claim for the caller to make it.
  FilesOrClaim find_or_claim_files(const std::string& kind, const std::string& key);
  // Stores the group (name, content) as one artifact, publishes it to the writable remote tiers,
  // then ends `claim` (may be null). keep_first: when the key is stored already, that group
  // stays and is returned (the first writer wins: autotuning results every rank must share).
  FileGroup store_files(const std::string& kind, const std::string& key, const std::vector<std::pair<std::string, std::string>>& files,
                        const ArtifactInfo& info = {}, Claim* claim = nullptr, bool keep_first = false);
  // Every group of `kind` in this node's cache (not the remote tiers: they cannot be listed),
  // each read, checked and handed out as find_files hands it out; a damaged one is left out (and
  // removed). What `kiln warm --triton` replays: the records a run kept (kind triton-record).
  std::vector<FileGroup> list_files(const std::string& kind);
  // Adds `delta` to the counter `name` in the cache's counters (`kiln cache stats`): what a
  // program that keeps its compiles through these calls did beside them (the NVRTC library's
  // compiles it could not key). A name holds no blank; nothing happens without a cache.
  void count(const std::string& name, int64_t delta = 1);

  // Device memory.
  void* allocate(size_t bytes);
  void deallocate(void* pointer) noexcept;
  void copy(void* dst, const void* src, size_t bytes);  // any direction; synchronous
  template <class T>
  Buffer<T> buffer(size_t count) {
    return Buffer<T>(*this, count);
  }

  std::unique_ptr<Stream> create_stream();
  std::unique_ptr<Event> create_event();

  // The accelerator as frameworks' accelerator objects describe it (DeepSpeed's, torch.cuda).
  int device_count() const;
  std::string device_name(int device = 0) const;
  int current_device() const;
  MemoryStats memory_stats() const;
  void reset_peak_memory();
  std::vector<std::string> supported_dtypes() const;  // "float32", "bfloat16", ...
  // Empty when the accelerator has `capability` ("graphs", "pinned_memory", "event_timing",
  // "float16", "bfloat16", "multi_device", ...), else why not.
  std::string unsupported_reason(const std::string& capability) const;
  std::string communication_backend() const;  // "gloo", "nccl"
  // A stream of the accelerator's own API that kiln does not own, as an address (torch's
  // torch.cuda.current_stream().cuda_stream): launches given it are ordered with the
  // framework's work. Throws Error("unavailable") on an accelerator without native streams.
  std::unique_ptr<Stream> wrap_stream(void* native);
  void synchronize();  // waits for every stream

  struct Impl;

 private:
  friend class Op;
  std::unique_ptr<Impl> m_impl;
};

// `count` elements of T in the Context's device memory, freed on destruction.
template <class T>
class Buffer {
 public:
  Buffer(Context& ctx, size_t count) : m_ctx(&ctx), m_count(count), m_data(static_cast<T*>(ctx.allocate(count * sizeof(T)))) {}
  ~Buffer() {
    if (m_data) m_ctx->deallocate(m_data);
  }
  Buffer(Buffer&& other) noexcept : m_ctx(other.m_ctx), m_count(other.m_count), m_data(other.m_data) { other.m_data = nullptr; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() const { return m_data; }
  size_t size() const { return m_count; }
  void upload(const std::vector<T>& host) {
    if (host.size() != m_count) throw Error("invalid_argument", "upload of " + std::to_string(host.size()) + " elements into a buffer of " + std::to_string(m_count));
    m_ctx->copy(m_data, host.data(), m_count * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> host(m_count);
    m_ctx->copy(host.data(), m_data, m_count * sizeof(T));
    return host;
  }

 private:
  Context* m_ctx;
  size_t m_count;
  T* m_data;
};

}  // namespace kiln
