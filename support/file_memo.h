// Values derived from files that are costly to derive again: a header's content hash, a
// library's ELF build id, the digest of a whole folder (the CUDA toolkit's headers). Each is
// remembered with a stamp of what it came from (device, inode, size, mtime and ctime of the
// file, or of every file in the folder) and trusted while the stamp holds, in this process
// and, through a memo file in the cache folder, in later ones: a fresh process that hits the
// cache then reads no toolchain library and no header (ccache's direct mode does the same).
//
// A value is remembered only when every file it came from has settled (its mtime and ctime at
// least two seconds in the past), so a write in the same timestamp tick as the read cannot go
// unseen. ctime, which no user can set, guards against a restored mtime.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/hash.h"
#include "support/status.h"

namespace kiln {

// What must hold for a value derived from a file to stay true.
struct FileStamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool regular = true;  // a regular file (not a device, a FIFO or a folder)
  bool operator==(const FileStamp&) const = default;
  Hash128 digest() const;
  // Both times at least two seconds before now.
  bool settled() const;
};

// stat(2) of `path` (following symlinks); kNotFound when it does not exist.
Result<FileStamp> file_stamp(const std::string& path);

class FileMemo {
 public:
  // The process's memo. Until attach() it remembers for this process only.
  static FileMemo& instance();

  // Loads `file` (a missing or damaged one is an empty memo) and saves there from now on. The
  // first attach wins; later calls, for another cache folder in the same process, are ignored.
  // A file that exists but cannot be read is an empty memo too, and the reason is returned for
  // the caller to say once: the memo is optional, it only saves work.
  Status attach(const std::string& file);

  // The value remembered for (kind, path) under `stamp`, if the stamp still matches.
  std::optional<std::string> get(std::string_view kind, const std::string& path, const Hash128& stamp);
  // get() of a value that is a Hash128's hex, parsed in place (no copy, no allocation).
  std::optional<Hash128> get_hash(std::string_view kind, std::string_view path, const Hash128& stamp);
  // Remembers a value; values and paths holding a tab or a newline are not remembered.
  void put(std::string_view kind, const std::string& path, const Hash128& stamp, const std::string& value);

  // Writes the memo file when something new was remembered since the last save, merged with
  // what other processes saved meanwhile. Writes nothing otherwise.
  Status save();

  // For tests: forget everything, detach from the file.
  void reset_for_testing();

 private:
  FileMemo() = default;
  struct Impl;
  Impl& impl();
};

// The content hash of a file through the memo: a stat when it is remembered, else a read. Only
// a regular file of at most k_max_hashed_file bytes is read: a header path from a manifest that
// names /dev/zero or a FIFO (a hostile bundle or tier) is an error, not an endless read.
inline constexpr uint64_t k_max_hashed_file = uint64_t{256} << 20;
Result<Hash128> memo_file_hash(const std::string& path);

// memo_file_hash of each of `paths`, in order: each stat'ed relative to its folder (opened once
// for all the files in it), the stats split across the cores, each looked up in the memo without
// copying. The 4,841 headers torch/extension.h reads cost ~2 us of system time each here (a VM),
// three quarters of a warm torch-extension hit (perf, this machine).
Result<std::vector<Hash128>> memo_files_hash(const std::vector<std::string>& paths);

// XXH3-128 over every regular file under `root` (its path relative to `root`, then its
// bytes), in name order, through the memo: remembered while every file's stamp holds, so a
// later process pays one stat per file (~1 us each) instead of reading them all.
Result<Hash128> memo_folder_digest(const std::string& root);

}  // namespace kiln
