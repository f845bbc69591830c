// <kiln/kiln.h> over the ops API (builders/ops.h): the public types hold the internal ones
// behind pointers, so the header needs nothing but the standard library and libkiln.so
// exports nothing but these classes (everything linked into it is hidden: -Wl,--exclude-libs).
#include "kiln/kiln.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "builders/launch_shape.h"
#include "builders/ops.h"
#include "builders/spec.h"
#include "builders/target.h"
#include "cache/file_group.h"
#include "jit/toolchain.h"
#include "runtime/host_cpu.h"
#include "runtime/registry.h"
#include "support/file_util.h"

namespace kiln {
namespace {

const char* public_severity(jit::Diagnostic::Severity s) {
  switch (s) {
    case jit::Diagnostic::Severity::kNote: return "note";
    case jit::Diagnostic::Severity::kWarning: return "warning";
    case jit::Diagnostic::Severity::kError: return "error";
    case jit::Diagnostic::Severity::kFatal: return "fatal";
  }
  return "error";
}

[[noreturn]] void throw_status(const Status& status, std::vector<Diagnostic> diagnostics = {}) {
  std::string code = status_code_name(status.code());  // "not found" -> "not_found"
  for (char& c : code) c = c == ' ' ? '_' : c;
  throw Error(code, status.message(), std::move(diagnostics));
}

template <class T>
T value_or_throw(Result<T> result) {
  if (!result.ok()) throw_status(result.status());
  return std::move(result).value();
}

void check(const Status& status) {
  if (!status.ok()) throw_status(status);
}

Arg::Kind kind_of(builders::ScalarType t) {
  using S = builders::ScalarType;
  using K = Arg::Kind;
  switch (t) {
    case S::kBool: return K::kBool;
    case S::kInt8: return K::kInt8;
    case S::kUInt8: return K::kUInt8;
    case S::kInt16: return K::kInt16;
    case S::kUInt16: return K::kUInt16;
    case S::kInt32: return K::kInt32;
    case S::kUInt32: return K::kUInt32;
    case S::kInt64: return K::kInt64;
    case S::kUInt64: return K::kUInt64;
    case S::kFloat16: return K::kFloat16;
    case S::kBFloat16: return K::kBFloat16;
    case S::kFloat: return K::kFloat;
    case S::kDouble: return K::kDouble;
    case S::kVoid: return K::kVoid;
  }
  return K::kVoid;
}

const char* kind_name(Arg::Kind k) {
  using K = Arg::Kind;
  switch (k) {
    case K::kPointer: return "pointer";
    case K::kBool: return "bool";
    case K::kInt8: return "int8_t";
    case K::kUInt8: return "uint8_t";
    case K::kInt16: return "int16_t";
    case K::kUInt16: return "uint16_t";
    case K::kInt32: return "int32_t";
    case K::kUInt32: return "uint32_t";
    case K::kInt64: return "int64_t";
    case K::kUInt64: return "uint64_t";
    case K::kFloat16: return "kiln::float16";
    case K::kBFloat16: return "kiln::bfloat16";
    case K::kFloat: return "float";
    case K::kDouble: return "double";
    case K::kVoid: return "void";
  }
  return "?";
}

bool is_signed_int(Arg::Kind k) {
  return k == Arg::Kind::kInt8 || k == Arg::Kind::kInt16 || k == Arg::Kind::kInt32 || k == Arg::Kind::kInt64;
}
bool is_unsigned_int(Arg::Kind k) {
  return k == Arg::Kind::kUInt8 || k == Arg::Kind::kUInt16 || k == Arg::Kind::kUInt32 || k == Arg::Kind::kUInt64;
}

// An argument for a by-value parameter: the same type, or an integer the parameter holds
// whatever its value (int into int64_t, uint32_t into uint64_t or int64_t). Anything else
// (double into float, int64_t into int) would lose bits silently, so it is refused.
bool widens_to(const Arg& arg, Arg::Kind param, size_t param_size) {
  if (arg.kind() == param) return true;
  if (is_signed_int(arg.kind())) return is_signed_int(param) && param_size > arg.size();
  if (is_unsigned_int(arg.kind()))
    return (is_unsigned_int(param) && param_size > arg.size()) || (is_signed_int(param) && param_size > arg.size());
  return false;
}

// The value widened to the parameter's size (the widening above keeps the sign: sign-extend
// signed arguments, zero-extend unsigned ones).
void widen(const Arg& arg, Arg::Kind param, size_t param_size, unsigned char* out) {
  int64_t s = 0;
  uint64_t u = 0;
  const void* v = arg.value();
  switch (arg.kind()) {
    case Arg::Kind::kInt8: s = *static_cast<const int8_t*>(v); break;
    case Arg::Kind::kInt16: s = *static_cast<const int16_t*>(v); break;
    case Arg::Kind::kInt32: s = *static_cast<const int32_t*>(v); break;
    case Arg::Kind::kUInt8: u = *static_cast<const uint8_t*>(v); s = static_cast<int64_t>(u); break;
    case Arg::Kind::kUInt16: u = *static_cast<const uint16_t*>(v); s = static_cast<int64_t>(u); break;
    case Arg::Kind::kUInt32: u = *static_cast<const uint32_t*>(v); s = static_cast<int64_t>(u); break;
    default: std::memcpy(out, v, param_size); return;
  }
  if (param_size == 2) {
    int16_t x = static_cast<int16_t>(s);
    std::memcpy(out, &x, 2);
  } else if (param_size == 4) {
    int32_t x = static_cast<int32_t>(s);
    std::memcpy(out, &x, 4);
  } else {
    std::memcpy(out, &s, 8);
  }
}

}  // namespace

Error::Error(std::string code, const std::string& message, std::vector<Diagnostic> diagnostics)
    : std::runtime_error(message), m_code(std::move(code)), m_diagnostics(std::move(diagnostics)) {}

std::string Arg::type_name() const {
  if (m_kind != Kind::kPointer) return kind_name(m_kind);
  return std::string(m_const ? "const " : "") + kind_name(m_pointee) + "*";
}

// ---- Context

struct Context::Impl {
  std::unique_ptr<builders::Ops> ops;
  runtime::Accelerator* accelerator = nullptr;
};

// The Context's accelerator, or Error("unavailable") for one made with accelerator "none".
static runtime::Accelerator& accelerator_of(const Context::Impl& impl) {
  if (!impl.accelerator) throw Error("unavailable", "this Context has no accelerator (made with accelerator \"none\")");
  return *impl.accelerator;
}

Context::Context(const Options& options) : m_impl(std::make_unique<Impl>()) {
  builders::OpsOptions o;
  o.spec_dirs = options.spec_dirs;
  for (auto& d : o.spec_dirs) d = absolute_path(d);
  // Then what a kiln command would search: $KILN_SPEC_PATH, else the bundled specs.
  auto defaults = builders::Ops::default_spec_dirs();
  o.spec_dirs.insert(o.spec_dirs.end(), defaults.begin(), defaults.end());
  o.cache_dir = options.cache_dir;
  o.accelerator = options.accelerator;
  const bool none = o.accelerator == "none";
  m_impl->ops = value_or_throw(builders::Ops::create(std::move(o)));
  if (!none) m_impl->accelerator = &m_impl->ops->accelerator();
}

Context::~Context() = default;

std::string Context::accelerator() const { return m_impl->accelerator ? std::string(m_impl->accelerator->name()) : "none"; }
std::string Context::cache_dir() const { return m_impl->ops->store() ? m_impl->ops->store()->root() : ""; }
std::string Context::native_target() const {
  return m_impl->accelerator ? m_impl->accelerator->native_target() : "cpu:" + runtime::x86_level_name(runtime::host_x86_level());
}

namespace {
// The folder that holds every path of `paths` (at least "/").
std::string common_folder(const std::vector<std::string>& paths) {
  std::string common;
  for (auto& p : paths) {
    std::string dir = dirname_of(p);
    if (common.empty()) {
      common = dir;
      continue;
    }
    while (common != "/" && !path_is_within(dir, common)) common = dirname_of(common);
  }
  return common.empty() ? "/" : common;
}

// `bytes` as a file to dlopen: at `output` (written atomically), else in an anonymous memory file
// kept open until exit.
std::string place_library(const std::string& bytes, const std::string& output, const std::string& name) {
  if (!output.empty()) {
    auto current = read_file(output);
    if (!current.ok() || current.value() != bytes) check(write_file_atomic(output, bytes, /*durable=*/false));
    return output;
  }
  int fd = ::memfd_create(("kiln-" + name).c_str(), MFD_CLOEXEC);
  if (fd < 0) throw Error("unavailable", "cannot create a memory file for library " + name + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw Error("unavailable", "cannot write library " + name + " to a memory file: " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}
}  // namespace

Library Context::build_library(const LibraryOptions& options) {
  if (options.sources.empty()) throw Error("invalid_argument", "library " + options.name + " has no sources");
  builders::OpSpec spec;
  spec.name = options.name;
  spec.language = "cpp";
  std::vector<std::string> sources;
  for (auto& src : options.sources) sources.push_back(absolute_path(src));
  spec.spec_dir = options.root.empty() ? common_folder(sources) : absolute_path(options.root);
  spec.spec_path = spec.spec_dir + "/" + options.name + " (library)";
  for (auto& path : sources) {
    builders::SourceSpec s;
    s.path = path;
    s.rel_path = path_is_within(path, spec.spec_dir) ? relative_to(path, spec.spec_dir) : path;
    s.pos.file = path;
    spec.sources.push_back(std::move(s));
  }
  for (auto& d : options.include_dirs) spec.include_dirs.push_back(absolute_path(d));
  spec.defines = options.defines;
  for (auto& d : options.system_include_dirs) spec.flags.insert(spec.flags.end(), {"-isystem", absolute_path(d)});
  spec.flags.insert(spec.flags.end(), options.flags.begin(), options.flags.end());
  builders::LibrarySpec lib;
  lib.prelude = options.prelude;
  lib.unit_defines = options.unit_defines;
  lib.link_flags = options.link_flags;
  lib.facts = options.facts;
  lib.make_precompiled_headers = options.make_precompiled_headers;
  bool cuda = false;
  for (auto& path : sources) cuda = cuda || jit::is_cuda_source(path);
  if (cuda) {
    if (options.cuda_archs.empty())
      throw Error("invalid_argument", "library " + options.name + " has CUDA sources and no cuda_archs to compile them for");
    for (auto& arch : options.cuda_archs) {
      size_t digits = arch.rfind("sm_", 0) == 0 ? 3 : arch.rfind("compute_", 0) == 0 ? 8 : 0;
      if (!digits || arch.size() == digits || arch.size() > digits + 3 ||
          arch.find_first_not_of("0123456789", digits) != std::string::npos)
        throw Error("invalid_argument", "library " + options.name + ": CUDA architecture '" + arch +
                                            "' is not sm_<number> or compute_<number> (e.g. sm_90)");
    }
    for (auto& d : options.system_include_dirs) lib.cuda_flags.insert(lib.cuda_flags.end(), {"-isystem", absolute_path(d)});
    lib.cuda_flags.insert(lib.cuda_flags.end(), options.cuda_flags.begin(), options.cuda_flags.end());
    lib.cuda_archs = options.cuda_archs;
  }
  spec.library = std::move(lib);

  builders::Target target = value_or_throw(builders::parse_target("cpu:" + runtime::x86_level_name(runtime::host_x86_level())));
  builders::BuildOutcome outcome = value_or_throw(m_impl->ops->build(spec, target));
  if (!outcome.success) {
    std::vector<Diagnostic> diagnostics;
    for (auto& d : outcome.diagnostics) diagnostics.push_back({public_severity(d.severity), d.file, d.line, d.column, d.message});
    std::string text = outcome.diagnostics_text();
    throw Error("compile_error", "library " + options.name + " does not build:\n" + (text.empty() ? outcome.log : text),
                std::move(diagnostics));
  }
  Library out;
  out.path = place_library(outcome.artifact, options.output, options.name);
  out.key = outcome.key.hex();
  out.cache_source = builders::cache_outcome_name(outcome.cache);
  out.compile_ms = outcome.compile_ms;
  out.total_ms = outcome.total_ms;
  out.log = outcome.log;
  out.warnings = outcome.warnings;
  out.precompiled_headers_used = outcome.pch_used;
  out.route = outcome.route;
  out.nvcc_sources = outcome.nvcc_sources;
  return out;
}

// ---- Files another compiler made

namespace {
// The kinds kiln's own pipeline stores: an external artifact never takes one of them.
constexpr const char* k_own_kinds[] = {"host-so", "ptx", "cubin", "hsaco", "spirv", "opencl-binary", "opencl-program", "pch", "compile-error"};

void check_external(const std::string& kind, const std::string& key) {
  bool plain = !kind.empty() && kind.size() <= 64;
  for (char c : kind) plain = plain && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (!plain) throw Error("invalid_argument", "artifact kind '" + kind + "' is not 1-64 lowercase letters, digits and '-' (e.g. triton-group)");
  for (const char* own : k_own_kinds)
    if (kind == own) throw Error("invalid_argument", "artifact kind '" + kind + "' is one of kiln's own; name another compiler's kind (e.g. triton-group)");
  if (key.empty()) throw Error("invalid_argument", "an empty key for an artifact of kind " + kind);
}

// `blob_read`: the blob's identity from before it was read (cache/file_group.h), or nullopt.
FileGroup files_of(builders::Ops& ops, const cache::MappedArtifact& artifact, const char* source,
                   const std::optional<cache::FileIdentity>& blob_read) {
  auto files = cache::decode_file_group(artifact.bytes);
  if (!files.ok())
    throw Error("data_loss", "artifact " + artifact.record.key.hex() + " (" + artifact.record.kind + ") is not a group of files: " +
                                 files.status().message());
  cache::MaterializedFiles placed = value_or_throw(cache::materialize_file_group(
      ops.store()->root(), artifact.record.key, files.value(), ops.store()->blob_path(artifact.record.key), blob_read,
      cache::CompileCost{static_cast<int64_t>(artifact.record.compile_ms * 1000), static_cast<int64_t>(artifact.record.compile_cpu_ms * 1000)}));
  FileGroup out;
  out.key = artifact.record.key.hex();
  out.folder = std::move(placed.folder);
  out.files = std::move(placed.paths);
  out.cache_source = source;
  return out;
}

// The hit that reads neither blob nor files: the group's folder as its stamp says it was
// checked (cache/file_group.h), counted as a hit from the disk.
std::optional<FileGroup> placed_files(builders::Ops& ops, const Hash128& key) {
  cache::Store& store = *ops.store();
  std::optional<cache::PlacedFiles> placed = cache::placed_file_group(store.root(), key, store.blob_path(key));
  if (!placed) return std::nullopt;
  store.count_hit(key);  // what Store::map counts for a hit that reads the blob
  ops.count_disk_hit(placed->cost);
  FileGroup out;
  out.key = key.hex();
  out.folder = std::move(placed->files.folder);
  out.files = std::move(placed->files.paths);
  out.cache_source = builders::cache_outcome_name(builders::CacheOutcome::kDisk);
  return out;
}

builders::Ops& ops_with_store(Context::Impl& impl, const std::string& kind) {
  if (!impl.ops->store())
    throw Error("unavailable", "no kiln cache to keep " + kind + " artifacts in (it could not be opened; see the warning above)");
  return *impl.ops;
}
}  // namespace

struct Claim::Impl {
  std::unique_ptr<builders::Claim> claim;
};
Claim::Claim(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Claim::~Claim() = default;
bool Claim::held() const { return m_impl->claim && m_impl->claim->held(); }
void Claim::release() { m_impl->claim.reset(); }

std::optional<FileGroup> Context::find_files(const std::string& kind, const std::string& key) {
  check_external(kind, key);
  builders::Ops& ops = ops_with_store(*m_impl, kind);
  builders::CacheOutcome source = builders::CacheOutcome::kDisk;
  Hash128 k = builders::Ops::external_key(kind, key);
  if (auto placed = placed_files(ops, k)) return placed;
  std::optional<cache::FileIdentity> blob_read = cache::file_identity(ops.store()->blob_path(k));
  auto found = value_or_throw(ops.find_external(k, &source));
  if (!found) return std::nullopt;
  return files_of(ops, *found, builders::cache_outcome_name(source), blob_read);
}

FilesOrClaim Context::find_or_claim_files(const std::string& kind, const std::string& key) {
  check_external(kind, key);
  builders::Ops& ops = ops_with_store(*m_impl, kind);
  builders::CacheOutcome source = builders::CacheOutcome::kDisk;
  FilesOrClaim out;
  auto claim = std::make_unique<builders::Claim>();
  Hash128 k = builders::Ops::external_key(kind, key);
  if (auto placed = placed_files(ops, k)) {
    out.found = std::move(placed);
    return out;
  }
  std::optional<cache::FileIdentity> blob_read = cache::file_identity(ops.store()->blob_path(k));
  auto found = value_or_throw(ops.find_or_claim_external(k, kind + " " + k.hex().substr(0, 12), *claim, &source));
  if (found) {
    out.found = files_of(ops, *found, builders::cache_outcome_name(source), blob_read);
    return out;
  }
  auto impl = std::make_unique<Claim::Impl>();
  impl->claim = std::move(claim);
  out.claim.reset(new Claim(std::move(impl)));
  return out;
}

std::vector<FileGroup> Context::list_files(const std::string& kind) {
  check_external(kind, "-");
  builders::Ops& ops = ops_with_store(*m_impl, kind);
  std::vector<FileGroup> out;
  for (const cache::ArtifactRecord& r : value_or_throw(ops.store()->list())) {
    if (r.kind != kind) continue;
    std::optional<cache::FileIdentity> blob_read = cache::file_identity(ops.store()->blob_path(r.key));
    auto found = value_or_throw(ops.store()->map(r.key));
    if (!found) continue;  // damaged (removed and counted) or evicted since the listing
    out.push_back(files_of(ops, *found, "disk", blob_read));
  }
  return out;
}

void Context::count(const std::string& name, int64_t delta) {
  if (m_impl->ops->store()) m_impl->ops->count(name, delta);
}

FileGroup Context::store_files(const std::string& kind, const std::string& key, const std::vector<std::pair<std::string, std::string>>& files,
                               const ArtifactInfo& info, Claim* claim, bool keep_first) {
  check_external(kind, key);
  builders::Ops& ops = ops_with_store(*m_impl, kind);
  cache::FileViews views = cache::views_of(files);
  check(cache::check_file_names(views));
  cache::ArtifactRecord record;
  record.key = builders::Ops::external_key(kind, key, &record.components);
  record.kind = kind;
  record.op = info.label.empty() ? kind : info.label;  // a record names what it is
  record.target = info.target;
  record.toolchain = info.toolchain;
  record.compile_ms = info.compile_ms;
  record.compile_cpu_ms = info.compile_cpu_ms;
  record.log = info.log;
  std::unique_ptr<builders::Claim> held = claim ? std::move(claim->m_impl->claim) : nullptr;
  std::string bytes = cache::encode_file_group(views);
  cache::MappedArtifact stored = value_or_throw(ops.store_external(std::move(record), std::move(bytes), std::move(held), keep_first, info.compiled));
  FileGroup out = files_of(ops, stored, "stored", std::nullopt);  // just written: nothing settled to stamp
  // With keep_first, another writer's group may have been there first: then it is the one given back.
  if (keep_first && cache::decode_file_group(stored.bytes).value() != views) out.cache_source = "disk";
  return out;
}

void* Context::allocate(size_t bytes) { return value_or_throw(m_impl->accelerator->allocate(bytes)); }
void Context::deallocate(void* pointer) noexcept {
  if (pointer) m_impl->accelerator->deallocate(pointer);
}
void Context::copy(void* dst, const void* src, size_t bytes) { check(m_impl->accelerator->copy(dst, src, bytes)); }
void Context::synchronize() { check(m_impl->accelerator->synchronize()); }

struct Stream::Impl {
  std::unique_ptr<runtime::Stream> stream;
};
struct Event::Impl {
  std::unique_ptr<runtime::Event> event;
};
struct Graph::Impl {
  std::unique_ptr<runtime::Graph> graph;
};
Stream::Stream(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Stream::~Stream() = default;
void Stream::synchronize() { check(m_impl->stream->synchronize()); }
bool Stream::query() { return m_impl->stream->query(); }
void Stream::record(Event& event) { check(m_impl->stream->record(*event.m_impl->event)); }
void Stream::wait(Event& event) { check(m_impl->stream->wait(*event.m_impl->event)); }
void Stream::begin_capture() { check(m_impl->stream->begin_capture()); }
std::unique_ptr<Graph> Stream::end_capture() {
  auto impl = std::make_unique<Graph::Impl>();
  impl->graph = value_or_throw(m_impl->stream->end_capture());
  return std::unique_ptr<Graph>(new Graph(std::move(impl)));
}
Event::Event(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Event::~Event() = default;
bool Event::query() { return m_impl->event->query(); }
void Event::synchronize() { check(m_impl->event->synchronize()); }
double Event::elapsed_ms_since(Event& start) { return value_or_throw(m_impl->event->elapsed_ms_since(*start.m_impl->event)); }
Graph::Graph(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
Graph::~Graph() = default;
void Graph::launch(Stream& stream) { check(m_impl->graph->launch(*stream.m_impl->stream)); }

std::unique_ptr<Event> Context::create_event() {
  auto impl = std::make_unique<Event::Impl>();
  impl->event = value_or_throw(accelerator_of(*m_impl).create_event());
  return std::unique_ptr<Event>(new Event(std::move(impl)));
}

int Context::device_count() const { return accelerator_of(*m_impl).device_count(); }
std::string Context::device_name(int d) const { return accelerator_of(*m_impl).device_name(d); }
int Context::current_device() const { return accelerator_of(*m_impl).current_device(); }
MemoryStats Context::memory_stats() const {
  runtime::MemoryStats m = accelerator_of(*m_impl).memory_stats();
  return MemoryStats{m.allocated, m.max_allocated, m.reserved, m.max_reserved, m.total, m.available};
}
void Context::reset_peak_memory() { accelerator_of(*m_impl).reset_peak_memory(); }
std::vector<std::string> Context::supported_dtypes() const {
  std::vector<std::string> out;
  for (runtime::DType t : accelerator_of(*m_impl).supported_dtypes()) out.emplace_back(runtime::dtype_name(t));
  return out;
}
std::string Context::unsupported_reason(const std::string& capability) const {
  for (runtime::Capability c : runtime::k_all_capabilities)
    if (runtime::capability_name(c) == capability) {
      Status s = accelerator_of(*m_impl).supports(c);
      return s.ok() ? "" : s.message();
    }
  std::string known;
  for (runtime::Capability c : runtime::k_all_capabilities) known += (known.empty() ? "" : ", ") + std::string(runtime::capability_name(c));
  throw Error("invalid_argument", "no capability named '" + capability + "' (there are " + known + ")");
}
std::string Context::communication_backend() const { return std::string(accelerator_of(*m_impl).communication_backend()); }

std::unique_ptr<Stream> Context::create_stream() {
  auto impl = std::make_unique<Stream::Impl>();
  impl->stream = value_or_throw(m_impl->accelerator->create_stream());
  return std::unique_ptr<Stream>(new Stream(std::move(impl)));
}

std::unique_ptr<Stream> Context::wrap_stream(void* native) {
  if (!m_impl->accelerator) throw Error("unavailable", "this Context has no accelerator (made with accelerator \"none\")");
  auto impl = std::make_unique<Stream::Impl>();
  impl->stream = value_or_throw(m_impl->accelerator->wrap_stream(native));
  return std::unique_ptr<Stream>(new Stream(std::move(impl)));
}

// ---- Op

struct Op::Impl {
  Context::Impl* ctx;
  builders::OpSpec spec;
  std::string target;       // as asked ("" = native)
  bool from_spec_text = false;
  std::once_flag built;
  std::shared_ptr<builders::LoadedOp> loaded;  // set once, before `ready`
  std::atomic<bool> ready{false};
  builders::CacheOutcome source = builders::CacheOutcome::kCompiled;  // where build() found it
  std::exception_ptr error;  // what building threw, thrown again to every caller

  void build() {
    std::call_once(built, [this] {
      try {
        build_now();
      } catch (...) {
        error = std::current_exception();
      }
    });
    if (error) std::rethrow_exception(error);
  }

  void build_now() {
    auto& ops = *ctx->ops;
    builders::Target t = value_or_throw(builders::parse_target(target.empty() ? ctx->accelerator->native_target() : target));
    // Build first, so a compile error comes back with its diagnostics as structured data.
    builders::BuildOutcome outcome = value_or_throw(ops.build(spec, t));
    if (!outcome.success) {
      std::vector<Diagnostic> diagnostics;
      for (auto& d : outcome.diagnostics) diagnostics.push_back({public_severity(d.severity), d.file, d.line, d.column, d.message});
      throw Error("compile_error", "op " + spec.name + " does not compile for " + t.str() + ":\n" + outcome.diagnostics_text(),
                  std::move(diagnostics));
    }
    source = outcome.cache;
    // Now a hit in memory or on disk.
    loaded = value_or_throw(from_spec_text ? ops.load_spec(spec, t.str()) : ops.get(spec.name, t.str()));
    ready.store(true, std::memory_order_release);
  }
};

Op Context::op(const std::string& name, const std::string& target) {
  auto impl = std::make_shared<Op::Impl>();
  impl->ctx = m_impl.get();
  impl->spec = value_or_throw(m_impl->ops->find_spec(name));
  impl->target = target;
  if (!target.empty()) value_or_throw(builders::parse_target(target));
  return Op(std::move(impl));
}

Op Context::op_from_spec(const std::string& toml, const std::string& base_dir, const std::string& target) {
  auto impl = std::make_shared<Op::Impl>();
  impl->ctx = m_impl.get();
  impl->spec = value_or_throw(builders::parse_spec_text(toml, absolute_path(base_dir) + "/<spec given as text>.toml"));
  impl->target = target;
  impl->from_spec_text = true;
  if (!target.empty()) value_or_throw(builders::parse_target(target));
  return Op(std::move(impl));
}

const std::string& Op::name() const { return m_impl->spec.name; }

std::string Op::target() const {
  if (loaded()) return m_impl->loaded->outcome().target;
  return m_impl->target.empty() ? m_impl->ctx->accelerator->native_target() : m_impl->target;
}

std::vector<std::string> Op::entries() const {
  std::vector<std::string> out;
  for (auto& e : m_impl->spec.entries) out.push_back(e.name);
  return out;
}

namespace {
const builders::EntryPoint& find_entry(const builders::OpSpec& spec, std::string_view entry) {
  if (entry.empty()) return spec.entries.front();
  if (auto* e = spec.find_entry(std::string(entry))) return *e;
  std::string names;
  for (auto& e : spec.entries) names += (names.empty() ? "" : ", ") + e.name;
  throw Error("not_found", "op " + spec.name + " has no entry " + std::string(entry) + " (it has " + names + ")");
}
}  // namespace

std::vector<Param> Op::params(std::string_view entry) const {
  std::vector<Param> out;
  for (auto& p : find_entry(m_impl->spec, entry).params) out.push_back({p.type, p.name});
  return out;
}

void Op::build() { m_impl->build(); }
bool Op::loaded() const { return m_impl->ready.load(std::memory_order_acquire); }
std::string Op::cache_source() const {
  return loaded() ? builders::cache_outcome_name(m_impl->source) : "";
}

Launch Op::launch_for(const std::map<std::string, int64_t>& sizes, uint32_t block) const {
  runtime::Accelerator* acc = nullptr;
  if (loaded()) {
    acc = &m_impl->loaded->accelerator();
  } else {
    const std::string& target = m_impl->target;
    acc = target.empty() ? &accelerator_of(*m_impl->ctx)
                         : value_or_throw(m_impl->ctx->ops->accelerator_for(value_or_throw(builders::parse_target(target))));
  }
  builders::LaunchShape shape = value_or_throw(builders::spec_launch(m_impl->spec, acc->name(), acc->multiprocessor_count(), sizes, block));
  const runtime::LaunchConfig& c = shape.config;
  return Launch(Dim3(c.grid.x, c.grid.y, c.grid.z), Dim3(c.block.x, c.block.y, c.block.z), c.shared_bytes);
}

void Op::launch_args(std::string_view entry_name, const Launch& config, const Arg* args, size_t count) {
  const builders::OpSpec& spec = m_impl->spec;
  const builders::EntryPoint& entry = find_entry(spec, entry_name);
  auto where = [&](size_t i) {
    return "op " + spec.name + ", entry " + entry.name + ", parameter " + std::to_string(i + 1) + " '" + entry.params[i].type + " " +
           entry.params[i].name + "'";
  };
  // Checked before anything is compiled or queued: a wrong call costs nothing.
  if (count != entry.params.size()) {
    std::string list;
    for (auto& p : entry.params) list += (list.empty() ? "" : ", ") + p.type + " " + p.name;
    throw Error("invalid_argument", "op " + spec.name + ", entry " + entry.name + " takes " + std::to_string(entry.params.size()) +
                                        " arguments (" + list + "), not " + std::to_string(count));
  }
  // On the stack for the usual few parameters: a launch allocates nothing of its own.
  using Slot = std::array<unsigned char, 8>;
  constexpr size_t k_inline = 16;
  Slot inline_values[k_inline];
  const void* inline_pointers[k_inline];
  std::vector<Slot> heap_values(count > k_inline ? count : 0);
  std::vector<const void*> heap_pointers(count > k_inline ? count : 0);
  Slot* values = count > k_inline ? heap_values.data() : inline_values;
  const void** pointers = count > k_inline ? heap_pointers.data() : inline_pointers;
  for (size_t i = 0; i < count; ++i) {
    const builders::ParamSpec& p = entry.params[i];
    const Arg& a = args[i];
    Arg::Kind want = kind_of(p.scalar);
    if (p.is_pointer) {
      bool param_const = p.type.rfind("const ", 0) == 0;
      if (a.kind() != Arg::Kind::kPointer)
        throw Error("invalid_argument", where(i) + " is a pointer; the argument is a " + a.type_name());
      if (a.pointee() != Arg::Kind::kVoid && want != Arg::Kind::kVoid && a.pointee() != want)
        throw Error("invalid_argument", where(i) + " points to " + kind_name(want) + "; the argument is a " + a.type_name());
      if (a.pointee_const() && !param_const)
        throw Error("invalid_argument", where(i) + " is written by the kernel; the argument is a " + a.type_name());
      std::memcpy(values[i].data(), a.value(), sizeof(void*));
    } else {
      if (!widens_to(a, want, p.size))
        throw Error("invalid_argument", where(i) + " takes " + p.type + "; the argument is a " + a.type_name() +
                                            (a.kind() == Arg::Kind::kPointer ? "" : " (convert it explicitly)"));
      widen(a, want, p.size, values[i].data());
    }
    pointers[i] = values[i].data();
  }
  m_impl->build();
  runtime::Kernel* kernel = value_or_throw(m_impl->loaded->kernel(entry.name));
  runtime::Stream& stream =
      config.stream ? *config.stream->m_impl->stream : m_impl->loaded->accelerator().current_stream();
  runtime::LaunchConfig lc{{config.grid.x, config.grid.y, config.grid.z}, {config.block.x, config.block.y, config.block.z},
                           config.shared_bytes, config.wait};
  check(kernel->launch(stream, lc, pointers, count));
  if (config.wait) check(stream.synchronize());
}

}  // namespace kiln
