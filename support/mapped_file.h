// A whole file mapped read-only, for large files read whole and soon (a precompiled header in
// the store, a bundle): the page cache's pages are used where they are, with no copy into
// memory of the process's own.
//
// A mapping shows the file as it is now: it must not be truncated while mapped (a read past its
// new end is SIGBUS). kiln never changes its files in place (they are written elsewhere and
// renamed, and removed by unlink, which leaves a mapping whole), so files it wrote are safe.
//
// Thread-safety: immutable once opened; unmapped when destroyed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

class MappedFile {
 public:
  // kNotFound when there is no such file, kIoError for other failures. `populate` maps every
  // page at once (one call instead of a fault per 16 pages) for a file that is read whole.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path, bool populate = false);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view view() const { return {static_cast<const char*>(m_data), m_size}; }

 private:
  MappedFile(void* data, size_t size) : m_data(data), m_size(size) {}
  void* m_data;
  size_t m_size;
};

}  // namespace kiln
