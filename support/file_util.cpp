#include "support/file_util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cerrno>
#include <filesystem>
#include <vector>

namespace kiln {
namespace {

// Names the temporaries of atomic writes (with the pid): distinct across the process's threads.
std::atomic<unsigned> g_temporaries{0};

// Reads all of `fd` and closes it; `st` holds its status (for the size, when it has one). More
// than max_bytes (a file that grew after its status was taken) is an error, never kept.
Result<std::string> read_and_close(int fd, const struct stat& st, const std::string& path, uint64_t max_bytes = UINT64_MAX) {
  std::string out;
  if (st.st_size > 0) out.reserve(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes)));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return errno_status("read " + path, err);
    }
    if (n == 0) break;
    if (static_cast<uint64_t>(n) > max_bytes - out.size()) {
      ::close(fd);
      return invalid_argument(path + " grew past " + std::to_string(max_bytes) + " bytes while it was read");
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// Writes `bytes` to the new temporary `fd`, fsyncs it when `durable`, and closes it.
Status fill_temporary(int fd, std::string_view bytes, bool durable, const std::string& tmp) {
  Status st = write_all(fd, bytes, tmp);
  if (st.ok() && durable && ::fsync(fd) != 0) st = errno_status("fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = errno_status("close " + tmp, errno);
  return st;
}

std::string temporary_suffix() { return ".tmp." + std::to_string(::getpid()) + "." + std::to_string(g_temporaries++); }

// The plain names of a relative path ("a//b/./c" -> a, b, c).
std::vector<std::string> names_of(std::string_view relative) {
  std::vector<std::string> out;
  while (!relative.empty()) {
    size_t slash = relative.find('/');
    std::string_view part = relative.substr(0, slash);
    relative = slash == std::string_view::npos ? std::string_view() : relative.substr(slash + 1);
    if (!part.empty() && part != ".") out.emplace_back(part);
  }
  return out;
}

Status link_refused(const std::string& shown) {
  return permission_denied(shown + ": a symbolic link is on the way to it, and kiln follows none there");
}

Status open_failure(const std::string& shown, int err) {
  if (err == ENOENT) return not_found("no such file: " + shown);
  if (err == ELOOP || err == EXDEV) return link_refused(shown);  // EXDEV: a ".." that left the folder
  return errno_status("open " + shown, err);
}

// Whether `name` in `dir_fd` is a symbolic link (after an open that refused it for ENOTDIR).
bool is_link_at(int dir_fd, const std::string& name) {
  struct stat st{};
  return ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

// open_beneath without openat2: each folder on the way opened with O_NOFOLLOW (a link fails),
// then the file. -1 and errno on failure (ELOOP for a link met).
int open_by_names(int dir_fd, const std::vector<std::string>& names, int flags, unsigned mode) {
  int cur = dir_fd;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    int next = names[i] == ".." ? -1 : ::openat(cur, names[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = names[i] == ".." ? EXDEV : errno;
    if (next < 0 && err == ENOTDIR && is_link_at(cur, names[i])) err = ELOOP;
    if (cur != dir_fd) ::close(cur);
    if (next < 0) {
      errno = err;
      return -1;
    }
    cur = next;
  }
  int fd = names.back() == ".." ? -1 : ::openat(cur, names.back().c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  int err = names.back() == ".." ? EXDEV : errno;
  if (cur != dir_fd) ::close(cur);
  errno = err;
  return fd;
}

// Whether openat2 can be used: -1 not yet known, 0 no (ENOSYS, or refused by a seccomp filter).
std::atomic<int> g_openat2{-1};

}  // namespace

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no such file: " + path);
    return errno_status("open " + path, errno);
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) st.st_size = 0;
  return read_and_close(fd, st, path);
}

Result<int> open_beneath(int dir_fd, std::string_view relative, int flags, const std::string& shown, unsigned mode) {
  std::vector<std::string> names = names_of(relative);
  if (names.empty()) return invalid_argument("open " + shown + ": no file named beneath the folder");
  if (!(flags & O_CREAT)) mode = 0;  // openat2 refuses a mode it would not use
#ifdef SYS_openat2
  if (g_openat2.load(std::memory_order_relaxed) != 0) {
    open_how how{};
    how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
    how.mode = mode;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    std::string path(relative);
    long fd = ::syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != ENOSYS && errno != EPERM) return open_failure(shown, errno);
    g_openat2.store(0, std::memory_order_relaxed);  // the walk below gives the true answer
  }
#endif
  int fd = open_by_names(dir_fd, names, flags, mode);
  if (fd < 0) return open_failure(shown, errno);
  return fd;
}

namespace {

// The rest of a checked read of the open `fd`: its status from the descriptor, `refuse`'s answer
// on it ("" to go on; else an error of `code`, "SHOWN: <answer>", and nothing read), then at most
// max_bytes of it. So the file checked is the file read, whatever its path names meanwhile.
Result<std::string> read_checked(int fd, const std::string& shown, const std::function<std::string(const struct stat&)>& refuse,
                                 StatusCode code, uint64_t max_bytes) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_status("stat " + shown, err);
  }
  if (std::string why = refuse ? refuse(st) : std::string(); !why.empty()) {
    ::close(fd);
    return Status(code, shown + ": " + why);
  }
  return read_and_close(fd, st, shown, max_bytes);
}

}  // namespace

Result<std::string> read_regular_file(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno_status("open " + path, errno);
  return read_checked(fd, path, [max_bytes](const struct stat& st) {
    if (!S_ISREG(st.st_mode)) return std::string("not a regular file");
    if (static_cast<uint64_t>(st.st_size) > max_bytes)
      return std::to_string(st.st_size) + " bytes, more than the " + std::to_string(max_bytes) + " it may have";
    return std::string();
  }, StatusCode::kInvalidArgument, max_bytes);
}

Result<std::string> read_file_beneath(int dir_fd, std::string_view relative, const std::string& shown,
                                      const std::function<std::string(const struct stat&)>& refuse) {
  KILN_ASSIGN_OR_RETURN(int fd, open_beneath(dir_fd, relative, O_RDONLY | O_NONBLOCK, shown));
  return read_checked(fd, shown, refuse, StatusCode::kPermissionDenied, UINT64_MAX);
}

Result<int> make_dirs_beneath(int dir_fd, std::string_view relative, unsigned mode, const std::string& shown) {
  int cur = dir_fd;  // the caller's: never closed here
  auto release = [&] {
    if (cur != dir_fd) ::close(cur);
  };
  for (const std::string& name : names_of(relative)) {
    if (name == "..") {
      release();
      return link_refused(shown);
    }
    int next = -1;
    // A few rounds: another process may make the same folder meanwhile (then it is opened).
    for (int round = 0; round < 4 && next < 0; ++round) {
      next = ::openat(cur, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next >= 0) break;
      int err = errno;
      if (err == ENOENT) {
        if (::mkdirat(cur, name.c_str(), mode) == 0 || errno == EEXIST) continue;
        err = errno;
      } else if (err == ENOTDIR || err == ELOOP) {
        // A link or a file where a folder belongs: it goes (what a link points to stays).
        if (::unlinkat(cur, name.c_str(), 0) == 0 || errno == ENOENT) continue;
        err = errno;
      }
      release();
      return errno_status("make the folder " + shown, err);
    }
    release();
    if (next < 0) return io_error("make the folder " + shown + ": it was replaced again and again meanwhile");
    cur = next;
  }
  if (cur == dir_fd) cur = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (cur < 0) return errno_status("open " + shown, errno);
  return cur;
}

void remove_beneath(int dir_fd, std::string_view relative) {
  std::vector<std::string> names = names_of(relative);
  if (names.empty()) return;
  int cur = dir_fd;
  for (size_t i = 0; i + 1 < names.size(); ++i) {
    int next = ::openat(cur, names[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && names[i] != ".." && is_link_at(cur, names[i])) ::unlinkat(cur, names[i].c_str(), 0);
    if (cur != dir_fd) ::close(cur);
    if (next < 0) return;
    cur = next;
  }
  ::unlinkat(cur, names.back().c_str(), 0);
  if (cur != dir_fd) ::close(cur);
}

Status write_file_atomic_at(int dir_fd, const std::string& name, std::string_view bytes, bool durable, const std::string& shown) {
  std::string suffix = temporary_suffix();
  std::string tmp = name + suffix, shown_tmp = shown + suffix;
  int fd = ::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("create " + shown_tmp, errno);
  Status st = fill_temporary(fd, bytes, durable, shown_tmp);
  if (st.ok() && ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0)
    st = errno_status("rename " + shown_tmp + " -> " + shown, errno);
  if (!st.ok()) ::unlinkat(dir_fd, tmp.c_str(), 0);
  return st;
}

std::string read_failure_reason(const Status& st, const std::string& path) {
  std::string why = st.message();
  for (std::string prefix : {"open " + path + ": ", "read " + path + ": "})
    if (why.rfind(prefix, 0) == 0) return why.substr(prefix.size());
  return why;
}

Status write_all(int fd, std::string_view bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("write " + path, errno);
    }
    done += static_cast<size_t>(n);
  }
  return {};
}

Status write_file_atomic(const std::string& path, std::string_view bytes, bool durable) {
  std::string tmp = path + temporary_suffix();
  // Exclusive, and never through a link: a name planted where the temporary goes fails the write.
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("create " + tmp, errno);
  Status st = fill_temporary(fd, bytes, durable, tmp);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) st = errno_status("rename " + tmp + " -> " + path, errno);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status make_dirs(const std::string& path, unsigned mode) {
  if (path.empty()) return {};
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return {};
    return io_error("not a folder: " + path);
  }
  std::string parent = dirname_of(path);
  if (parent != path) KILN_RETURN_IF_ERROR(make_dirs(parent, mode));
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return errno_status("mkdir " + path, errno);
  return {};
}

std::string absolute_path(const std::string& path) {
  // By hand rather than std::filesystem: this is on the hit path (spec paths, header labels),
  // where path objects cost ~35,000 instructions per spec in a fresh process.
  std::string full;
  if (path.empty() || path[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) full = cwd;
    full += '/';
  }
  full += path;
  std::vector<std::string_view> parts;
  std::string_view rest = full;
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();  // above the root is the root
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (auto part : parts) {
    out += '/';
    out += part;
  }
  return out.empty() ? "/" : out;
}

bool path_is_within(std::string_view path, std::string_view root) {
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (path.substr(0, root.size()) != root) return false;
  return path.size() == root.size() || path[root.size()] == '/' || root == "/";
}

std::string relative_to(std::string_view path, std::string_view root) {
  while (root.size() > 1 && root.back() == '/') root.remove_suffix(1);
  if (!path_is_within(path, root)) return std::string(path);
  std::string_view rest = path.substr(root.size());
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  return std::string(rest.empty() ? "." : rest);
}

std::string dirname_of(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

}  // namespace kiln
