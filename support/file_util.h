// Small, careful file helpers shared by the cache, the spec parser and the CLI.
#pragma once

#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

// Whole file into memory; a missing file is kNotFound, other failures kIoError.
Result<std::string> read_file(const std::string& path);
// Why read_file(path) failed, without the path ("Permission denied"), for a message that
// names the file once in its own words.
std::string read_failure_reason(const Status& st, const std::string& path);

// Writes all of `bytes` to `fd` (retrying short writes and EINTR); `path` names it in errors.
Status write_all(int fd, std::string_view bytes, const std::string& path);

// Writes `bytes` to a temporary file in the same folder, fsyncs it (unless not `durable`:
// for files that are cheap to lose) and renames it over `path`: a reader sees the old file or
// the whole new one, never a part (STYLE.md #13).
Status write_file_atomic(const std::string& path, std::string_view bytes, bool durable = true);

// mkdir -p with `mode` for the folders it creates.
Status make_dirs(const std::string& path, unsigned mode = 0700);

// Lexically normalised absolute path ("a/./b/../c/" -> "/cwd/a/c"); no symlinks resolved, no
// trailing slash.
std::string absolute_path(const std::string& path);

// True when `path` (absolute, normalised) is `root` or lies under it.
bool path_is_within(std::string_view path, std::string_view root);

// `path` relative to `root`, when it lies within it.
std::string relative_to(std::string_view path, std::string_view root);

std::string dirname_of(const std::string& path);

}  // namespace kiln
