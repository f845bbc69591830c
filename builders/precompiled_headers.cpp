#include "builders/precompiled_headers.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "builders/remote_lookup.h"
#include "cache/cache_key.h"
#include "cache/key_lock.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::builders {
namespace {

std::string_view trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// Where `header`, #included by a source in `source_dir` ("" for <...>), is found: the source's
// folder first for "...", then `dirs`, as the compiler looks. Empty when it is in none.
std::string resolve(const std::string& header, const std::string& source_dir, const std::vector<std::string>& dirs) {
  if (!source_dir.empty() && ::access((source_dir + "/" + header).c_str(), F_OK) == 0) return source_dir + "/" + header;
  for (auto& d : dirs)
    if (::access((d + "/" + header).c_str(), F_OK) == 0) return d + "/" + header;
  return {};
}

bool found_in(const std::string& header, const std::vector<std::string>& dirs) { return !resolve(header, {}, dirs).empty(); }

// A PCH built beside the compile that needed it (see prepare()) runs on the cycles nothing else
// wants: SCHED_IDLE, where the kernel allows it, else at nice 19. At nice 10, three of them
// beside DeepSpeed's FusedAdam (a C++ and a CUDA source on two cores) made its first build 45 s
// instead of 40.5 s. Returns the thread's nice value before.
int yield_the_cores() {
  const id_t self = static_cast<id_t>(::gettid());
  errno = 0;
  int nice = ::getpriority(PRIO_PROCESS, self);
  if (errno != 0) nice = 0;
  sched_param idle{};
  if (::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &idle) != 0) ::setpriority(PRIO_PROCESS, self, 19);
  return nice;
}

// Gives a yielded background build its priority back, once a compile waits for it. Without
// this, a build in SCHED_IDLE gets no cycle while anything else runs: Inductor's kernels of a
// cold node, each waiting for the prelude's PCH, waited 70-88 s for it on this 2-core machine
// under load (2026-11-28), where the build takes ~3 s of CPU.
void restore_priority(pid_t thread, int nice) {
  sched_param normal{};
  ::sched_setscheduler(thread, SCHED_OTHER, &normal);
  // The nice-19 fallback; raising it back may be refused to an unprivileged process (it then
  // stays low, as before).
  if (::getpriority(PRIO_PROCESS, static_cast<id_t>(thread)) != nice) ::setpriority(PRIO_PROCESS, static_cast<id_t>(thread), nice);
}

// Where the text of a PCH's prefix appears to the compiler: in the folder the Clang toolchain
// keeps out of dependency lists (jit/clang), a file that exists nowhere else.
constexpr const char* k_prefix_source = "/kiln-precompiled/prefix.h";

}  // namespace

namespace {

// `line` without its // and /* */ comments; `in_comment` carries a /* */ comment across lines.
std::string without_comments(std::string_view line, bool& in_comment) {
  std::string code;
  for (size_t i = 0; i < line.size();) {
    if (in_comment) {
      size_t end = line.find("*/", i);
      in_comment = end == std::string_view::npos;
      i = in_comment ? line.size() : end + 2;
    } else if (line.substr(i, 2) == "/*") {
      in_comment = true;
      i += 2;
    } else if (line.substr(i, 2) == "//") {
      break;
    } else {
      code += line[i++];
    }
  }
  return code;
}

}  // namespace

bool has_include_guard(std::string_view text) {
  // The first directive, past blank lines and comments: `#pragma once`, or `#ifndef X` with
  // `#define X` next.
  std::vector<std::string> directives;
  bool in_comment = false;
  while (!text.empty() && directives.size() < 2) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    std::string code = without_comments(line, in_comment);
    std::string_view c = trim(code);
    if (c.empty()) continue;
    if (c.front() != '#') return false;
    c = trim(c.substr(1));
    // One space between the directive and its name, as it is compared below.
    size_t space = c.find_first_of(" \t");
    std::string directive(c.substr(0, space));
    if (space != std::string_view::npos) directive += " " + std::string(trim(c.substr(space)));
    if (directives.empty() && directive == "pragma once") return true;
    directives.push_back(directive);
  }
  if (directives.size() != 2 || directives[0].rfind("ifndef ", 0) != 0 || directives[1].rfind("define ", 0) != 0) return false;
  const std::string guard = directives[0].substr(7);
  return directives[1].substr(7, directives[1].find(' ', 7) - 7) == guard;
}

std::string include_prefix(std::string_view text, const std::vector<std::string>& own_dirs,
                           const std::vector<std::string>& kiln_dirs, const std::string* source_dir) {
  std::string out;
  bool in_comment = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\\') break;  // a continued line: not a plain include
    std::string code = without_comments(line, in_comment);
    std::string_view c = trim(code);
    if (c.empty() || c == "#pragma once") continue;
    if (c.front() != '#') break;
    c = trim(c.substr(1));
    if (c.substr(0, 7) != "include") break;
    c = trim(c.substr(7));
    const bool quoted = !c.empty() && c.front() == '"';
    size_t close = c.empty() ? std::string_view::npos : c.find(quoted ? '"' : '>', 1);
    if (c.empty() || (c.front() != '<' && !quoted) || close == std::string_view::npos || !trim(c.substr(close + 1)).empty()) break;
    std::string header(c.substr(1, close - 1));
    if (quoted || found_in(header, own_dirs)) {
      // One of the op's own headers: only where the caller allows it, by its absolute path,
      // and only with an include guard (the source includes it again after the PCH); a path
      // that a "..." include cannot spell ends it.
      if (!source_dir) break;
      std::string path = resolve(header, quoted ? *source_dir : std::string(), own_dirs);
      auto header_text = path.empty() ? Result<std::string>(not_found(header)) : read_file(path);
      if (!header_text.ok() || !has_include_guard(*header_text) || path.find_first_of("\"\\\n") != std::string::npos) break;
      out += "#include \"" + path + "\"\n";
      continue;
    }
    if (found_in(header, kiln_dirs)) continue;
    out += "#include <" + header + ">\n";
  }
  return out;
}

namespace {

// One PCH a compile can use: of sources[source]'s include prefix, for a C++ or CUDA compile
// (cuda_pass -1), or for one pass of a host library's CUDA source (CompileRequest::pch_cuda_pass).
struct PlannedPch {
  size_t source;
  std::string prefix;
  int cuda_pass = -1;
  // The prefix names some of the op's own headers (by absolute path, "...").
  bool own_headers() const { return prefix.find("#include \"") != std::string::npos; }
};

// The PCHs that help `r`'s sources. On the CPU, a source with system includes at its top; for
// CUDA through Clang with the toolkit's headers, every source (the wrapper headers alone cost
// 0.5 s). Not for NVRTC (its PCH cannot outlive its process) nor kiln's CUDA prelude (a few ms
// to parse). A host library's CUDA source: one per pass, each parsing its prefix as that pass
// does, even an empty one (Clang's CUDA wrapper headers and the toolkit's: 2-4 s of each pass of
// DeepSpeed's quantize.cu); with torch's ATen headers in the prefix, as DeepSpeed's
// multi_tensor_adam.cu has, each pass parses them for 17-19 s without its PCH.
std::vector<PlannedPch> plan(const BuildRequest& r) {
  std::vector<PlannedPch> out;
  bool cpu = r.compile.language == "cpp", toolkit = r.compile.language == "cuda" && r.compile.cuda_toolkit_headers;
  if (!cpu && !toolkit) return out;
  std::vector<std::string> kiln_dirs = {cpu_device_include_dir(), cuda_device_include_dir()};
  const bool library = r.compile.host_library;
  if (library) {
    std::vector<int> passes = jit::cuda_device_sms(r.compile);
    passes.push_back(0);  // the host pass
    for (size_t i = 0; i < r.compile.sources.size(); ++i)
      if (jit::is_cuda_source(r.compile.sources[i].path) && !r.compile.external_compiles.count(i)) {  // not nvcc's
        const std::string dir = std::filesystem::path(r.compile.sources[i].path).parent_path().string();
        std::string prefix = include_prefix(r.compile.sources[i].text, r.compile.include_dirs, kiln_dirs, &dir);
        for (int pass : passes) out.push_back({i, prefix, pass});
      }
  }
  if (!r.compile.prelude.empty()) {
    // A host library's prelude stands before every C++ source: one PCH for all of them.
    std::string prefix;
    for (auto& h : r.compile.prelude) prefix += "#include <" + h + ">\n";
    for (size_t i = 0; i < r.compile.sources.size(); ++i)
      if (!jit::is_cuda_source(r.compile.sources[i].path)) out.push_back({i, prefix});
    return out;
  }
  for (size_t i = 0; i < r.compile.sources.size(); ++i) {
    if (library && jit::is_cuda_source(r.compile.sources[i].path)) continue;
    std::string prefix = include_prefix(r.compile.sources[i].text, r.spec->include_dirs, kiln_dirs);
    if (!prefix.empty() || toolkit) out.push_back({i, std::move(prefix)});
  }
  return out;
}

// The input key of a PCH: what the op's key has, less its sources and entry points, plus the
// prefix. Not the include folders: by construction the prefix's headers are not in the op's.
KeyParts pch_key(const BuildRequest& r, const std::string& identity, const PlannedPch& pch) {
  cache::KeyBuilder k("pch", /*keep_components=*/true);
  k.add("toolchain", identity);
  for (auto& var : environment_in_key())
    if (const char* v = std::getenv(var.c_str())) k.add("env:" + var, v);
  // CUDA: the PCH is parsed for the oldest architecture of the list, as the PTX is.
  k.add("target", r.target.backend == "cuda" ? "cuda:sm_" + std::to_string(cuda_archs(r.target).front()) : r.target.str());
  k.add("language", r.compile.language);
  if (r.compile.cuda_toolkit_headers) k.add("cuda-headers", "toolkit");
  if (r.compile.host_library) k.add("library", "host");  // its user's options, not kiln's
  for (auto& d : r.compile.defines) k.add("define", d);
  if (pch.cuda_pass < 0) {
    for (auto& f : r.compile.flags) k.add("flag", f);
  } else {
    // What that pass compiles with: the CUDA options, and, in the host pass, every architecture
    // (__CUDA_ARCH_LIST__).
    k.add("cuda-pass", pch.cuda_pass > 0 ? "device:sm_" + std::to_string(pch.cuda_pass) : "host");
    for (auto& f : r.compile.cuda_flags) k.add("cuda-flag", f);
    if (pch.cuda_pass == 0)
      for (auto& a : r.compile.cuda_archs) k.add("cuda-arch", a);
  }
  if (pch.own_headers()) {
    // The op's own headers find theirs through its folders, and may test its unit's defines.
    for (auto& d : r.compile.include_dirs) k.add("include-dir", d);
    for (auto& d : r.compile.unit_defines) k.add("unit-define", d);
  }
  k.add("prefix", pch.prefix);
  return {k.finish(), k.components()};
}

// The request that makes the PCH: the op's options, the prefix as the one source.
BuildRequest pch_request(const BuildRequest& r, const PlannedPch& pch) {
  BuildRequest p = r;
  p.compile.sources = {{k_prefix_source, pch.prefix}};
  p.compile.pch_cuda_pass = pch.cuda_pass;
  p.compile.cuda_pass_pchs.clear();
  p.compile.name_expressions.clear();
  p.compile.precompiled_headers.clear();
  if (!pch.own_headers()) {
    p.compile.include_dirs.clear();
    p.compile.unit_defines.clear();  // they name the unit, not its headers
  }
  p.compile.prelude.clear();       // the prefix is the prelude
  p.compile.link_flags.clear();
  p.compile.output = jit::CompileRequest::Output::kPrecompiledHeader;
  p.compile.label = r.compile.label + " (precompiled headers)";
  return p;
}

}  // namespace

Result<std::string> make_precompiled_header(jit::Toolchain& toolchain, const BuildRequest& request, size_t source) {
  for (auto& planned : plan(request)) {
    if (planned.source != source || planned.cuda_pass >= 0) continue;
    BuildRequest p = pch_request(request, planned);
    jit::CompileResult made = toolchain.compile(p.compile);
    if (!made.success) {
      std::string text;
      for (auto& d : made.diagnostics) text += d.to_string() + "\n";
      return Status(StatusCode::kCompileError, "the precompiled header does not build:\n" + text);
    }
    return std::move(made.artifact);
  }
  return not_found("source " + std::to_string(source) + " of op " + request.spec->name + " has no include prefix to precompile");
}

PrecompiledHeaders::~PrecompiledHeaders() { wait(); }

void PrecompiledHeaders::wait() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(m_mutex);
    threads.swap(m_threads);
  }
  for (auto& t : threads) t.join();
}

std::optional<PrecompiledHeaders::Slot> PrecompiledHeaders::lookup(const KeyParts& key, const OpSpec& spec) {
  if (auto here = lookup_here(key, spec)) return here;
  if (!fetch_remote(key, spec)) return std::nullopt;
  return lookup_here(key, spec);
}

bool PrecompiledHeaders::fetch_remote(const KeyParts& key, const OpSpec& spec) {
  cache::RemoteTiers* tiers = m_remote ? m_remote() : nullptr;
  if (!tiers) return false;
  auto start = std::chrono::steady_clock::now();
  std::optional<RemoteArtifact> got = fetch_through_manifest(*tiers, *m_store, key, spec, "pch");
  if (!got) return false;
  if (got->fetched)
    KILN_LOG_AT(kInfo, "pch", "precompiled header for " + spec.name + " from a remote tier (" + std::to_string(got->artifact.bytes.size()) +
                                  " bytes in " +
                                  std::to_string(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count()) +
                                  " ms, checked)");
  return true;
}

void PrecompiledHeaders::publish(const KeyParts& key, const Hash128& artifact) {
  cache::RemoteTiers* tiers = m_remote ? m_remote() : nullptr;
  if (!tiers) return;
  auto blob = m_store->read_blob_file(artifact);
  auto manifest = m_store->get_manifest(key.key);
  if (!blob.ok() || !manifest.ok() || !manifest->has_value()) return;
  std::vector<cache::RemoteTiers::Publication> objects;
  objects.push_back({cache::RemoteObject::kArtifact, artifact, std::move(blob).value()});
  objects.push_back({cache::RemoteObject::kManifest, key.key, std::move(**manifest)});
  tiers->publish(std::move(objects));
}

std::optional<PrecompiledHeaders::Slot> PrecompiledHeaders::lookup_here(const KeyParts& key, const OpSpec& spec) {
  auto start = std::chrono::steady_clock::now();
  auto text = m_store->get_manifest(key.key);
  if (!text.ok() || !text->has_value()) return std::nullopt;
  auto manifest = decode_manifest(**text);
  if (!manifest.ok()) return std::nullopt;
  auto current = rehash_manifest(manifest.value(), spec);
  if (!current) return std::nullopt;
  auto rehashed = std::chrono::steady_clock::now();
  auto hit = m_store->map(artifact_key(key, *current).key);
  if (!hit.ok() || !hit->has_value()) return std::nullopt;
  if (log_enabled(LogLevel::kDebug)) {
    auto ms = [](auto a, auto b) { return std::to_string(std::chrono::duration<double, std::milli>(b - a).count()); };
    auto end = std::chrono::steady_clock::now();
    log_line(LogLevel::kDebug, "pch", "found " + std::to_string((*hit)->bytes.size()) + " bytes for " + spec.name + ": " +
                                          std::to_string(current->size()) + " headers rehashed in " + ms(start, rehashed) +
                                          " ms, blob read and checked in " + ms(rehashed, end) + " ms");
  }
  Slot slot;
  slot.done = true;
  slot.headers = std::move(*current);
  if ((*hit)->record.kind == "pch") {
    slot.memory = (*hit)->memory;
    slot.bytes = (*hit)->bytes;
  }
  return slot;
}

bool precompiled_headers_enabled() {
  const char* env = std::getenv("KILN_PCH");
  return !(env && std::string_view(env) == "0");
}

PchUse PrecompiledHeaders::prepare(BuildRequest& request, const std::string& identity,
                                   const std::function<jit::Toolchain*()>& toolchain) {
  PchUse use;
  if (!m_store || !precompiled_headers_enabled()) return use;
  const std::vector<PlannedPch> planned = plan(request);
  std::vector<std::pair<const PlannedPch*, std::shared_ptr<Slot>>> wanted;  // what this compile waits for
  std::vector<std::thread> first;  // the PCHs built before the compile, side by side
  for (const PlannedPch& pch : planned) {
    KeyParts key = pch_key(request, identity, pch);
    // Several sources of this compile share the prefix (a host library's prelude, the passes of
    // its CUDA sources): building the PCH first and compiling them all with it beats compiling
    // them without it (torch's headers: ~7 s a source without, ~1.3 s with, TOOLCHAIN-FACTS).
    // So does one CUDA source against the toolkit's headers: CUB's PCH takes 1.8 s of CPU to
    // build and a compile with it 0.06 s, where one without it takes 1.5 s beside that build
    // (clang++-22, this machine), and on two busy cores the CPU is what the wall time is made of.
    size_t sharing = 0;
    for (auto& other : planned) sharing += other.prefix == pch.prefix && other.cuda_pass == pch.cuda_pass;
    const bool build_first = sharing > 1 || request.compile.language == "cuda";
    std::shared_ptr<Slot> slot;
    bool start = false;
    jit::Toolchain* made_by = nullptr;
    {
      std::unique_lock lock(m_mutex);
      auto it = m_slots.find(key.key);
      if (it == m_slots.end()) {
        lock.unlock();
        auto found = lookup(key, *request.spec);  // outside the lock: it reads a blob
        // A one-off build (an ISA probe) uses a stored PCH and makes none.
        if (!found && request.spec->library && !request.spec->library->make_precompiled_headers) continue;
        // Building it needs the toolchain, which may still be loading: waited for unlocked too.
        jit::Toolchain* builder = found ? nullptr : toolchain();
        lock.lock();
        it = m_slots.find(key.key);
        if (it == m_slots.end()) {
          if (!found && !builder) continue;  // no toolchain: the compile says why, nothing is built
          slot = std::make_shared<Slot>(found.value_or(Slot{}));
          start = !found;
          made_by = builder;
          m_slots.emplace(key.key, slot);
        } else {
          slot = it->second;
        }
      } else {
        slot = it->second;
      }
    }
    if (start) {
      ++use.building;
      auto spec = std::make_shared<const OpSpec>(*request.spec);
      if (build_first) {
        first.emplace_back([this, slot, spec, p = pch_request(request, pch), key, identity, made_by]() mutable {
          build(slot, spec, std::move(p), key, identity, made_by);
        });
      } else {
        std::lock_guard lock(m_mutex);
        m_threads.emplace_back([this, slot, spec, p = pch_request(request, pch), key, identity, made_by]() mutable {
          // The compile that started it goes on without it and is what a caller waits for; the
          // PCH serves later compiles. So it yields the cores (a thread has its own scheduling class):
          // at equal priority on two cores it slowed a lone torch extension's first build by
          // ~15% (8.2 s against 7.0 s without PCHs, docs/history/2026-11-25-b7b5721-python.md). Unless a compile
          // already waits for it (then it is the critical path); one that starts waiting later
          // gives it its priority back (restore_priority).
          {
            std::lock_guard lock(m_mutex);
            slot->builder = ::gettid();
            if (!slot->wanted) slot->builder_nice = yield_the_cores();
          }
          // Two at a time: each holds its headers' AST (1-2 GB for torch's), and a host library
          // of many CUDA sources starts several per pass.
          m_background.acquire();
          build(slot, spec, std::move(p), key, identity, made_by);
          m_background.release();
        });
        continue;  // this compile goes on without it
      }
    }
    // Built in this process, or being built: wait for it rather than parse the headers again.
    wanted.emplace_back(&pch, std::move(slot));
  }
  for (auto& t : first) t.join();
  for (auto& [pch, slot] : wanted) {
    {
      std::unique_lock lock(m_mutex);
      if (!slot->done && !slot->wanted) {
        slot->wanted = true;
        if (slot->builder != 0) restore_priority(slot->builder, slot->builder_nice);
      }
      m_done.wait(lock, [&] { return slot->done; });
    }
    if (!slot->memory) continue;
    if (pch->cuda_pass >= 0)
      request.compile.cuda_pass_pchs[{pch->source, pch->cuda_pass}] = slot->bytes;
    else
      request.compile.precompiled_headers[pch->source] = slot->bytes;
    use.bytes.push_back(slot->memory);
    use.headers.insert(use.headers.end(), slot->headers.begin(), slot->headers.end());
    ++use.used;
  }
  return use;
}

void PrecompiledHeaders::build(std::shared_ptr<Slot> slot, std::shared_ptr<const OpSpec> spec, BuildRequest request,
                               KeyParts key, std::string identity, jit::Toolchain* toolchain) {
  request.spec = spec.get();
  auto finish = [&] {
    std::lock_guard lock(m_mutex);
    slot->done = true;
    m_done.notify_all();
  };
  // One build per PCH across processes: if another process holds its lock, it is building this
  // PCH; later compiles here will find it stored.
  cache::KeyLock lock = cache::KeyLock::acquire(m_store->root(), key.key, std::chrono::milliseconds(0));
  if (!lock.held()) return finish();
  jit::CompileResult made = toolchain->compile(request.compile);
  auto headers = manifest_from_dependencies(made.dependencies, request);
  if (!headers.ok() || (!made.success && !made.missing_files.empty())) return finish();
  KeyParts full = artifact_key(key, headers.value());
  cache::ArtifactRecord record;
  record.key = full.key;
  record.input_key = key.key;
  record.manifest = encode_manifest(headers.value());
  record.op = "(pch) " + request.spec->name;
  record.target = request.target.str();
  record.kind = made.success ? "pch" : "compile-error";
  record.toolchain = identity;
  record.components = cache::encode_components(full.components);
  record.compile_ms = made.compile_ms;
  record.log = made.log;
  // A PCH that does not build is stored as a failure too, so it is not tried on every compile.
  std::string failure = encode_diagnostics(made.diagnostics);
  Status stored = m_store->put(record, made.success ? std::string_view(made.artifact) : std::string_view(failure), cache::Compression::kNone);
  // Failures stay on the node that saw them: another node's headers may build.
  if (stored.ok() && made.success) publish(key, full.key);
  if (made.success) {
    auto bytes = std::make_shared<const std::string>(std::move(made.artifact));
    std::lock_guard guard(m_mutex);
    slot->bytes = *bytes;
    slot->memory = std::move(bytes);
    slot->headers = std::move(headers).value();
  }
  finish();
}

}  // namespace kiln::builders
