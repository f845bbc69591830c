#include "support/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace kiln {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path, bool populate) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no such file: " + path);
    return errno_status("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_status("stat " + path, err);
  }
  size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
    if (data == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return errno_status("map " + path, err);
    }
  }
  ::close(fd);
  return std::unique_ptr<MappedFile>(new MappedFile(data, size));
}

MappedFile::~MappedFile() {
  if (m_data) ::munmap(m_data, m_size);
}

}  // namespace kiln
