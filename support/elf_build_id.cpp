#include "support/elf_build_id.h"

#include <elf.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "support/file_memo.h"
#include "support/hash.h"

namespace kiln {
namespace {

bool read_at(int fd, void* out, size_t size, off_t offset) {
  return ::pread(fd, out, size, offset) == static_cast<ssize_t>(size);
}

}  // namespace

Result<std::string> elf_build_id(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status("open " + path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  Elf64_Ehdr eh{};
  if (!read_at(fd, &eh, sizeof eh, 0) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return invalid_argument(path + " is not a 64-bit ELF file");
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (!read_at(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph))) break;
    if (ph.p_type != PT_NOTE || ph.p_filesz > (1u << 20)) continue;
    std::string notes(ph.p_filesz, '\0');
    if (!read_at(fd, notes.data(), notes.size(), static_cast<off_t>(ph.p_offset))) continue;
    size_t pos = 0;
    while (pos + sizeof(Elf64_Nhdr) <= notes.size()) {
      Elf64_Nhdr nh;
      std::memcpy(&nh, notes.data() + pos, sizeof nh);
      size_t name_at = pos + sizeof nh;
      size_t desc_at = name_at + ((nh.n_namesz + 3) & ~3u);
      size_t next = desc_at + ((nh.n_descsz + 3) & ~3u);
      if (next > notes.size()) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(notes.data() + name_at, "GNU", 4) == 0)
        return to_hex(notes.data() + desc_at, nh.n_descsz);
      pos = next;
    }
  }
  return not_found(path + " has no GNU build id");
}

Result<std::string> memo_elf_build_id(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(FileStamp before, file_stamp(path));
  Hash128 stamp = before.digest();
  FileMemo& memo = FileMemo::instance();
  if (auto v = memo.get("build-id", path, stamp)) return *v;
  KILN_ASSIGN_OR_RETURN(std::string id, elf_build_id(path));
  if (before.settled()) memo.put("build-id", path, stamp, id);
  return id;
}

}  // namespace kiln
