#include "cache/counter_page.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

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

CounterPage::~CounterPage() {
  if (m_data) ::munmap(m_data, k_page_size);
  if (m_fd >= 0) ::close(m_fd);  // the lock goes with the last descriptor
}

size_t CounterPage::reserve(std::string_view name) {
  if (name.empty() || name.size() > k_counter_name_max) return 0;
  std::lock_guard lock(m_mutex);
  if (auto it = m_slots.find(std::string(name)); it != m_slots.end()) return it->second;
  size_t slot = m_slots.size() + 1;
  if (slot >= k_counter_page_slots) return 0;
  char* s = m_data + slot * k_slot_size;
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
