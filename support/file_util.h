// Small, careful file helpers shared by the cache, the spec parser and the CLI.
#pragma once

#include <sys/stat.h>

#include <functional>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln {

// Whole file into memory; a missing file is kNotFound, other failures kIoError.
Result<std::string> read_file(const std::string& path);
// read_file of a regular file of at most max_bytes: what the descriptor shows (fstat) is checked
// before a byte is read, so a path swapped after an earlier check cannot slip a FIFO, a device
// or a huge file in (kInvalidArgument), and a file that grows meanwhile is refused too.
Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes);
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

// ---- beneath a folder, following no link: for a folder whose content others may have planted
// (the cache's store). `relative` is a path of plain names ("blobs/ab/<key>.blob": no "..", no
// leading '/'); `shown` names the file in messages. A symbolic link met anywhere on the way is
// kPermissionDenied (it is never followed), a missing file kNotFound, other failures kIoError.

// One openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH) call, as cheap as open(); where the kernel
// lacks it (before Linux 5.6, or a seccomp filter that refuses it), one openat(O_NOFOLLOW) per
// component. Returns the descriptor (O_CLOEXEC added).
Result<int> open_beneath(int dir_fd, std::string_view relative, int flags, const std::string& shown, unsigned mode = 0);
// read_file through open_beneath. `refuse` (when given) looks at the file's status, taken from
// the descriptor before a byte is read (so the file checked is the file read, and a FIFO or a
// huge file someone planted is refused unread: the open does not wait for a FIFO's writer);
// what it answers, when not "", is kPermissionDenied "SHOWN: <answer>".
Result<std::string> read_file_beneath(int dir_fd, std::string_view relative, const std::string& shown,
                                      const std::function<std::string(const struct stat&)>& refuse = {});
// Creates the folders of `relative` beneath `dir_fd` (with `mode`) and opens the last. A link or
// a file found where one of them belongs is removed (never what a link points to) and the folder
// made in its place: the descriptor is always of a real folder of this tree.
Result<int> make_dirs_beneath(int dir_fd, std::string_view relative, unsigned mode, const std::string& shown);
// Removes the file `relative` beneath `dir_fd`. When a folder on the way is a link, that link is
// removed instead; what a link points to is never touched. A missing file is no error.
void remove_beneath(int dir_fd, std::string_view relative);
// write_file_atomic for the file `name` in the folder open as `dir_fd`: the temporary is created
// there exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, 0600) and renamed over `name` within it.
Status write_file_atomic_at(int dir_fd, const std::string& name, std::string_view bytes, bool durable,
                            const std::string& shown);

// Lexically normalised absolute path ("a/./b/../c/" -> "/cwd/a/c"); no symlinks resolved, no
// trailing slash.
std::string absolute_path(const std::string& path);

// True when `path` (absolute, normalised) is `root` or lies under it.
bool path_is_within(std::string_view path, std::string_view root);

// `path` relative to `root`, when it lies within it.
std::string relative_to(std::string_view path, std::string_view root);

std::string dirname_of(const std::string& path);

}  // namespace kiln
