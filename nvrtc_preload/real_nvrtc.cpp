#include "nvrtc_preload/real_nvrtc.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <glob.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "nvrtc_preload/program_key.h"
#include "support/cuda_toolkit.h"
#include "support/elf_build_id.h"

namespace kiln::nvrtc_preload {
namespace {

thread_local ProbeLog* t_probes = nullptr;

// Records what a probe found, keeping errno as the call left it for NVRTC.
void record(const char* probe, const std::string& stamp) {
  if (!t_probes || !probe || !*probe) return;
  int saved = errno;
  std::string_view p(probe);
  // libc's localtime_r reads the zone for __DATE__ and __TIME__, which a source that names them
  // is not cached for (uncacheable_text): the zone file is not an input of any other compile.
  if (p != "/etc/localtime" && t_probes->seen.insert(std::string(p)).second) t_probes->probes.emplace_back(p, stamp);
  errno = saved;
}
std::string stamp_after(int rc, const struct stat& st, const char* path, int error) {
  if (rc == 0) return stamp_of(st, path ? path : "");
  return error == ENOENT || error == ENOTDIR ? "absent" : "special";
}
void record_path(const char* path) {  // a probe whose answer says nothing of what is there
  if (t_probes && path) record(path, stamp_now(path));
}

// What the real library's GOT entries point at instead of libc's. Each calls libc's own entry
// (never the slot's old value: with lazy binding that is the PLT's resolver, which would write
// libc's address over ours on its first call).
int probe_open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  int fd = ::open(path, flags, mode);
  if (t_probes) {
    int error = errno;
    struct stat st{};
    int rc = fd >= 0 ? ::fstat(fd, &st) : -1;
    record(path, stamp_after(rc, st, path, error));
  }
  return fd;
}
FILE* probe_fopen(const char* path, const char* mode) {
  FILE* f = ::fopen(path, mode);
  if (t_probes) {
    int error = errno;
    struct stat st{};
    int rc = f ? ::fstat(fileno(f), &st) : -1;
    record(path, stamp_after(rc, st, path, error));
  }
  return f;
}
#if defined(__x86_64__)
// glibc before 2.33 had stat() call __xstat(_STAT_VER, ...); on x86-64 every _STAT_VER it takes
// fills the one struct stat, so stat() and lstat() serve it.
int probe_xstat(int, const char* path, struct stat* buf) {
  int rc = ::stat(path, buf);
  if (t_probes) record(path, stamp_after(rc, *buf, path, errno));
  return rc;
}
int probe_lxstat(int, const char* path, struct stat* buf) {
  int rc = ::lstat(path, buf);
  record_path(path);  // keyed as what a stat finds: a link's target
  return rc;
}
#endif
int probe_access(const char* path, int how) {
  int rc = ::access(path, how);
  record_path(path);
  return rc;
}
char* probe_getenv(const char* name) {
  char* value = ::getenv(name);
  // PWD: read, and not used for what the compile writes (-G writes getcwd's folder).
  if (t_probes && name && std::strcmp(name, "PWD") != 0)
    record(("env:" + std::string(name)).c_str(), value ? "value:" + std::string(value) : "unset");
  return value;
}
char* probe_getcwd(char* buf, size_t size) {
  char* got = ::getcwd(buf, size);
  if (t_probes) record("cwd:", stamp_now("cwd:"));
  return got;
}

struct Replacement {
  const char* name;
  void* function;
};
const Replacement k_replacements[] = {
    {"open", reinterpret_cast<void*>(&probe_open)},
    {"open64", reinterpret_cast<void*>(&probe_open)},
    {"fopen", reinterpret_cast<void*>(&probe_fopen)},
    {"fopen64", reinterpret_cast<void*>(&probe_fopen)},
#if defined(__x86_64__)
    {"__xstat", reinterpret_cast<void*>(&probe_xstat)},
    {"__lxstat", reinterpret_cast<void*>(&probe_lxstat)},
#endif
    {"access", reinterpret_cast<void*>(&probe_access)},
    {"getenv", reinterpret_cast<void*>(&probe_getenv)},
    {"getcwd", reinterpret_cast<void*>(&probe_getcwd)},
};
// Imports that would reach files or the environment unseen: a real NVRTC that has one is not
// cached (NVRTC 13.0 has none). opendir, realpath, readlink and statfs are left: they name a
// path NVRTC then opens or stats through the entries above.
constexpr const char* k_unrecorded[] = {"openat", "openat64", "__open_2", "__open64_2", "stat", "stat64", "lstat",
                                        "lstat64", "__xstat64", "__lxstat64", "statx", "fstatat", "fstatat64",
                                        "__fxstatat", "__fxstatat64", "faccessat", "euidaccess", "eaccess", "freopen",
                                        "freopen64", "secure_getenv", "__secure_getenv", "get_current_dir_name", "getwd"};

// Points the library's GOT entries for the names above at the recorders; empty when that was
// done and the library has no import in k_unrecorded, else why its compiles cannot be keyed.
std::string point_imports_at_recorders(void* handle) {
#if defined(__x86_64__)
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return "its link map could not be read";
  const ElfW(Addr) base = map->l_addr;
  auto absolute = [base](ElfW(Addr) p) { return p < base ? p + base : p; };
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symtab = reinterpret_cast<const ElfW(Sym)*>(absolute(d->d_un.d_ptr)); break;
      case DT_STRTAB: strtab = reinterpret_cast<const char*>(absolute(d->d_un.d_ptr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(absolute(d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(absolute(d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      default: break;
    }
  }
  if (!symtab || !strtab) return "it has no dynamic symbol table";
  const long page = ::sysconf(_SC_PAGESIZE);
  // The RELRO segment: read-only once relocated, so made writable for the write and read-only
  // again. Any other GOT page stays as the loader left it (writable: lazy binding writes there).
  struct Relro {
    ElfW(Addr) base, begin = 0, end = 0;
  } relro{base};
  ::dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* data) {
        auto* r = static_cast<Relro*>(data);
        if (info->dlpi_addr != r->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            r->begin = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
            r->end = r->begin + info->dlpi_phdr[i].p_memsz;
          }
        return 1;
      },
      &relro);
  bool saw_open = false;
  std::string unrecorded;
  for (int t = 0; t < 2; ++t) {
    if (!tables[t]) continue;
    for (size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      auto type = ELF64_R_TYPE(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      const char* name = strtab + symtab[ELF64_R_SYM(r.r_info)].st_name;
      for (const char* other : k_unrecorded)
        if (std::strcmp(name, other) == 0) unrecorded = other;
      for (const Replacement& rep : k_replacements) {
        if (std::strcmp(name, rep.name) != 0) continue;
        auto* slot = reinterpret_cast<void**>(base + r.r_offset);
        auto first = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
        auto at = reinterpret_cast<ElfW(Addr)>(slot);
        bool in_relro = at >= relro.begin && at < relro.end;
        if (in_relro && ::mprotect(reinterpret_cast<void*>(first), page, PROT_READ | PROT_WRITE) != 0)
          return std::string("its GOT could not be written: ") + std::strerror(errno);
        *slot = rep.function;
        if (in_relro) ::mprotect(reinterpret_cast<void*>(first), page, PROT_READ);
        if (std::strncmp(name, "open", 4) == 0 || std::strncmp(name, "fopen", 5) == 0) saw_open = true;
      }
    }
  }
  if (!unrecorded.empty()) return "it imports " + unrecorded + ", which kiln does not record";
  if (!saw_open) return "it imports neither open nor fopen";
  return "";
#else
  (void)handle;
  return "its file probes are recorded on x86-64 only";
#endif
}

bool same_file(const std::string& a, const struct stat& b) {
  struct stat st{};
  return ::stat(a.c_str(), &st) == 0 && st.st_dev == b.st_dev && st.st_ino == b.st_ino;
}

}  // namespace

std::vector<std::string> real_nvrtc_candidates() {
  std::vector<std::string> out;
  if (const char* lp = std::getenv("LD_LIBRARY_PATH")) {
    std::string_view rest(lp);
    while (!rest.empty()) {
      auto colon = rest.find(':');
      std::string dir(rest.substr(0, colon));
      if (!dir.empty()) out.push_back(dir + "/libnvrtc.so.13");
      rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    }
  }
  // Where cuda.pathfinder looks first: the NVIDIA wheels of the active venv or conda prefix.
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    const char* prefix = std::getenv(var);
    if (!prefix || !*prefix) continue;
    glob_t found{};
    std::string pattern = std::string(prefix) + "/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13";
    if (::glob(pattern.c_str(), 0, nullptr, &found) == 0)
      for (size_t i = 0; i < found.gl_pathc; ++i) out.emplace_back(found.gl_pathv[i]);
    ::globfree(&found);
  }
  for (auto& root : cuda_toolkit_roots()) out.push_back(root + "/lib64/libnvrtc.so.13");  // as kiln's own NVRTC loader
  return out;
}

namespace {

RealNvrtc* g_real = nullptr;
std::string g_error;
std::once_flag g_once;

void load() {
  Dl_info self{};
  struct stat own{};
  if (!::dladdr(reinterpret_cast<void*>(&load), &self) || !self.dli_fname || ::stat(self.dli_fname, &own) != 0) {
    g_error = "cannot find libkiln_nvrtc.so's own file";
    return;
  }
  std::vector<std::string> tried;
  void* handle = nullptr;
  std::string path;
  const char* explicit_path = std::getenv("KILN_NVRTC_REAL_LIBRARY");
  for (auto& c : explicit_path && *explicit_path ? std::vector<std::string>{explicit_path} : real_nvrtc_candidates()) {
    if (c.empty() || c[0] != '/' || same_file(c, own) || ::access(c.c_str(), R_OK) != 0) continue;
    tried.push_back(c);
    if ((handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
      path = c;
      break;
    }
  }
  if (!handle) {
    std::string where;
    for (auto& t : tried) where += (where.empty() ? "" : ", ") + t;
    g_error = "no real libnvrtc.so.13 to forward to (" + (where.empty() ? std::string("none found") : "tried " + where) +
              "): set KILN_NVRTC_REAL_LIBRARY to its path";
    return;
  }
  auto* real = new RealNvrtc;
  real->path = path;
#define KILN_NVRTC_ENTRY(name, ret, params, args) real->name = reinterpret_cast<ret(*) params>(::dlsym(handle, #name));
#include "nvrtc_preload/nvrtc_entry_points.def"
#undef KILN_NVRTC_ENTRY
  real->cpex = ::dlsym(handle, "__nvrtcCPEx");
  if (!real->nvrtcCreateProgram || !real->nvrtcCompileProgram || !real->nvrtcVersion || !real->nvrtcDestroyProgram) {
    g_error = path + " lacks NVRTC's entry points";
    delete real;
    return;
  }
  int major = 0, minor = 0;
  real->nvrtcVersion(&major, &minor);
  auto build_id = elf_build_id(path);
  // The built-in headers live in libnvrtc-builtins.so.<major>.<minor>, beside it, loaded on the
  // first compile: its build id too.
  std::string builtins = path.substr(0, path.rfind('/') + 1) + "libnvrtc-builtins.so." + std::to_string(major) + "." + std::to_string(minor);
  auto builtins_id = elf_build_id(builtins);
  real->identity = (build_id.ok() ? *build_id : "no-build-id") + " " + (builtins_id.ok() ? *builtins_id : "no-builtins") + " " +
                   std::to_string(major) + "." + std::to_string(minor);
  real->probes_why = point_imports_at_recorders(handle);
  real->probes_recorded = real->probes_why.empty();
  g_real = real;
}

}  // namespace

const RealNvrtc* real_nvrtc(std::string* error) {
  std::call_once(g_once, load);
  if (!g_real && error) *error = g_error;
  return g_real;
}

RecordProbes::RecordProbes(ProbeLog& log) { t_probes = &log; }
RecordProbes::~RecordProbes() { t_probes = nullptr; }

}  // namespace kiln::nvrtc_preload
