#include "support/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <vector>

namespace kiln {

Result<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("no such file: " + path);
    return errno_status("open " + path, errno);
  }
  std::string out;
  struct stat st{};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) out.reserve(static_cast<size_t>(st.st_size));
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
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
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
  static std::atomic<unsigned> counter{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("create " + tmp, errno);
  Status st = write_all(fd, bytes, tmp);
  if (st.ok() && durable && ::fsync(fd) != 0) st = errno_status("fsync " + tmp, errno);
  if (::close(fd) != 0 && st.ok()) st = errno_status("close " + tmp, errno);
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
