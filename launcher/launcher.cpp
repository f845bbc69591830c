#include "launcher/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>

#include "builders/ops.h"
#include "cache/cache_key.h"
#include "cache/file_group.h"
#include "launcher/compile_command.h"
#include "launcher/depfile.h"
#include "launcher/paths.h"
#include "support/cuda_toolkit.h"
#include "support/file_memo.h"
#include "support/file_util.h"
#include "support/log.h"
#include "support/subprocess.h"

extern char** environ;

namespace kiln::launcher {
namespace {

using builders::ManifestEntry;

constexpr const char* k_kind = "cc-output";
// The most a compiler may print on either stream for the compile to be kept: a log is replayed
// on every hit, not archived. All of it is shown either way.
constexpr size_t k_max_kept_output = size_t{16} << 20;
// The largest output kept: the store's own cap on one artifact (cache/remote.h's object cap).
constexpr uint64_t k_max_output_bytes = uint64_t{2} << 30;
// Set in the compiler's environment: a kiln cc that a compile starts (nvcc's host compiler
// behind a launcher of its own) runs its compiler untouched, rather than cache inside a cached
// compile.
constexpr const char* k_active_env = "KILN_CC_ACTIVE";

void warn(const std::string& message) { std::cerr << "kiln cc: warning: " << message << "\n"; }

// PATH lookup of a name (a path is taken as it is).
std::string find_compiler(const std::string& compiler) {
  if (compiler.find('/') != std::string::npos) return absolute_path(compiler);
  std::string_view path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  for (size_t at = 0; at <= path.size();) {
    size_t colon = std::min(path.find(':', at), path.size());
    std::string dir(path.substr(at, colon - at));
    at = colon + 1;
    std::string candidate = (dir.empty() ? "." : dir) + "/" + compiler;
    if (::access(candidate.c_str(), X_OK) == 0) return absolute_path(candidate);
  }
  return "";
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// Replaces this process with the compiler: what a command kiln does not cache costs no more
// than one exec.
[[noreturn]] void exec_compiler(const std::string& compiler, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(compiler.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(compiler.c_str(), argv.data());
  std::cerr << "kiln cc: error: cannot run " << compiler << ": " << std::strerror(errno) << "\n";
  std::_Exit(127);
}

// What a compiler run did.
struct Run {
  int exit_code = -1;
  std::string out, err;
  double wall_ms = 0, cpu_ms = 0;
};

std::string read_memfd(int fd) {
  std::string out;
  struct stat st{};
  if (::fstat(fd, &st) != 0) return out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

Result<Run> run_compiler(const std::string& compiler, const std::vector<std::string>& args) {
  int out_fd = ::memfd_create("kiln-cc-stdout", MFD_CLOEXEC), err_fd = ::memfd_create("kiln-cc-stderr", MFD_CLOEXEC);
  if (out_fd < 0 || err_fd < 0) return Status(StatusCode::kIoError, std::string("memfd_create: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(compiler.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string active = std::string(k_active_env) + "=1";
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  envp.push_back(active.data());
  envp.push_back(nullptr);
  struct rusage before{};
  ::getrusage(RUSAGE_CHILDREN, &before);
  auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, compiler.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ::close(out_fd);
    ::close(err_fd);
    return Status(StatusCode::kUnavailable, "cannot run " + compiler + ": " + std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  Run run;
  run.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  struct rusage after{};
  ::getrusage(RUSAGE_CHILDREN, &after);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  run.cpu_ms = ms(after.ru_utime) + ms(after.ru_stime) - ms(before.ru_utime) - ms(before.ru_stime);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_memfd(out_fd);
  run.err = read_memfd(err_fd);
  ::close(out_fd);
  ::close(err_fd);
  return run;
}

void replay(const std::string& out, const std::string& err) {
  if (!out.empty()) (void)write_all(1, out, "stdout");
  if (!err.empty()) (void)write_all(2, err, "stderr");
}

// ---- The compiler's identity: what enters the key in place of "which compiler".

// A C or C++ driver: its binary's content and its version line, and the binary of the compiler
// proper it runs (GCC's cc1plus/cc1): the driver alone can stay while the compiler proper is
// upgraded. The driver's answers are remembered through the file memo while it stats the same.
Status add_host_identity(cache::KeyBuilder& key, const std::string& field, const std::string& driver) {
  std::string real = real_path(driver);
  KILN_ASSIGN_OR_RETURN(Hash128 content, memo_file_hash(real));
  key.add(field, content);
  auto stamp = file_stamp(real);
  if (!stamp.ok()) return stamp.status();
  std::optional<std::string> facts = FileMemo::instance().get("cc-driver", real, stamp->digest());
  if (!facts) {
    std::string out;
    for (const char* prog : {"cc1plus", "cc1"}) {
      auto r = run_subprocess({real, std::string("-print-prog-name=") + prog}, "");
      std::string path = r.ok() && r->exit_code == 0 ? r->out.substr(0, r->out.find('\n')) : "";
      out += (path.empty() || path[0] != '/' ? std::string() : path) + "|";
    }
    auto version = run_subprocess({real, "--version"}, "");
    if (!version.ok() || version->exit_code != 0) return Status(StatusCode::kUnavailable, driver + " --version failed");
    out += version->out.substr(0, version->out.find('\n'));
    if (out.find_first_of("\t\n") != std::string::npos) out.erase(std::remove(out.begin(), out.end(), '\t'), out.end());
    facts = out;
    if (stamp->settled()) FileMemo::instance().put("cc-driver", real, stamp->digest(), out);
  }
  key.add(field + "-facts", *facts);
  // The compilers proper it names, by content.
  for (size_t at = 0, bar; (bar = facts->find('|', at)) != std::string::npos; at = bar + 1) {
    std::string prog = facts->substr(at, bar - at);
    if (prog.empty()) continue;
    if (auto h = memo_file_hash(prog); h.ok()) key.add(field + "-proper", h.value());
  }
  return {};
}

Status add_identity(cache::KeyBuilder& key, const std::string& compiler, const CompileCommand& cmd) {
  key.add("family", family_name(cmd.family));
  if (cmd.family != CompilerFamily::kNvcc) return add_host_identity(key, "compiler", compiler);
  // nvcc: the driver and every tool a compile runs, from its own folder (bin/ and nvvm/bin/),
  // and the toolkit's version file; then its host compiler.
  std::string bin = dirname_of(real_path(compiler));
  std::string root = dirname_of(bin);
  for (const std::string& tool : {bin + "/nvcc", bin + "/nvcc.profile", bin + "/ptxas", bin + "/fatbinary", bin + "/cudafe++",
                                  root + "/nvvm/bin/cicc", root + "/version.json"}) {
    auto h = memo_file_hash(tool);
    key.add("nvcc-tool", tool.substr(root.size()));
    key.add("nvcc-tool-content", h.ok() ? h.value().hex() : std::string("absent"));
  }
  std::string host = cmd.host_compiler;
  if (host.empty() && std::getenv("NVCC_CCBIN")) host = std::getenv("NVCC_CCBIN");
  std::vector<std::string> hosts;
  if (host.empty()) {
    hosts = {find_compiler("gcc"), find_compiler("g++")};
  } else {
    struct stat st{};
    if (::stat(host.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) hosts = {host + "/gcc", host + "/g++"};
    else hosts = {host.find('/') == std::string::npos ? find_compiler(host) : absolute_path(host)};
  }
  for (auto& h : hosts)
    if (!h.empty() && ::access(h.c_str(), X_OK) == 0) KILN_RETURN_IF_ERROR(add_host_identity(key, "host-compiler", h));
  return {};
}

// Variables that change what a compiler reads or makes (GCC's and nvcc's documentation).
constexpr const char* k_environment_in_key[] = {"CPATH",          "C_INCLUDE_PATH",     "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH",
                                                "GCC_EXEC_PREFIX", "COMPILER_PATH",     "SOURCE_DATE_EPOCH",  "NVCC_PREPEND_FLAGS",
                                                "NVCC_APPEND_FLAGS", "NVCC_CCBIN",      "CUDA_NVCC_EXECUTABLE", "SDKROOT"};

// The folders this compile may read headers from, for checking a manifest from elsewhere.
std::vector<std::string> header_roots(const CompileCommand& cmd, const PathLabels& paths, const std::string& compiler) {
  std::vector<std::string> roots = {paths.cwd(), "/usr/include", "/usr/local/include", "/usr/lib/gcc", "/usr/lib64/gcc"};
  roots.insert(roots.end(), paths.bases().begin(), paths.bases().end());
  roots.insert(roots.end(), cmd.include_dirs.begin(), cmd.include_dirs.end());
  roots.push_back(dirname_of(absolute_path(paths.path_of(paths.label(cmd.source)))));
  if (cmd.family != CompilerFamily::kGcc) {  // nvcc's toolkit, Clang's resource folder
    roots.push_back(dirname_of(dirname_of(compiler)));
    roots.push_back(dirname_of(dirname_of(real_path(compiler))));
  }
  for (auto& t : cuda_toolkit_roots()) roots.push_back(t);
  for (const char* var : {"CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"}) {
    std::string_view list = std::getenv(var) ? std::getenv(var) : "";
    for (size_t at = 0; at <= list.size();) {
      size_t colon = std::min(list.find(':', at), list.size());
      if (colon > at) roots.push_back(absolute_path(std::string(list.substr(at, colon - at))));
      at = colon + 1;
    }
  }
  return roots;
}

// A command whose result is not in the cache, by reason (`kiln cache stats`): "unknown option
// -foo" is counted as "unknown_option_-foo" (the store writes a blank in a counter's name as '_').
void count_not_cached(builders::Ops& ops, const std::string& reason) { ops.count("cc|not_cached|" + reason.substr(0, 96)); }

// A name a depfile may hold, as kiln writes it back: no control character (a tab or a newline
// would split it), no ';' (make reads what follows as a recipe), not empty.
bool safe_depfile_name(std::string_view name) {
  if (name.empty()) return false;
  return std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == ';'; });
}

// A depfile's names as a node-independent text: each absolute name as its label (paths.h), each
// relative one as it is (ninja matches a depfile's target against the output's name as written),
// one per line: "T <name>" a target, "P <name>" a prerequisite, "R" a new rule.
std::string label_depfile(const std::vector<DepRule>& rules, const PathLabels& paths) {
  auto name = [&](const std::string& n) { return !n.empty() && n[0] == '/' ? "L" + paths.label(n) : "N" + n; };
  std::string out;
  for (auto& r : rules) {
    out += "R\n";
    for (auto& t : r.targets) out += "T" + name(t) + "\n";
    for (auto& p : r.prerequisites) out += "P" + name(p) + "\n";
  }
  return out;
}

Result<std::vector<DepRule>> unlabel_depfile(std::string_view text, const PathLabels& paths) {
  std::vector<DepRule> rules;
  for (size_t at = 0; at < text.size();) {
    size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) return Status(StatusCode::kDataLoss, "a stored depfile does not end its last line");
    std::string_view line = text.substr(at, nl - at);
    at = nl + 1;
    if (line == "R") {
      rules.emplace_back();
      continue;
    }
    if (rules.empty() || line.size() < 2 || (line[0] != 'T' && line[0] != 'P') || (line[1] != 'L' && line[1] != 'N'))
      return Status(StatusCode::kDataLoss, "a stored depfile has a line kiln does not write");
    std::string name(line.substr(2));
    if (!safe_depfile_name(name)) return Status(StatusCode::kDataLoss, "a stored depfile names a file no compiler writes");
    if (line[1] == 'L') {
      name = paths.path_of(name);
      if (name.empty()) return Status(StatusCode::kDataLoss, "a stored depfile names a base folder this node lacks");
    }
    (line[0] == 'T' ? rules.back().targets : rules.back().prerequisites).push_back(std::move(name));
  }
  return rules;
}

// The headers a compile read, from its depfile: every prerequisite but the source, labeled and
// hashed now, sorted by label (the order the compiler read them in does not matter).
Result<std::vector<ManifestEntry>> manifest_of(const std::vector<DepRule>& rules, const CompileCommand& cmd, const PathLabels& paths) {
  std::string source_label = paths.label(cmd.source);
  std::set<std::string> seen;
  std::vector<ManifestEntry> out;
  // Only the first rule is the output's (-MP adds empty rules for each header).
  if (rules.empty()) return out;
  for (auto& dep : rules.front().prerequisites) {
    std::string label = paths.label(dep);
    if (label == source_label || !seen.insert(label).second) continue;
    auto hash = memo_file_hash(paths.path_of(label));
    if (!hash.ok()) return Status(StatusCode::kIoError, "cannot hash " + dep + ", which the compiler read: " + hash.status().message());
    out.push_back({label, hash.value()});
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.label < b.label; });
  return out;
}

std::string lookup_what(const CompileCommand& cmd) { return std::string(family_name(cmd.family)) + " " + cmd.source; }

// Why a source cannot be keyed by its content alone, or "": it names the time of its compile
// (__DATE__, __TIME__, __TIMESTAMP__) or pulls a file in with the assembler's .incbin, which no
// depfile lists. (Headers are not scanned: a __has_include that finds a header created later,
// or a header that shadows another in the search path, is missed as ccache's depend mode
// misses it; docs/LLM-SERVING.md.)
std::string unkeyable_source(const std::string& path) {
  auto text = read_regular_file(path, uint64_t{64} << 20);
  if (!text.ok()) return "source unreadable";
  for (std::string_view word : {"__DATE__", "__TIME__", "__TIMESTAMP__", ".incbin"})
    if (text->find(word) != std::string::npos) return std::string(word) + " in the source";
  return "";
}

// True when every file the compile read is as old as the compile: a file saved while the
// compiler ran may have been read before or after the save, so its hash says nothing about the
// object (the source is compared by its hash before and after instead).
bool settled_before(const std::vector<ManifestEntry>& manifest, const PathLabels& paths, int64_t start_ns) {
  for (auto& e : manifest) {
    auto st = file_stamp(paths.path_of(e.label));
    if (!st.ok() || st->mtime_ns >= start_ns || st->ctime_ns >= start_ns) return false;
  }
  return true;
}

// A hit: the output and depfile written where the build asked, and the compiler's words again.
Status serve_hit(const cache::Artifact& hit, const CompileCommand& cmd, const PathLabels& paths) {
  KILN_ASSIGN_OR_RETURN(cache::FileViews files, cache::decode_file_group(hit.bytes));
  std::string_view output, depfile, out, err;
  bool have_output = false;
  for (auto& [name, content] : files) {
    if (name == "output") output = content, have_output = true;
    else if (name == "depfile") depfile = content;
    else if (name == "stdout") out = content;
    else if (name == "stderr") err = content;
  }
  if (!have_output) return Status(StatusCode::kDataLoss, "a stored compile has no output");
  std::string dep_text;
  if (!cmd.depfile.empty()) {
    KILN_ASSIGN_OR_RETURN(auto rules, unlabel_depfile(depfile, paths));
    dep_text = render_depfile(rules);
  }
  // Written whole or not at all: a build killed now never finds half an object.
  KILN_RETURN_IF_ERROR(write_file_atomic(cmd.output, output, /*durable=*/false));
  if (!cmd.depfile.empty()) KILN_RETURN_IF_ERROR(write_file_atomic(cmd.depfile, dep_text, /*durable=*/false));
  replay(std::string(out), std::string(err));
  return {};
}

}  // namespace

CudaHomeResult write_cuda_home(const std::string& dir_arg, const std::string& cuda_home_arg, const std::string& kiln_binary,
                               const LauncherOptions& options) {
  std::string dir = absolute_path(dir_arg), cuda_home = real_path(absolute_path(cuda_home_arg));
  auto fail = [](const std::string& why) { return CudaHomeResult{false, why}; };
  if (::access((cuda_home + "/bin/nvcc").c_str(), X_OK) != 0) return fail(cuda_home + "/bin/nvcc is not an executable: not a CUDA toolkit");
  if (Status st = make_dirs(dir + "/bin", 0755); !st.ok()) return fail(st.message());
  // Compared as the kernel will follow them: a folder that is, or leads through a link into, the
  // toolkit itself (`--cuda-home /usr/local/cuda`, a link to cuda-13.0) must never be written.
  for (const std::string& mine : {real_path(dir), real_path(dir + "/bin")})
    if (path_is_within(mine, cuda_home) || path_is_within(cuda_home, mine))
      return fail(dir + " is or lies in the toolkit " + cuda_home + " (or holds it): choose a folder of its own");
  auto quote = [](const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  auto link_entries = [&](const std::string& from, const std::string& to, const std::set<std::string>& skip) -> Status {
    DIR* d = ::opendir(from.c_str());
    if (!d) return Status(StatusCode::kIoError, "cannot list " + from + ": " + std::strerror(errno));
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..") && !skip.count(e->d_name)) names.push_back(e->d_name);
    ::closedir(d);
    for (auto& n : names) {
      std::string link = to + "/" + n, target = from + "/" + n;
      char buf[PATH_MAX];
      ssize_t len = ::readlink(link.c_str(), buf, sizeof buf - 1);
      if (len >= 0 && std::string(buf, static_cast<size_t>(len)) == target) continue;
      struct stat st{};
      // Only a link (one kiln made for another toolkit) is replaced; anything else is left alone.
      if (::lstat(link.c_str(), &st) == 0) {
        if (!S_ISLNK(st.st_mode)) return Status(StatusCode::kInvalidArgument, link + " exists and is not a link: not a folder kiln made");
        ::unlink(link.c_str());
      }
      if (::symlink(target.c_str(), link.c_str()) != 0)
        return Status(StatusCode::kIoError, "cannot link " + link + ": " + std::strerror(errno));
    }
    return {};
  };
  if (Status st = link_entries(cuda_home, dir, {"bin"}); !st.ok()) return fail(st.message());
  if (Status st = link_entries(cuda_home + "/bin", dir + "/bin", {"nvcc"}); !st.ok()) return fail(st.message());
  std::string script = "#!/bin/sh\n# Written by kiln cc --cuda-home: nvcc through kiln's cache (docs/LLM-SERVING.md).\nexec " + quote(kiln_binary);
  if (!options.cache_dir.empty()) script += " --cache-dir " + quote(options.cache_dir);
  if (options.remote) script += " --remote " + quote(*options.remote);
  script += " cc " + quote(cuda_home + "/bin/nvcc") + " \"$@\"\n";
  std::string nvcc = dir + "/bin/nvcc";
  if (Status st = write_file_atomic(nvcc, script, /*durable=*/true); !st.ok()) return fail(st.message());
  if (::chmod(nvcc.c_str(), 0755) != 0) return fail("cannot make " + nvcc + " executable: " + std::strerror(errno));
  return CudaHomeResult{true, dir};
}

int run_launcher(const std::string& compiler_arg, const std::vector<std::string>& args, const LauncherOptions& options) {
  std::string compiler = find_compiler(compiler_arg);
  if (compiler.empty()) {
    std::cerr << "kiln cc: error: no compiler '" << compiler_arg << "' in PATH\n";
    return 127;
  }
  // Inside a compile kiln already caches (nvcc's host compiler behind its own launcher): run it.
  if (std::getenv(k_active_env)) exec_compiler(compiler, args);
  auto family = family_of(compiler_arg.find('/') == std::string::npos ? compiler_arg : compiler);
  PathLabels paths = PathLabels::from_environment();

  builders::OpsOptions ops_options;
  ops_options.accelerator = "none";
  ops_options.cache_dir = options.cache_dir;
  ops_options.remote = options.remote;
  auto ops = builders::Ops::create(ops_options);
  if (!ops.ok() || !(*ops)->store()) {
    warn(std::string("no kiln cache (") + (ops.ok() ? "the store could not be opened" : ops.status().message()) +
         "): running the compiler without it");
    exec_compiler(compiler, args);
  }
  auto not_cached = [&](const std::string& reason) {
    KILN_LOG_AT(kDebug, "cc", "not cached (" + reason + "): " + compiler);
    count_not_cached(**ops, reason);
    ops->reset();  // its counters written before the exec
    exec_compiler(compiler, args);
  };
  if (!family) not_cached("a compiler kiln does not know");
  auto parsed = parse_compile_command(*family, args, paths);
  if (auto* nc = std::get_if<NotCacheable>(&parsed)) not_cached(nc->reason);
  // A "DIR/*" base is bound to the source's folder: the labels are made again with it.
  if (paths.bind_source(std::get<CompileCommand>(parsed).source)) parsed = parse_compile_command(*family, args, paths);
  const CompileCommand& cmd = std::get<CompileCommand>(parsed);

  // ---- The input key.
  cache::KeyBuilder key("cc", /*keep_components=*/true);
  if (Status id = add_identity(key, compiler, cmd); !id.ok()) not_cached("compiler identity: " + id.message());
  // The name it was called by: Clang takes its language and target from it (clang, clang++,
  // aarch64-linux-gnu-clang all one binary), GCC its language (g++ compiles a .c file as C++).
  key.add("compiler-name", compiler_arg.substr(compiler_arg.rfind('/') + 1));
  if (std::string why = unkeyable_source(paths.path_of(paths.label(cmd.source))); !why.empty()) not_cached(why);
  key.add("mode", cmd.mode);
  for (auto& a : cmd.key_args) key.add("arg", a);
  for (const char* var : k_environment_in_key)
    if (const char* v = std::getenv(var)) key.add(std::string("env:") + var, v);
  // Debug information names the folder it was compiled in (DW_AT_comp_dir): then the folder
  // enters the key too, relative to a base folder when it lies in one (ccache's hash_dir).
  if (cmd.debug_info) key.add("cwd", paths.base_label(paths.cwd()));
  auto source_hash = memo_file_hash(paths.path_of(paths.label(cmd.source)));
  if (!source_hash.ok()) not_cached("source unreadable");  // the compiler says why
  key.add("source-content", source_hash.value());
  builders::KeyParts input{key.finish(), key.components()};
  auto began = std::chrono::steady_clock::now();
  auto since = [&] { return std::to_string(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count()) + " ms"; };
  KILN_LOG_AT(kDebug, "cc", lookup_what(cmd) + ": input key " + input.key.hex());

  std::vector<std::string> roots;
  builders::ManifestHeaders headers{
      lookup_what(cmd),
      [&](const std::vector<ManifestEntry>& m) {
        if (roots.empty()) roots = header_roots(cmd, paths, compiler);
        return builders::check_manifest_labels(m, paths.relative_prefixes(), roots,
                                               [&](const std::string& l) { return paths.path_of(l); }, "this compile");
      },
      [&](const std::vector<ManifestEntry>& m) {
        return builders::rehash_manifest(m, [&](const std::string& l) { return paths.path_of(l); });
      }};

  // ---- A hit: here, else on a tier, while another process or node compiles it (single flight).
  auto claim = std::make_unique<builders::Claim>();
  builders::CacheOutcome source = builders::CacheOutcome::kCompiled;
  auto found = (*ops)->find_or_claim_through_manifest(input, headers, k_kind, *claim, &source);
  KILN_LOG_AT(kDebug, "cc", lookup_what(cmd) + ": looked up in " + since());
  if (!found.ok()) warn("the cache could not be read (" + found.status().message() + "): compiling");
  if (found.ok() && found->has_value()) {
    Status served = serve_hit(**found, cmd, paths);
    if (served.ok()) {
      KILN_LOG_AT(kInfo, "cc", lookup_what(cmd) + ": " + builders::cache_outcome_name(source) + " hit");
      return 0;
    }
    warn("a stored compile of " + cmd.source + " could not be used (" + served.message() + "): compiling");
  }

  // ---- A miss: the real compiler, with a depfile of every header it reads.
  std::string dep_out = (cmd.depfile.empty() ? cmd.output : cmd.depfile) + ".kiln-" + std::to_string(::getpid()) + ".d";
  // The clock file times come from (the kernel's coarse one, a tick behind the precise clock):
  // a save after this instant has a time at or after it.
  struct timespec coarse{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &coarse);
  int64_t start_ns = int64_t{coarse.tv_sec} * 1000000000 + coarse.tv_nsec;
  auto run = run_compiler(compiler, cmd.compile_args(dep_out));
  KILN_LOG_AT(kDebug, "cc", lookup_what(cmd) + ": the compiler ran, " + since());
  if (!run.ok()) {
    ::unlink(dep_out.c_str());
    std::cerr << "kiln cc: error: " << run.status().message() << "\n";
    return 127;
  }
  replay(run->out, run->err);
  auto dep_text = read_regular_file(dep_out, k_max_output_bytes);
  if (!cmd.depfile.empty() && dep_text.ok()) {
    if (::rename(dep_out.c_str(), cmd.depfile.c_str()) != 0) warn("cannot write the depfile " + cmd.depfile + ": " + std::strerror(errno));
  } else {
    ::unlink(dep_out.c_str());
  }
  if (run->exit_code != 0) return run->exit_code;  // a failed compile is not kept: the next run says it again
  if (!dep_text.ok()) {
    warn("the compiler wrote no depfile (" + dep_text.status().message() + "): not cached");
    return 0;
  }
  auto rules = parse_depfile(*dep_text);
  auto manifest = rules.ok() ? manifest_of(*rules, cmd, paths) : Result<std::vector<ManifestEntry>>(rules.status());
  auto object = read_regular_file(cmd.output, k_max_output_bytes);
  if (!manifest.ok() || !object.ok()) {
    warn("not cached: " + (manifest.ok() ? object.status().message() : manifest.status().message()));
    return 0;
  }
  // Kept only when what was hashed is what the compiler read, and what it printed can be replayed.
  auto source_after = memo_file_hash(paths.path_of(paths.label(cmd.source)));
  std::string unkept;
  if (!source_after.ok() || !(source_after.value() == source_hash.value()) || !settled_before(*manifest, paths, start_ns))
    unkept = "a file it read changed while it compiled";
  else if (run->out.size() > k_max_kept_output || run->err.size() > k_max_kept_output)
    unkept = "it printed more than " + std::to_string(k_max_kept_output >> 20) + " MiB";
  for (auto& r : *rules)
    for (auto* names : {&r.targets, &r.prerequisites})
      for (auto& n : *names)
        if (unkept.empty() && !safe_depfile_name(n)) unkept = "its depfile names a file with a ';' or a control character";
  if (!unkept.empty()) {
    KILN_LOG_AT(kInfo, "cc", lookup_what(cmd) + ": compiled, not kept: " + unkept);
    count_not_cached(**ops, "compiled, not kept: " + unkept);
    return 0;
  }
  std::string labeled = label_depfile(*rules, paths);
  cache::FileViews files = {{"output", *object}, {"depfile", labeled}, {"stdout", run->out}, {"stderr", run->err}};
  cache::ArtifactRecord record;
  record.op = cmd.source.substr(cmd.source.rfind('/') + 1);
  record.target = std::string(family_name(cmd.family)) + ":" + cmd.mode;
  record.kind = k_kind;
  record.toolchain = compiler;
  record.log = run->err.substr(0, 4096);
  record.compile_ms = run->wall_ms;
  record.compile_cpu_ms = run->cpu_ms;
  if (Status kept = (*ops)->store_through_manifest(record, input, *manifest, cache::encode_file_group(files), std::move(claim)); !kept.ok())
    warn("the compile of " + cmd.source + " could not be kept: " + kept.message());
  KILN_LOG_AT(kDebug, "cc", lookup_what(cmd) + ": kept, " + since() + " (" + std::to_string(manifest->size()) + " headers)");
  return 0;
}

}  // namespace kiln::launcher
