// A group of named files kept as one artifact (another compiler's output for one kernel:
// Triton's IR stages, cubin and metadata), and that group handed out as real files.
//
// The artifact's bytes: "kiln-files 1\n", the file count, then each file's name and content as
// length-prefixed fields (support/length_prefixed.h). Names are plain file names: not empty, at
// most 255 bytes, no '/' or NUL, not "." or "..", each once.
//
// Materialized, the files live in <cache>/files/<xx>/<key hex>/, a folder put in place whole:
// written under a temporary name and renamed. A folder that is there already is compared with
// the artifact (which its reader has just checked) file by file, and replaced the same way when
// anything differs, so a damaged or half-deleted copy is never handed out.
#pragma once

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

// Ok, or kInvalidArgument saying which name is not a plain file name (or appears twice).
Status check_file_names(const FileViews& files);
FileViews views_of(const NamedFiles& files);
std::string encode_file_group(const FileViews& files);
// The files as views into `bytes`, or kDataLoss saying what is wrong.
Result<FileViews> decode_file_group(std::string_view bytes);

// The group's files as real files: (folder, [(name, path)]).
struct MaterializedFiles {
  std::string folder;
  std::vector<std::pair<std::string, std::string>> paths;
};
Result<MaterializedFiles> materialize_file_group(const std::string& cache_root, const Hash128& key, const FileViews& files);

}  // namespace kiln::cache
