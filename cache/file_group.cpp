#include "cache/file_group.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "support/file_util.h"
#include "support/length_prefixed.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_magic = "kiln-files 1\n";

// ---- Bounds on a group read from bytes (a blob from a remote tier, a bundle or this store),
// checked before anything is sized from them.
// The fewest bytes one file takes: a one-byte name and empty content, "1\nA0\n".
constexpr size_t k_min_file_bytes = 5;
// The most files a group holds: one kernel's outputs (a Triton kernel: 8) or one compiled entry's;
// 65,536 is thousands of times what any kiln writes.
constexpr size_t k_max_files = 65536;
// The longest name (check_file_names holds names to it too).
constexpr size_t k_max_name_bytes = 255;

// `count` items, each at least `each` bytes, fit in `left` bytes and are at most `cap`.
bool count_fits(size_t count, size_t left, size_t each, size_t cap) { return count <= cap && count <= left / each; }

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

// ---- The stamp of a checked folder
//
// Reading every file of a group on every hit costs more than the rest of the hit: a matmul's
// group is 716 KB, and its reads and compares took ~60 of a hit's ~86 us on the development
// machine. So a folder whose files were found equal to their checked blob gets a stamp,
// `.kiln-checked`, holding what stat() said of each file and of the blob then, and a later hit
// that finds each the same hands the files out after one stat each (placed_file_group).
// Any write to a file changes its ctime, which no one can set back, so a file changed since
// fails the stamp and takes the whole check again. But ctime moves in clock ticks: a write in
// the same tick as the state that was compared would leave it as it was ("racy git"). So a
// stamp is written only for files (and a blob) whose ctime was at least k_settled_ns old when
// the compare began, and only when they still stat the same after it; newer files keep the
// whole check until a hit finds them settled.
constexpr std::string_view k_stamp_name = ".kiln-checked";
constexpr std::string_view k_stamp_magic = "kiln-files-checked 2\n";  // 1 kept the wall time alone
constexpr int64_t k_settled_ns = 1'000'000'000;

}  // namespace

std::optional<FileIdentity> file_identity(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                      st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
}

namespace {

std::string_view bytes_of(const FileIdentity& id) { return {reinterpret_cast<const char*>(&id), sizeof id}; }

int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

// The identities of the blob then of each file, when every one is settled; empty otherwise.
// `blob_read`: the blob's identity from before its bytes were read; a blob that stats otherwise
// now is not the one the files were compared with (another process stored it again), and gets
// no stamp.
std::vector<FileIdentity> settled_identities(const std::string& folder, const FileViews& files, const std::string& blob_path,
                                             const std::optional<FileIdentity>& blob_read) {
  if (!blob_read) return {};
  std::vector<FileIdentity> ids(files.size() + 1);
  int64_t newest_allowed = now_ns() - k_settled_ns;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string path = i == 0 ? blob_path : folder + "/" + std::string(files[i - 1].first);
    std::optional<FileIdentity> id = file_identity(path);
    if (!id || id->ctime_s * 1'000'000'000LL + id->ctime_ns > newest_allowed) return {};
    ids[i] = *id;
  }
  if (ids[0] != *blob_read) return {};
  return ids;
}

// Writes the stamp of `folder`, whose files were just found equal to the checked blob, when
// `before` (taken before that compare) is not empty and each still stats the same.
void stamp(const std::string& folder, const FileViews& files, const std::string& blob_path, const std::vector<FileIdentity>& before,
           CompileCost cost) {
  if (before.empty()) return;
  std::vector<FileIdentity> after = settled_identities(folder, files, blob_path, before[0]);
  if (after != before) return;
  std::string out(k_stamp_magic);
  put_count(out, static_cast<size_t>(cost.wall_us < 0 ? 0 : cost.wall_us));
  put_count(out, static_cast<size_t>(cost.cpu_us < 0 ? 0 : cost.cpu_us));
  put_count(out, files.size());
  put_field(out, bytes_of(after[0]));
  for (size_t i = 0; i < files.size(); ++i) {
    put_field(out, files[i].first);
    put_field(out, bytes_of(after[i + 1]));
  }
  (void)write_file_atomic(folder + "/" + std::string(k_stamp_name), out, /*durable=*/false);  // a lost stamp costs a full check
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
  if (files.size() > k_max_files)
    return invalid_argument("a group of " + std::to_string(files.size()) + " files: at most " + std::to_string(k_max_files));
  std::set<std::string_view> seen;
  for (auto& [name, _] : files) {
    if (name.empty() || name == "." || name == ".." || name.size() > k_max_name_bytes || name.find('/') != std::string_view::npos ||
        name.find('\0') != std::string_view::npos)
      return invalid_argument("'" + std::string(name) + "' is not a plain file name (not empty, at most 255 bytes, no '/', not . or ..)");
    if (name.substr(0, 6) == ".kiln-")
      return invalid_argument("the file name '" + std::string(name) + "' is kiln's own (names starting with .kiln- are reserved)");
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
  std::string_view rest = bytes.substr(k_magic.size());
  FieldReader in(rest);
  size_t count = 0;
  if (!in.count(count)) return Status(StatusCode::kDataLoss, "a group of files with a bad count");
  // Bounded by the bytes there are before the list is sized: each file takes k_min_file_bytes.
  if (!count_fits(count, rest.size(), k_min_file_bytes, k_max_files))
    return Status(StatusCode::kDataLoss, "a group of files says it has " + std::to_string(count) + " files in " +
                                             std::to_string(rest.size()) + " bytes (at most " + std::to_string(k_max_files) + ")");
  FileViews files;
  files.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    std::string_view name, content;
    // Each length is checked against what is left (FieldReader: a view, nothing copied), a
    // name's against its cap too.
    if (!in.field_view(name) || !in.field_view(content))
      return Status(StatusCode::kDataLoss, "a group of files cut short (file " + std::to_string(i + 1) + " of " + std::to_string(count) + ")");
    if (name.size() > k_max_name_bytes)
      return Status(StatusCode::kDataLoss, "a group of files with a name of " + std::to_string(name.size()) + " bytes");
    files.emplace_back(name, content);
  }
  if (!in.done()) return Status(StatusCode::kDataLoss, "a group of files with bytes after its last file");
  if (Status names = check_file_names(files); !names.ok()) return Status(StatusCode::kDataLoss, names.message());
  return files;
}

namespace {
std::string folder_of(const std::string& cache_root, const Hash128& key) {
  std::string hex = key.hex();
  return cache_root + "/files/" + hex.substr(0, 2) + "/" + hex;
}
}  // namespace

namespace {

// A stamp as read: what stat() said of the blob and of each file when they were found equal.
struct Stamp {
  CompileCost cost;
  FileIdentity blob;
  std::vector<std::pair<std::string, FileIdentity>> files;
};

std::optional<Stamp> parse_stamp(std::string_view text) {
  if (text.substr(0, k_stamp_magic.size()) != k_stamp_magic) return std::nullopt;
  FieldReader in(text.substr(k_stamp_magic.size()));
  size_t wall_us = 0, cpu_us = 0, count = 0;
  std::string_view name, recorded;
  auto identity = [&](FileIdentity& out) {
    if (!in.field_view(recorded) || recorded.size() != sizeof(FileIdentity)) return false;
    std::memcpy(&out, recorded.data(), sizeof out);
    return true;
  };
  Stamp stamp;
  if (!in.count(wall_us) || !in.count(cpu_us) || !in.count(count) || !identity(stamp.blob)) return std::nullopt;
  // Each file's entry is its name and its identity, each a length-prefixed field.
  if (!count_fits(count, text.size(), 2 * 2 + sizeof(FileIdentity), k_max_files)) return std::nullopt;
  stamp.cost = {static_cast<int64_t>(wall_us), static_cast<int64_t>(cpu_us)};
  stamp.files.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    FileIdentity id;
    // A forged or torn stamp must not name a file outside the folder.
    if (!in.field_view(name) || !identity(id) || !check_file_names({{name, {}}}).ok()) return std::nullopt;
    stamp.files.emplace_back(std::string(name), id);
  }
  if (!in.done()) return std::nullopt;
  return stamp;
}

// Stamps this process has read, by folder, with what stat() said of the stamp file then: a hit
// whose stamp stats the same takes it from here (a stat instead of an open, a read and a close:
// find_files of a settled 720 KB group of 8 files 10.6 -> 8.3 us, `tools/bench/store_hits.py --only files`,
// this machine, 2026-11-28).
// A stamp is only ever replaced whole (written elsewhere, renamed), so one that stats the same
// holds the same bytes.
class StampMemo {
 public:
  std::shared_ptr<const Stamp> find(const std::string& folder, const FileIdentity& stamp_file) {
    std::lock_guard lock(m_mutex);
    auto it = m_stamps.find(folder);
    if (it == m_stamps.end() || !(it->second.first == stamp_file)) return nullptr;
    return it->second.second;
  }
  void keep(const std::string& folder, const FileIdentity& stamp_file, std::shared_ptr<const Stamp> stamp) {
    std::lock_guard lock(m_mutex);
    if (m_stamps.size() >= k_capacity) m_stamps.clear();  // a process that sees this many groups pays a read each again
    m_stamps[folder] = {stamp_file, std::move(stamp)};
  }

 private:
  static constexpr size_t k_capacity = 4096;
  std::mutex m_mutex;
  std::unordered_map<std::string, std::pair<FileIdentity, std::shared_ptr<const Stamp>>> m_stamps;
};

StampMemo& stamp_memo() {
  static StampMemo* memo = new StampMemo;  // never destroyed: hits may come from threads at exit
  return *memo;
}

}  // namespace

std::optional<PlacedFiles> placed_file_group(const std::string& cache_root, const Hash128& key, const std::string& blob_path) {
  PlacedFiles out;
  out.files.folder = folder_of(cache_root, key);
  std::string stamp_path = out.files.folder + "/" + std::string(k_stamp_name);
  std::optional<FileIdentity> stamp_file = file_identity(stamp_path);
  if (!stamp_file) return std::nullopt;
  std::shared_ptr<const Stamp> stamp = stamp_memo().find(out.files.folder, *stamp_file);
  if (!stamp) {
    auto text = read_file(stamp_path);
    std::optional<Stamp> parsed = text.ok() ? parse_stamp(*text) : std::nullopt;
    if (!parsed) return std::nullopt;
    stamp = std::make_shared<const Stamp>(std::move(*parsed));
    // Kept only when the file read is the one stat() saw (not one renamed over it meanwhile).
    if (file_identity(stamp_path) == stamp_file) stamp_memo().keep(out.files.folder, *stamp_file, stamp);
  }
  // The stamp's record of each file, against what stat() says of it now.
  if (file_identity(blob_path) != stamp->blob) return std::nullopt;
  out.cost = stamp->cost;
  out.files.paths.reserve(stamp->files.size());
  std::string path = out.files.folder + "/";
  for (auto& [name, recorded] : stamp->files) {
    path.resize(out.files.folder.size() + 1);
    path += name;
    if (file_identity(path) != recorded) return std::nullopt;
    out.files.paths.emplace_back(name, path);
  }
  return out;
}

std::optional<uint64_t> placed_size_of(std::string_view bytes) {
  if (bytes.substr(0, k_magic.size()) != k_magic) return std::nullopt;
  auto files = decode_file_group(bytes);
  if (!files.ok()) return std::nullopt;
  // The stamp at its largest: its header, three counts of at most 12 digits, then the blob's
  // identity and each file's name and identity, each a field with a length of at most 3 digits.
  constexpr uint64_t k_identity_field = 4 + sizeof(FileIdentity);
  uint64_t total = k_stamp_magic.size() + 3 * 13 + k_identity_field;
  for (auto& [name, content] : files.value()) total += content.size() + 4 + name.size() + k_identity_field;
  return total;
}

void remove_placed_files(const std::string& cache_root, const Hash128& key) {
  std::string folder = folder_of(cache_root, key);
  std::string aside = folder + ".old.tmp." + unique_suffix();
  std::error_code ec;
  if (::rename(folder.c_str(), aside.c_str()) == 0) std::filesystem::remove_all(aside, ec);
}

bool placed_files_match(const std::string& cache_root, const Hash128& key, const FileViews& files, const std::string& blob_path) {
  // Only a folder its stamp hands out unread matters: any other is compared on its next hit.
  std::optional<PlacedFiles> placed = placed_file_group(cache_root, key, blob_path);
  if (!placed || folder_matches(placed->files.folder, files)) return true;
  // Moved aside (a reader holding its files keeps them), then removed: the next hit puts the
  // files back from the artifact.
  std::string aside = placed->files.folder + ".old.tmp." + unique_suffix();
  std::error_code ec;
  if (::rename(placed->files.folder.c_str(), aside.c_str()) == 0) std::filesystem::remove_all(aside, ec);
  else ::unlink((placed->files.folder + "/" + std::string(k_stamp_name)).c_str());
  return false;
}

Result<MaterializedFiles> materialize_file_group(const std::string& cache_root, const Hash128& key, const FileViews& files,
                                                 const std::string& blob_path, const std::optional<FileIdentity>& blob_read,
                                                 CompileCost cost) {
  std::string hex = key.hex();
  MaterializedFiles out;
  out.folder = folder_of(cache_root, key);
  for (auto& [name, _] : files) out.paths.emplace_back(std::string(name), out.folder + "/" + std::string(name));
  std::vector<FileIdentity> before = settled_identities(out.folder, files, blob_path, blob_read);
  if (folder_matches(out.folder, files)) {  // a hit with no stamp yet (or a listing): ~8 small reads
    if (!before.empty() && !placed_file_group(cache_root, key, blob_path)) stamp(out.folder, files, blob_path, before, cost);
    return out;
  }
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
