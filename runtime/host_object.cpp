#include "runtime/host_object.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace kiln::runtime {

Result<std::unique_ptr<HostObject>> HostObject::load(std::string_view bytes, const std::string& label) {
  // A memfd gives dlopen a real file without touching the disk (TOOLCHAIN-FACTS.md:
  // dlopen from /proc/self/fd/N costs ~25 us, the same as from a file).
  std::string name = "kiln:" + label;
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return errno_status("memfd_create for " + label, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return errno_status("write memfd for " + label, err);
    }
    done += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    ::close(fd);
    const char* err = ::dlerror();
    return invalid_argument("cannot load " + label + ": " + (err ? err : "dlopen failed"));
  }
  std::unique_ptr<HostObject> out(new HostObject);
  out->m_handle = handle;
  // The fd stays open while the object is loaded: glibc finds already-loaded objects by
  // name, and a reused /proc/self/fd/N would hand back this object for another artifact.
  out->m_fd = fd;
  return out;
}

HostObject::~HostObject() {
  if (m_handle) ::dlclose(m_handle);
  if (m_fd >= 0) ::close(m_fd);
}

void* HostObject::symbol(const std::string& name) const { return ::dlsym(m_handle, name.c_str()); }

}  // namespace kiln::runtime
