#include "cache/file_group.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "support/file_util.h"
#include "support/length_prefixed.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_magic = "kiln-files 1\n";

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// True when the file at `path` holds exactly `content`: its size first, then its bytes, read
// into a buffer each thread keeps (a hit reads every file of its group: no allocation, no page
// faults of fresh memory). Read, not mapped: a file truncated meanwhile is a mismatch, not SIGBUS.
bool file_matches(const std::string& path, std::string_view content) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st{};
  bool same = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == content.size();
  thread_local std::string buffer;
  if (same && buffer.size() < content.size()) buffer.resize(content.size());
  size_t done = 0;
  while (same && done < content.size()) {
    ssize_t n = ::read(fd, buffer.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) same = false;
    else done += static_cast<size_t>(n);
  }
  ::close(fd);
  return same && std::memcmp(buffer.data(), content.data(), content.size()) == 0;
}

// True when `folder` holds each file with exactly its content.
bool folder_matches(const std::string& folder, const FileViews& files) {
  std::string path = folder + "/";
  for (auto& [name, content] : files) {
    path.resize(folder.size() + 1);
    path += name;
    if (!file_matches(path, content)) return false;
  }
  return true;
}

Status write_new_file(const std::string& path, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("create " + path, errno);
  Status st = write_all(fd, bytes, path);
  if (::close(fd) != 0 && st.ok()) st = errno_status("close " + path, errno);
  return st;
}

}  // namespace

Status check_file_names(const FileViews& files) {
  std::set<std::string_view> seen;
  for (auto& [name, _] : files) {
    if (name.empty() || name == "." || name == ".." || name.size() > 255 || name.find('/') != std::string_view::npos ||
        name.find('\0') != std::string_view::npos)
      return invalid_argument("'" + std::string(name) + "' is not a plain file name (not empty, at most 255 bytes, no '/', not . or ..)");
    if (!seen.insert(name).second) return invalid_argument("the file name '" + std::string(name) + "' appears twice in the group");
  }
  return {};
}

FileViews views_of(const NamedFiles& files) {
  FileViews out;
  out.reserve(files.size());
  for (auto& [name, content] : files) out.emplace_back(name, content);
  return out;
}

std::string encode_file_group(const FileViews& files) {
  size_t total = k_magic.size() + 16;
  for (auto& [name, content] : files) total += name.size() + content.size() + 32;
  std::string out;
  out.reserve(total);
  out += k_magic;
  put_count(out, files.size());
  for (auto& [name, content] : files) {
    put_field(out, name);
    put_field(out, content);
  }
  return out;
}

Result<FileViews> decode_file_group(std::string_view bytes) {
  if (bytes.substr(0, k_magic.size()) != k_magic) return Status(StatusCode::kDataLoss, "not a group of files (no kiln-files header)");
  FieldReader in(bytes.substr(k_magic.size()));
  size_t count = 0;
  if (!in.count(count) || count > bytes.size()) return Status(StatusCode::kDataLoss, "a group of files with a bad count");
  FileViews files(count);
  for (auto& [name, content] : files)
    if (!in.field_view(name) || !in.field_view(content)) return Status(StatusCode::kDataLoss, "a group of files cut short");
  if (!in.done()) return Status(StatusCode::kDataLoss, "a group of files with bytes after its last file");
  if (Status names = check_file_names(files); !names.ok()) return Status(StatusCode::kDataLoss, names.message());
  return files;
}

Result<MaterializedFiles> materialize_file_group(const std::string& cache_root, const Hash128& key, const FileViews& files) {
  std::string hex = key.hex();
  MaterializedFiles out;
  out.folder = cache_root + "/files/" + hex.substr(0, 2) + "/" + hex;
  for (auto& [name, _] : files) out.paths.emplace_back(std::string(name), out.folder + "/" + std::string(name));
  if (folder_matches(out.folder, files)) return out;  // the usual hit: ~8 small reads
  KILN_RETURN_IF_ERROR(make_dirs(dirname_of(out.folder), 0700));
  std::string tmp = out.folder + ".tmp." + unique_suffix();
  std::error_code ec;
  if (::mkdir(tmp.c_str(), 0700) != 0) return errno_status("mkdir " + tmp, errno);
  Status st;
  for (auto& [name, content] : files)
    if (st = write_new_file(tmp + "/" + std::string(name), content); !st.ok()) break;
  for (int attempt = 0; st.ok(); ++attempt) {
    if (::rename(tmp.c_str(), out.folder.c_str()) == 0) return out;
    if (errno != ENOTEMPTY && errno != EEXIST) {
      st = errno_status("rename " + tmp + " -> " + out.folder, errno);
      break;
    }
    // One is there: another process's whole copy (it raced us), or a damaged one. Keep a good
    // one; move a bad one aside (a rename: readers holding its files keep them) and retry.
    if (folder_matches(out.folder, files) || attempt >= 3) break;
    std::string old = out.folder + ".old.tmp." + unique_suffix();
    if (::rename(out.folder.c_str(), old.c_str()) == 0) std::filesystem::remove_all(old, ec);
  }
  std::filesystem::remove_all(tmp, ec);
  if (!st.ok()) return st;
  if (!folder_matches(out.folder, files)) return io_error("cannot put the files of " + hex + " in place in " + out.folder);
  return out;
}

}  // namespace kiln::cache
