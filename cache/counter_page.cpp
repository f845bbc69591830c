#include "cache/counter_page.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "support/file_util.h"

namespace kiln::cache {
namespace {

constexpr size_t k_slot_size = 64;
constexpr size_t k_page_size = k_counter_page_slots * k_slot_size;
constexpr char k_magic[8] = {'K', 'I', 'L', 'N', 'C', 'N', 'T', '1'};
constexpr size_t k_ready_offset = k_counter_name_max;  // after the name's bytes
constexpr size_t k_value_offset = 56;
constexpr size_t k_folded_offset = 12;  // in the header, after the magic and the slot count

int64_t* value_of(char* slot) { return reinterpret_cast<int64_t*>(slot + k_value_offset); }

}  // namespace

Result<std::unique_ptr<CounterPage>> CounterPage::create(const std::string& folder) {
  KILN_RETURN_IF_ERROR(make_dirs(folder, 0700));
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) nonce = static_cast<uint64_t>(::time(nullptr));
  char name[64];
  std::snprintf(name, sizeof name, "%d.%016llx.page", static_cast<int>(::getpid()), static_cast<unsigned long long>(nonce));
  std::unique_ptr<CounterPage> page(new CounterPage);
  page->m_name = name;
  page->m_path = folder + "/" + name;
  // Made whole (locked, sized, its header written) under a temporary name, then renamed: a fold
  // only ever sees a page that is locked by its process or abandoned.
  std::string tmp = page->m_path + ".tmp";
  page->m_fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (page->m_fd < 0) return errno_status("cannot create the counter page " + tmp, errno);
  // Its blocks allocated now, not sparse: a store to a mapped page the disk has no room for is a
  // SIGBUS, where a failed allocation here is an error the Store goes on without.
  void* data = MAP_FAILED;
  int err = ::flock(page->m_fd, LOCK_EX | LOCK_NB) == 0 ? ::posix_fallocate(page->m_fd, 0, k_page_size) : errno;
  if (err == 0) data = ::mmap(nullptr, k_page_size, PROT_READ | PROT_WRITE, MAP_SHARED, page->m_fd, 0);
  if (data == MAP_FAILED) {
    Status st = errno_status("cannot set up the counter page " + tmp, err ? err : errno);
    ::unlink(tmp.c_str());
    return st;
  }
  page->m_data = static_cast<char*>(data);
  std::memcpy(page->m_data, k_magic, sizeof k_magic);
  uint32_t slots = k_counter_page_slots;
  std::memcpy(page->m_data + 8, &slots, sizeof slots);
  if (::rename(tmp.c_str(), page->m_path.c_str()) != 0) {
    Status st = errno_status("cannot create the counter page " + page->m_path, errno);
    ::unlink(tmp.c_str());
    return st;
  }
  return page;
}

Result<std::unique_ptr<CounterPage>> CounterPage::open(const std::string& folder) {
  if (DIR* d = ::opendir(folder.c_str())) {
    std::unique_ptr<CounterPage> page;
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.' || !is_counter_page_name(e->d_name)) continue;
      if ((page = adopt(folder, e->d_name))) break;
    }
    ::closedir(d);
    if (page) return page;
  }
  return create(folder);
}

std::unique_ptr<CounterPage> CounterPage::adopt(const std::string& folder, const std::string& name) {
  std::string path = folder + "/" + name;
  // O_NONBLOCK | O_NOCTTY: a fifo or a device under a page's name neither blocks nor acts.
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return nullptr;
  struct stat st{};
  void* data = MAP_FAILED;
  // Its lock first, then what it is: a fold that held the lock has unlinked the page by the time
  // it lets go (no links left); a page is this user's own, has one name (a second would fold it
  // twice), is of the size pages are and has its blocks (a store to a sparse page on a full disk
  // is a SIGBUS).
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
      st.st_uid == ::geteuid() && static_cast<size_t>(st.st_size) == k_page_size &&
      static_cast<uint64_t>(st.st_blocks) * 512 >= k_page_size)
    data = ::mmap(nullptr, k_page_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<CounterPage> page(new CounterPage);
  page->m_fd = fd;
  page->m_data = static_cast<char*>(data);
  page->m_path = path;
  page->m_name = name;
  // Not a page (left for the fold to refuse), or one a fold has counted (its removal to come).
  if (std::memcmp(page->m_data, k_magic, sizeof k_magic) != 0 || page->m_data[k_folded_offset] != 0) return nullptr;
  // Its slots as its earlier processes took them (in order): a named one is used again, and the
  // first slot with no name byte is the next free one. A slot whose name was cut short by a kill
  // (not marked whole) is skipped: nothing was added to it.
  for (size_t slot = 1; slot < k_counter_page_slots; ++slot) {
    const char* s = page->m_data + slot * k_slot_size;
    if (s[k_ready_offset] == 0 && std::all_of(s, s + k_counter_name_max, [](char c) { return c == 0; })) break;
    page->m_next_slot = slot + 1;
    if (s[k_ready_offset] == 1) page->m_slots.emplace(std::string(s, ::strnlen(s, k_counter_name_max)), slot);
  }
  return page;
}

CounterPage::~CounterPage() {
  if (m_data) ::munmap(m_data, k_page_size);
  if (m_fd >= 0) ::close(m_fd);  // the lock goes with the last descriptor
}

size_t CounterPage::reserve(std::string_view name) {
  if (name.empty() || name.size() > k_counter_name_max) return 0;
  std::lock_guard lock(m_mutex);
  if (auto it = m_slots.find(std::string(name)); it != m_slots.end()) return it->second;
  size_t slot = m_next_slot;
  if (slot >= k_counter_page_slots) return 0;
  ++m_next_slot;
  char* s = m_data + slot * k_slot_size;
  std::memset(s, 0, k_counter_name_max);  // whatever a killed writer left there
  std::memcpy(s, name.data(), name.size());
  // The name, then the mark that it is whole: a reader of a page whose writer was killed
  // between the two sees no counter there (and none was added to it yet).
  __atomic_store_n(s + k_ready_offset, char{1}, __ATOMIC_RELEASE);
  m_slots.emplace(std::string(name), slot);
  return slot;
}

void CounterPage::add(size_t slot, int64_t delta) {
  if (slot == 0 || slot >= k_counter_page_slots) return;
  __atomic_fetch_add(value_of(m_data + slot * k_slot_size), delta, __ATOMIC_RELAXED);
}

bool CounterPage::add(std::string_view name, int64_t delta) {
  size_t slot = reserve(name);
  if (!slot) return false;
  add(slot, delta);
  return true;
}

Result<std::vector<std::pair<std::string, int64_t>>> read_counter_page(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string page, read_file(path));
  if (page.size() != k_page_size || std::memcmp(page.data(), k_magic, sizeof k_magic) != 0)
    return Status(StatusCode::kDataLoss, path + " is not a counter page (" + std::to_string(page.size()) + " bytes)");
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t slot = 1; slot < k_counter_page_slots; ++slot) {
    const char* s = page.data() + slot * k_slot_size;
    if (s[k_ready_offset] != 1) continue;
    int64_t value = 0;
    std::memcpy(&value, s + k_value_offset, sizeof value);
    out.emplace_back(std::string(s, ::strnlen(s, k_counter_name_max)), value);
  }
  return out;
}

bool is_counter_page_name(std::string_view name) { return name.size() > 5 && name.substr(name.size() - 5) == ".page"; }

bool mark_counter_page_folded(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return false;
  char mark = 1;
  bool ok = ::pwrite(fd, &mark, 1, k_folded_offset) == 1;
  ::close(fd);
  return ok;
}

AbandonedPage AbandonedPage::take(const std::string& path) {
  AbandonedPage out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) out.m_fd = fd;
  else ::close(fd);
  return out;
}

AbandonedPage::~AbandonedPage() {
  if (m_fd >= 0) ::close(m_fd);
}

}  // namespace kiln::cache
