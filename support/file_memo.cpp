#include "support/file_memo.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "support/file_util.h"

namespace kiln {
namespace {

constexpr int64_t k_settled_ns = 2'000'000'000;
// Bounds the memo file (a few MB at most); past it, entries from earlier processes go first.
constexpr size_t k_max_entries = 50'000;

int64_t ns_of(const struct timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

FileStamp stamp_of(const struct stat& st) {
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
          ns_of(st.st_mtim), ns_of(st.st_ctim), S_ISREG(st.st_mode)};
}

bool storable(std::string_view s) { return s.find_first_of("\t\n") == std::string_view::npos; }

struct Entry {
  Hash128 stamp;
  std::string value;
};

// "kind\tpath\tstamp\tvalue\n" per entry; anything else on a line is skipped.
void parse_into(std::string_view text, std::unordered_map<std::string, Entry>& out) {
  while (!text.empty()) {
    size_t nl = text.find('\n');
    if (nl == std::string_view::npos) break;  // an unterminated last line is a torn write
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl + 1);
    size_t a = line.find('\t');
    size_t b = a == std::string_view::npos ? a : line.find('\t', a + 1);
    size_t c = b == std::string_view::npos ? b : line.find('\t', b + 1);
    if (c == std::string_view::npos) continue;
    auto stamp = Hash128::from_hex(line.substr(b + 1, c - b - 1));
    if (!stamp) continue;
    out[std::string(line.substr(0, b))] = {*stamp, std::string(line.substr(c + 1))};
  }
}

}  // namespace

Hash128 FileStamp::digest() const {
  uint64_t fields[] = {dev, ino, size, static_cast<uint64_t>(mtime_ns), static_cast<uint64_t>(ctime_ns)};
  return xxh3_128(fields, sizeof fields);
}

bool FileStamp::settled() const {
  struct timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  int64_t now_ns = ns_of(now);
  return now_ns - mtime_ns > k_settled_ns && now_ns - ctime_ns > k_settled_ns;
}

Result<FileStamp> file_stamp(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return not_found("cannot stat " + path);
  return stamp_of(st);
}

struct FileMemo::Impl {
  std::shared_mutex mutex;  // lookups share it (memo_files_hash looks up from several threads)
  std::string file;  // where the memo is saved; empty until attached
  std::unordered_map<std::string, Entry> entries;  // "kind\tpath"
  std::unordered_map<std::string, Entry> fresh;    // remembered by this process since the last save
};

FileMemo& FileMemo::instance() {
  static FileMemo memo;
  return memo;
}

FileMemo::Impl& FileMemo::impl() {
  static Impl impl;
  return impl;
}

Status FileMemo::attach(const std::string& file) {
  Impl& m = impl();
  std::lock_guard lock(m.mutex);
  if (!m.file.empty()) return {};
  m.file = file;
  Status st;
  if (auto text = read_file(file); text.ok()) {
    parse_into(text.value(), m.entries);
  } else if (text.status().code() != StatusCode::kNotFound) {
    st = io_error("cannot read the file memo " + file + ": " + read_failure_reason(text.status(), file) +
                  "; header hashes and toolchain fingerprints are computed again in this process");
  }
  for (auto& [k, e] : m.fresh) m.entries[k] = e;  // what this process learnt before attaching
  return st;
}

std::optional<std::string> FileMemo::get(std::string_view kind, const std::string& path, const Hash128& stamp) {
  Impl& m = impl();
  std::string key = std::string(kind) + "\t" + path;
  std::shared_lock lock(m.mutex);
  auto it = m.entries.find(key);
  if (it == m.entries.end() || it->second.stamp != stamp) return std::nullopt;
  return it->second.value;
}

std::optional<Hash128> FileMemo::get_hash(std::string_view kind, std::string_view path, const Hash128& stamp) {
  Impl& m = impl();
  thread_local std::string key;  // reused: a manifest looks up thousands
  key.assign(kind).append("\t").append(path);
  std::shared_lock lock(m.mutex);
  auto it = m.entries.find(key);
  if (it == m.entries.end() || it->second.stamp != stamp) return std::nullopt;
  return Hash128::from_hex(it->second.value);
}

void FileMemo::put(std::string_view kind, const std::string& path, const Hash128& stamp, const std::string& value) {
  if (!storable(kind) || !storable(path) || !storable(value)) return;
  Impl& m = impl();
  std::string key = std::string(kind) + "\t" + path;
  std::lock_guard lock(m.mutex);
  m.entries[key] = {stamp, value};
  m.fresh[key] = {stamp, value};
}

Status FileMemo::save() {
  Impl& m = impl();
  std::lock_guard lock(m.mutex);
  if (m.file.empty() || m.fresh.empty()) return {};
  // Merge with what other processes saved since this one loaded: theirs, then ours on top.
  std::unordered_map<std::string, Entry> merged;
  if (auto text = read_file(m.file); text.ok()) parse_into(text.value(), merged);
  if (merged.size() + m.fresh.size() > k_max_entries) {
    for (auto it = merged.begin(); it != merged.end() && merged.size() + m.fresh.size() > k_max_entries;)
      it = m.fresh.count(it->first) ? std::next(it) : merged.erase(it);
  }
  for (auto& [k, e] : m.fresh) merged[k] = e;
  std::string out;
  out.reserve(merged.size() * 96);
  for (auto& [k, e] : merged) out += k + "\t" + e.stamp.hex() + "\t" + e.value + "\n";
  // Not fsynced: a memo lost to a power cut is recomputed, and rename still makes it whole.
  Status st = write_file_atomic(m.file, out, /*durable=*/false);
  if (st.ok()) {
    m.entries = std::move(merged);
    m.fresh.clear();
  }
  return st;
}

void FileMemo::reset_for_testing() {
  Impl& m = impl();
  std::lock_guard lock(m.mutex);
  m.file.clear();
  m.entries.clear();
  m.fresh.clear();
}

Result<Hash128> memo_file_hash(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(FileStamp before, file_stamp(path));
  if (!before.regular) return invalid_argument(path + " is not a regular file: not hashed as a header");
  if (before.size > k_max_hashed_file)
    return invalid_argument(path + " is " + std::to_string(before.size) + " bytes, over the " + std::to_string(k_max_hashed_file) +
                            " a header may have");
  FileMemo& memo = FileMemo::instance();
  Hash128 stamp = before.digest();
  if (auto v = memo.get("hash", path, stamp)) {
    if (auto h = Hash128::from_hex(*v)) return *h;
  }
  // The same bounds again on what is read: the path may have been swapped since its stamp.
  KILN_ASSIGN_OR_RETURN(std::string text, read_regular_file(path, k_max_hashed_file));
  Hash128 hash = xxh3_128(text);
  // The file must not have changed while it was read, and must have settled.
  auto after = file_stamp(path);
  if (after.ok() && after.value() == before && before.settled()) memo.put("hash", path, stamp, hash.hex());
  return hash;
}

namespace {

// Below this many files one thread does them all: starting a second costs ~50 us, about what
// 40 stats cost here.
constexpr size_t k_parallel_stat_min_files = 1024;
constexpr unsigned k_max_stat_threads = 4;

// memo_files_hash's work on paths[begin, end): each folder opened once, each file stat'ed in it.
// A file the memo does not know (or that is gone) is left unset, for the single-file path.
void memo_hash_range(const std::vector<std::string>& paths, size_t begin, size_t end, std::vector<std::optional<Hash128>>& out) {
  FileMemo& memo = FileMemo::instance();
  std::string folder, open_folder;
  int fd = -1;
  for (size_t i = begin; i < end; ++i) {
    const std::string& path = paths[i];
    size_t slash = path.rfind('/');
    if (slash == std::string::npos || slash + 1 == path.size()) continue;
    folder.assign(path, 0, slash == 0 ? 1 : slash);
    if (fd < 0 || folder != open_folder) {  // manifests are sorted: a folder's files are together
      if (fd >= 0) ::close(fd);
      fd = ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      open_folder = folder;
    }
    struct stat st{};
    if (fd < 0 || ::fstatat(fd, path.c_str() + slash + 1, &st, 0) != 0) continue;  // symlinks followed, as stat(2)
    out[i] = memo.get_hash("hash", path, stamp_of(st).digest());
  }
  if (fd >= 0) ::close(fd);
}

}  // namespace

Result<std::vector<Hash128>> memo_files_hash(const std::vector<std::string>& paths) {
  std::vector<std::optional<Hash128>> found(paths.size());
  // The stats are system calls, and on this kind of machine (a VM) each costs ~1.5-2 us: 4,841 of
  // them are most of a warm torch-extension hit. Split across the cores they cost a fraction.
  unsigned threads = 1;
  if (paths.size() >= k_parallel_stat_min_files)
    threads = std::clamp(std::thread::hardware_concurrency(), 1u, k_max_stat_threads);
  if (threads == 1) {
    memo_hash_range(paths, 0, paths.size(), found);
  } else {
    std::vector<std::thread> workers;
    size_t chunk = (paths.size() + threads - 1) / threads;
    for (unsigned t = 1; t < threads; ++t) {
      size_t begin = std::min(paths.size(), t * chunk), end = std::min(paths.size(), begin + chunk);
      workers.emplace_back([&, begin, end] { memo_hash_range(paths, begin, end, found); });
    }
    memo_hash_range(paths, 0, std::min(paths.size(), chunk), found);
    for (auto& w : workers) w.join();
  }
  std::vector<Hash128> out;
  out.reserve(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    if (found[i]) {
      out.push_back(*found[i]);
      continue;
    }
    // Not remembered, changed, or gone: the single-file path reads it, or says why it cannot.
    KILN_ASSIGN_OR_RETURN(Hash128 hash, memo_file_hash(paths[i]));
    out.push_back(hash);
  }
  return out;
}

namespace {

struct TreeFile {
  std::string rel;
  FileStamp stamp;
};

// Every regular file under `dir` (symlinks followed, to a bounded depth), in name order.
Status list_tree(const std::string& root, const std::string& rel, int depth, std::vector<TreeFile>& out) {
  if (depth > 32) return invalid_argument("folder " + root + " nests deeper than 32 levels (a symlink loop?)");
  std::string dir = rel.empty() ? root : root + "/" + rel;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return errno_status("opendir " + dir, errno);
  std::vector<std::string> names;
  while (auto* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (auto& name : names) {
    std::string child = rel.empty() ? name : rel + "/" + name;
    struct stat st{};
    if (::stat((root + "/" + child).c_str(), &st) != 0) continue;  // a dangling symlink reads as nothing
    if (S_ISDIR(st.st_mode)) {
      KILN_RETURN_IF_ERROR(list_tree(root, child, depth + 1, out));
    } else if (S_ISREG(st.st_mode)) {
      out.push_back({child, stamp_of(st)});
    }
  }
  return {};
}

Hash128 stamp_of_tree(const std::vector<TreeFile>& files) {
  Hasher128 h;
  for (auto& f : files) {
    h.update(f.rel);
    h.update(std::string_view("\0", 1));
    Hash128 s = f.stamp.digest();
    h.update(s.bytes.data(), s.bytes.size());
  }
  return h.digest();
}

}  // namespace

Result<Hash128> memo_folder_digest(const std::string& root) {
  std::vector<TreeFile> files;
  KILN_RETURN_IF_ERROR(list_tree(root, "", 0, files));
  Hash128 stamp = stamp_of_tree(files);
  FileMemo& memo = FileMemo::instance();
  if (auto v = memo.get("folder", root, stamp)) {
    if (auto h = Hash128::from_hex(*v)) return *h;
  }
  Hasher128 h;
  bool settled = true;
  for (auto& f : files) {
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(root + "/" + f.rel));
    h.update(f.rel);
    uint64_t size = text.size();
    h.update(&size, sizeof size);
    h.update(text);
    settled = settled && f.stamp.settled();
  }
  Hash128 digest = h.digest();
  // Remembered only when no file changed while it was read (the stamps again) and all settled.
  std::vector<TreeFile> again;
  if (settled && list_tree(root, "", 0, again).ok() && stamp_of_tree(again) == stamp)
    memo.put("folder", root, stamp, digest.hex());
  return digest;
}

}  // namespace kiln
