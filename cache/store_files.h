// The store's folder as files (private to cache/): walking the blob files, the names of what
// lives where, and what the store's files other than its artifacts take.
//
//   <root>/blobs/<xx>/<key>.blob    artifacts          <root>/index.sqlite(-wal, -shm)  the index
//   <root>/blobs/.store-id          the folder's id    <root>/index.lock                the store's lock
//   <root>/manifests/<xx>/<k>.manifest                 <root>/usage(.folding.*)         usage journals
//   <root>/files/<xx>/<key>/        a group's copies   <root>/counters/*.page           counter pages
//   <root>/files/staging/           compiles' stages   <root>/locks/<key>.lock          compile locks
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <string>

#include "cache/artifact_record.h"
#include "cache/file_group.h"
#include "support/hash.h"

namespace kiln::cache {

// The first line of a manifest file: its format.
inline constexpr std::string_view k_manifest_header = "kiln-manifest 1\n";
inline constexpr const char* k_usage_journal = "usage";
inline constexpr const char* k_counter_folder = "counters";
inline constexpr const char* k_store_id_file = "blobs/.store-id";
// A temporary or unindexed file younger than this may belong to a store in progress.
inline constexpr int64_t k_grace_seconds = 3600;

// Calls fn(path, name, mtime) for every regular file under <root>/blobs/<shard>/; fn returns false
// to stop. Links are passed over, never followed: a shard folder or a blob that is a link is not
// this store's (publication replaces such a shard with a real folder).
template <class Fn>
void for_each_blob_file(const std::string& root, Fn fn) {
  std::string blobs = root + "/blobs";
  int top_fd = ::open(blobs.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  DIR* top = top_fd >= 0 ? ::fdopendir(top_fd) : nullptr;
  if (!top) {
    if (top_fd >= 0) ::close(top_fd);
    return;
  }
  bool more = true;
  while (more) {
    auto* shard = ::readdir(top);
    if (!shard) break;
    if (shard->d_name[0] == '.') continue;
    std::string dir = blobs + "/" + shard->d_name;
    int fd = ::openat(top_fd, shard->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR* d = fd >= 0 ? ::fdopendir(fd) : nullptr;
    if (!d) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    while (more) {
      auto* e = ::readdir(d);
      if (!e) break;
      if (e->d_name[0] == '.') continue;
      struct stat st{};
      if (::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        more = fn(dir + "/" + e->d_name, std::string(e->d_name), int64_t{st.st_mtime});
    }
    ::closedir(d);
  }
  ::closedir(top);
}

// The key a blob file's name gives ("<32 hex>.blob"), or nullopt for any other name.
inline std::optional<Hash128> key_of_blob_name(const std::string& name) {
  if (name.size() != 37 || name.compare(32, 5, ".blob") != 0) return std::nullopt;
  return Hash128::from_hex(name.substr(0, 32));
}

// What an artifact keeps beside its blob file: its manifest file, and, for a group of files, the
// copies its files are handed out as (counted from when it is stored, placed or not, so that the
// cap holds whatever is placed). `content`: its bytes, when stored as they are (a group always is).
inline uint64_t extra_size_of(const ArtifactRecord& r, std::optional<std::string_view> content) {
  uint64_t extra = has_manifest(r) ? k_manifest_header.size() + r.manifest.size() : 0;
  if (content) extra += placed_size_of(*content).value_or(0);
  return extra;
}

// The apparent size of every file under `path` (a file or a folder), symlinks not followed.
inline uint64_t bytes_under(const std::string& path) {
  std::error_code ec;
  uint64_t total = 0;
  if (std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec))) return std::filesystem::file_size(path, ec);
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec); !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec) && !it->is_symlink(size_ec)) total += it->file_size(size_ec);
  }
  return total;
}

}  // namespace kiln::cache
