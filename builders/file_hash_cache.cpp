#include "builders/file_hash_cache.h"

#include <sys/stat.h>

#include <ctime>
#include <mutex>
#include <unordered_map>

#include "support/file_util.h"

namespace kiln::builders {
namespace {

struct Identity {
  dev_t dev;
  ino_t ino;
  off_t size;
  int64_t mtime_ns, ctime_ns;
  bool operator==(const Identity&) const = default;
};

struct Entry {
  Identity id;
  Hash128 hash;
};

constexpr int64_t k_settled_ns = 2'000'000'000;

Identity identity_of(const struct stat& st) {
  return {st.st_dev, st.st_ino, st.st_size, int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec,
          int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec};
}

std::mutex g_mutex;
std::unordered_map<std::string, Entry> g_entries;

}  // namespace

Result<Hash128> hash_file_cached(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return not_found("cannot stat " + path);
  Identity id = identity_of(st);
  {
    std::lock_guard lock(g_mutex);
    auto it = g_entries.find(path);
    if (it != g_entries.end() && it->second.id == id) return it->second.hash;
  }
  auto text = read_file(path);
  if (!text.ok()) return text.status();
  Hash128 hash = xxh3_128(text.value());
  struct timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  int64_t now_ns = int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  // Re-stat: the file must not have changed while it was read, and must have settled.
  struct stat after{};
  if (::stat(path.c_str(), &after) == 0 && identity_of(after) == id && now_ns - id.mtime_ns > k_settled_ns &&
      now_ns - id.ctime_ns > k_settled_ns) {
    std::lock_guard lock(g_mutex);
    g_entries[path] = {id, hash};
  }
  return hash;
}

}  // namespace kiln::builders
