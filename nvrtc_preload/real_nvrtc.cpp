#include "nvrtc_preload/real_nvrtc.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "support/elf_build_id.h"

namespace kiln::nvrtc_preload {
namespace {

thread_local ProbeLog* t_probes = nullptr;

void record(const char* path) {
  if (!t_probes || !path || !*path) return;
  std::string_view p(path);
  for (std::string_view skip : {"/proc/", "/sys/", "/dev/"})
    if (p.substr(0, skip.size()) == skip) return;
  if (t_probes->seen.insert(std::string(p)).second) t_probes->paths.emplace_back(p);
}

// What the real library's GOT entries point at instead of libc's. Each calls libc's own entry
// (never the slot's old value: with lazy binding that is the PLT's resolver, which would write
// libc's address over ours on its first call).
int probe_open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  record(path);
  return ::open(path, flags, mode);
}
FILE* probe_fopen(const char* path, const char* mode) {
  record(path);
  return ::fopen(path, mode);
}
#if defined(__x86_64__)
// glibc before 2.33 had stat() call __xstat(_STAT_VER, ...); on x86-64 every _STAT_VER it takes
// fills the one struct stat, so stat() serves it.
int probe_xstat(int, const char* path, struct stat* buf) {
  record(path);
  return ::stat(path, buf);
}
#endif
int probe_access(const char* path, int how) {
  record(path);
  return ::access(path, how);
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
#endif
    {"access", reinterpret_cast<void*>(&probe_access)},
};

// Points the library's GOT entries for the names above at the recorders; true when every import
// of `open` or `fopen` it has was found (the probes a header search makes are then seen).
bool point_imports_at_recorders(void* handle) {
#if defined(__x86_64__)
  struct link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return false;
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
  if (!symtab || !strtab) return false;
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
  for (int t = 0; t < 2; ++t) {
    if (!tables[t]) continue;
    for (size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      auto type = ELF64_R_TYPE(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      const char* name = strtab + symtab[ELF64_R_SYM(r.r_info)].st_name;
      for (const Replacement& rep : k_replacements) {
        if (std::strcmp(name, rep.name) != 0) continue;
        auto* slot = reinterpret_cast<void**>(base + r.r_offset);
        auto first = reinterpret_cast<uintptr_t>(slot) & ~static_cast<uintptr_t>(page - 1);
        auto at = reinterpret_cast<ElfW(Addr)>(slot);
        bool in_relro = at >= relro.begin && at < relro.end;
        if (in_relro && ::mprotect(reinterpret_cast<void*>(first), page, PROT_READ | PROT_WRITE) != 0) return false;
        *slot = rep.function;
        if (in_relro) ::mprotect(reinterpret_cast<void*>(first), page, PROT_READ);
        if (std::strncmp(name, "open", 4) == 0 || std::strncmp(name, "fopen", 5) == 0) saw_open = true;
      }
    }
  }
  return saw_open;
#else
  (void)handle;
  return false;
#endif
}

bool same_file(const std::string& a, const struct stat& b) {
  struct stat st{};
  return ::stat(a.c_str(), &st) == 0 && st.st_dev == b.st_dev && st.st_ino == b.st_ino;
}

std::vector<std::string> candidates() {
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
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* home = std::getenv(var); home && *home) out.push_back(std::string(home) + "/lib64/libnvrtc.so.13");
  out.push_back("/usr/local/cuda/lib64/libnvrtc.so.13");
  return out;
}

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
  for (auto& c : explicit_path && *explicit_path ? std::vector<std::string>{explicit_path} : candidates()) {
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
  real->nvvm_handle = ::dlsym(handle, "__nvrtcNvvmHandle");
  if (!real->nvrtcCreateProgram || !real->nvrtcCompileProgram || !real->nvrtcVersion || !real->nvrtcDestroyProgram) {
    g_error = path + " lacks NVRTC's entry points";
    delete real;
    return;
  }
  int major = 0, minor = 0;
  real->nvrtcVersion(&major, &minor);
  auto build_id = elf_build_id(path);
  real->identity = (build_id.ok() ? *build_id : "no-build-id") + " " + std::to_string(major) + "." + std::to_string(minor);
  real->probes_recorded = point_imports_at_recorders(handle);
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
