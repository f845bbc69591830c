// A group of named files kept as one artifact (another compiler's output for one kernel:
// Triton's IR stages, cubin and metadata), and that group handed out as real files.
//
// The artifact's bytes: "kiln-files 1\n", the file count, then each file's name and content as
// length-prefixed fields (support/length_prefixed.h). Names are plain file names: not empty, at
// most 255 bytes, no '/' or NUL, not "." or "..", each once; at most 65,536 files. A reader
// bounds the count by the bytes there are before it sizes anything (file_group.cpp).
//
// Materialized, the files live in <cache>/files/<xx>/<key hex>/, a folder put in place whole:
// written under a temporary name and renamed. A folder that is there already is compared with
// the artifact (which its reader has just checked) file by file, and replaced the same way when
// anything differs, so a damaged or half-deleted copy is never handed out. A folder found equal
// gets a stamp of what stat() said of its files and of the blob; while each stats the same, a
// hit hands the folder out without reading the blob or the files (placed_file_group; why a
// changed file cannot keep its stamp: file_group.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/hash.h"
#include "support/status.h"

namespace kiln::cache {

using NamedFiles = std::vector<std::pair<std::string, std::string>>;  // (name, content)
// The same as views into an artifact's bytes (a mapped blob: a hit copies nothing).
using FileViews = std::vector<std::pair<std::string_view, std::string_view>>;

// Ok, or kInvalidArgument saying which name is not a plain file name (or appears twice), or that
// there are more files than a group may hold.
Status check_file_names(const FileViews& files);
FileViews views_of(const NamedFiles& files);
std::string encode_file_group(const FileViews& files);
// The files as views into `bytes`, or kDataLoss saying what is wrong.
Result<FileViews> decode_file_group(std::string_view bytes);

// What stat() says of a file, as a stamp keeps it (cache/file_group.cpp); nullopt when it is
// not a regular file.
struct FileIdentity {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};
std::optional<FileIdentity> file_identity(const std::string& path);

// The group's files as real files: (folder, [(name, path)]).
struct MaterializedFiles {
  std::string folder;
  std::vector<std::pair<std::string, std::string>> paths;
};
// What making the group cost (wall and CPU microseconds), kept in the stamp for the hits that do
// not read the blob to count what they saved.
struct CompileCost {
  int64_t wall_us = 0, cpu_us = 0;
};
// `files` were just read from the checked blob at `blob_path`, which took `cost` to make.
// `blob_read`: the blob's identity taken before it was read; a folder found equal is stamped only
// when the blob still stats so (nullopt: never, e.g. for files that did not come from the blob).
Result<MaterializedFiles> materialize_file_group(const std::string& cache_root, const Hash128& key, const FileViews& files,
                                                 const std::string& blob_path, const std::optional<FileIdentity>& blob_read,
                                                 CompileCost cost);

// The group's folder, when its stamp says its files and the blob at `blob_path` are as they
// were when last found equal; nullopt otherwise (then read the blob and materialize).
struct PlacedFiles {
  MaterializedFiles files;
  CompileCost cost;
};
std::optional<PlacedFiles> placed_file_group(const std::string& cache_root, const Hash128& key, const std::string& blob_path);

// What the group in `bytes` takes once handed out (its files' bytes and, at most, its stamp's), for
// the size cap; nullopt when `bytes` is not a group of files.
std::optional<uint64_t> placed_size_of(std::string_view bytes);

// Removes the folder that hands out the group of `key`, if any (its artifact is gone). A reader
// holding its files keeps them: the folder is renamed away before it is removed.
void remove_placed_files(const std::string& cache_root, const Hash128& key);

// For `kiln cache verify`: false when the group's folder is handed out on its stamp and differs
// from `files` (then it is removed, so the next hit puts the files back); true otherwise (a
// folder with no valid stamp is compared on its next hit anyway).
bool placed_files_match(const std::string& cache_root, const Hash128& key, const FileViews& files, const std::string& blob_path);

}  // namespace kiln::cache
