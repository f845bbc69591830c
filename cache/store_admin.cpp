// Store administration: statistics, listing, eviction, verification, clearing, rebuilding.
// These walk the whole index or folder; none is on the lookup path.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "cache/blob.h"
#include "cache/file_group.h"
#include "cache/store.h"
#include "cache/store_sql.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

// A temporary or unindexed blob younger than this may belong to a store in progress.
constexpr int64_t k_grace_seconds = 3600;

constexpr const char* k_select_record =
    "SELECT key, op, target, kind, toolchain, entry_points, compile_ms, log, size, created, stored_size, last_used,"
    " hits, components, input_key FROM artifacts";

ArtifactRecord read_row(sqlite3_stmt* s) {
  ArtifactRecord r;
  if (sqlite3_column_bytes(s, 0) == 16) std::memcpy(r.key.bytes.data(), sqlite3_column_blob(s, 0), 16);
  r.op = column_text(s, 1);
  r.target = column_text(s, 2);
  r.kind = column_text(s, 3);
  r.toolchain = column_text(s, 4);
  r.entry_points = column_text(s, 5);
  r.compile_ms = sqlite3_column_double(s, 6);
  r.log = column_text(s, 7);
  r.size = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
  r.created = sqlite3_column_int64(s, 9);
  r.stored_size = static_cast<uint64_t>(sqlite3_column_int64(s, 10));
  r.last_used = sqlite3_column_int64(s, 11);
  r.hits = static_cast<uint64_t>(sqlite3_column_int64(s, 12));
  r.components = column_text(s, 13);
  if (sqlite3_column_bytes(s, 14) == 16) std::memcpy(r.input_key.bytes.data(), sqlite3_column_blob(s, 14), 16);
  return r;
}

// Calls fn(path, name, mtime) for every file under blobs/<shard>/.
template <class Fn>
void for_each_blob_file(const std::string& root, Fn fn) {
  std::string blobs = root + "/blobs";
  DIR* top = ::opendir(blobs.c_str());
  if (!top) return;
  while (auto* shard = ::readdir(top)) {
    if (shard->d_name[0] == '.') continue;
    std::string dir = blobs + "/" + shard->d_name;
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (auto* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = dir + "/" + e->d_name;
      struct stat st{};
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) fn(path, std::string(e->d_name), int64_t{st.st_mtime});
    }
    ::closedir(d);
  }
  ::closedir(top);
}

std::optional<Hash128> key_of_blob_name(const std::string& name) {
  if (name.size() != 37 || name.compare(32, 5, ".blob") != 0) return std::nullopt;
  return Hash128::from_hex(name.substr(0, 32));
}

}  // namespace

Result<Statistics> Store::statistics() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  flush_or_report_locked();
  KILN_RETURN_IF_ERROR(fold_usage_locked(/*in_transaction=*/false));
  Statistics out;
  out.max_bytes = m_options.max_bytes;
  for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i) out.counters[counter_name(static_cast<Counter>(i))] = 0;
  sqlite3_stmt* s = prepare("SELECT name, value FROM stats");
  if (!s) return sql_error(m_db, "prepare stats");
  {
    StatementReset reset{s};
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::string name = column_text(s, 0);
      if (name == "bytes") out.bytes = static_cast<uint64_t>(std::max<int64_t>(0, sqlite3_column_int64(s, 1)));
      else out.counters[name] = sqlite3_column_int64(s, 1);
    }
  }
  sqlite3_stmt* c = prepare("SELECT count(*), coalesce(sum(size), 0) FROM artifacts");
  StatementReset reset{c};
  if (sqlite3_step(c) != SQLITE_ROW) return sql_error(m_db, "count artifacts");
  out.artifacts = static_cast<uint64_t>(sqlite3_column_int64(c, 0));
  out.raw_bytes = static_cast<uint64_t>(sqlite3_column_int64(c, 1));
  return out;
}

Result<std::vector<ArtifactRecord>> Store::list(const std::string& op, const std::string& target) {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  flush_or_report_locked();
  KILN_RETURN_IF_ERROR(fold_usage_locked(/*in_transaction=*/false));
  std::string sql = std::string(k_select_record) + " WHERE (?1 = '' OR op = ?1) AND (?2 = '' OR target = ?2) ORDER BY op, target, created";
  sqlite3_stmt* s = prepare(sql.c_str());
  if (!s) return sql_error(m_db, "prepare list");
  StatementReset reset{s};
  bind_text(s, 1, op);
  bind_text(s, 2, target);
  std::vector<ArtifactRecord> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) out.push_back(read_row(s));
  if (rc != SQLITE_DONE) return sql_error(m_db, "list");
  return out;
}

Result<std::optional<ArtifactRecord>> Store::record(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  std::string sql = std::string(k_select_record) + " WHERE key = ?";
  sqlite3_stmt* s = prepare(sql.c_str());
  if (!s) return sql_error(m_db, "prepare record");
  StatementReset reset{s};
  sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return std::optional<ArtifactRecord>();
  if (rc != SQLITE_ROW) return sql_error(m_db, "record");
  return std::optional<ArtifactRecord>(read_row(s));
}

Result<std::optional<ArtifactRecord>> Store::find(const std::string& prefix) {
  if (prefix.empty() || prefix.size() > 32 || prefix.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return invalid_argument("'" + prefix + "' is not a key (1 to 32 hex digits)");
  if (prefix.size() == 32) return record(*Hash128::from_hex(prefix));
  auto all = list();
  if (!all.ok()) return all.status();
  std::optional<ArtifactRecord> found;
  std::string lower = prefix;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (auto& r : all.value()) {
    if (r.key.hex().compare(0, lower.size(), lower) != 0) continue;
    if (found) return invalid_argument("key prefix '" + prefix + "' is ambiguous: give more digits");
    found = r;
  }
  return found;
}

Result<GcReport> Store::gc(uint64_t max_bytes) {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  flush_or_report_locked();
  KILN_RETURN_IF_ERROR(fold_usage_locked(/*in_transaction=*/false));
  auto report = gc_locked(max_bytes);
  if (!report.ok()) return report;
  // Leftovers of writers that died: temporaries, and blobs that never got an index row.
  std::set<std::string> indexed;
  {
    sqlite3_stmt* s = prepare("SELECT key FROM artifacts");
    StatementReset reset{s};
    while (sqlite3_step(s) == SQLITE_ROW) {
      Hash128 k;
      if (sqlite3_column_bytes(s, 0) == 16) std::memcpy(k.bytes.data(), sqlite3_column_blob(s, 0), 16);
      indexed.insert(k.hex());
    }
  }
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t mtime) {
    if (now - mtime < k_grace_seconds) return;
    auto key = key_of_blob_name(name);
    if (!key) {
      if (name.find(".tmp.") != std::string::npos && ::unlink(path.c_str()) == 0) ++report->temporaries_removed;
    } else if (!indexed.count(key->hex()) && ::unlink(path.c_str()) == 0) {
      ++report->orphans_removed;
    }
  });
  // The folders that hand out groups of files (cache/file_group.h): those of artifacts gone, and
  // temporaries of writers that died.
  std::error_code ec;
  for (auto shard = std::filesystem::directory_iterator(m_root + "/files", ec); !ec && shard != std::filesystem::directory_iterator();
       shard.increment(ec)) {
    std::error_code ec2;
    for (auto it = std::filesystem::directory_iterator(shard->path(), ec2); !ec2 && it != std::filesystem::directory_iterator();
         it.increment(ec2)) {
      std::string name = it->path().filename().string();
      struct stat st{};
      if (::lstat(it->path().c_str(), &st) != 0 || now - st.st_mtime < k_grace_seconds) continue;
      bool temporary = name.find(".tmp.") != std::string::npos;
      if (!temporary && indexed.count(name)) continue;
      std::error_code ec3;
      if (std::filesystem::remove_all(it->path(), ec3) > 0 && !ec3) ++(temporary ? report->temporaries_removed : report->orphans_removed);
    }
  }
  return report;
}

Result<GcReport> Store::gc_locked(uint64_t target_bytes) {
  GcReport report;
  KILN_ASSIGN_OR_RETURN(uint64_t bytes, stat_locked("bytes"));
  sqlite3_stmt* oldest = prepare("SELECT key, stored_size, input_key FROM artifacts ORDER BY last_used, created LIMIT 512");
  if (!oldest) return sql_error(m_db, "prepare eviction");
  std::set<Hash128> inputs;  // of what was evicted: their manifests go when nothing else uses them
  while (bytes > target_bytes) {
    std::vector<std::pair<Hash128, uint64_t>> batch;
    {
      StatementReset reset{oldest};
      while (sqlite3_step(oldest) == SQLITE_ROW) {
        Hash128 k, input;
        if (sqlite3_column_bytes(oldest, 0) == 16) std::memcpy(k.bytes.data(), sqlite3_column_blob(oldest, 0), 16);
        if (sqlite3_column_bytes(oldest, 2) == 16) std::memcpy(input.bytes.data(), sqlite3_column_blob(oldest, 2), 16);
        batch.emplace_back(k, static_cast<uint64_t>(sqlite3_column_int64(oldest, 1)));
        inputs.insert(input);
      }
    }
    if (batch.empty()) break;
    KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    for (auto& [key, size] : batch) {
      if (bytes <= target_bytes) break;
      Status st = remove_locked(key, /*unlink_blob=*/true);
      if (!st.ok()) {
        (void)exec("ROLLBACK");
        return st;
      }
      bytes = bytes > size ? bytes - size : 0;
      report.bytes_freed += size;
      ++report.evicted;
    }
    KILN_RETURN_IF_ERROR(exec("COMMIT"));
  }
  sqlite3_stmt* used = prepare("SELECT 1 FROM artifacts WHERE input_key = ? LIMIT 1");
  for (auto& input : inputs) {
    if (!used) break;
    StatementReset reset{used};
    sqlite3_bind_blob(used, 1, input.bytes.data(), 16, SQLITE_STATIC);
    if (sqlite3_step(used) != SQLITE_ROW) ::unlink(manifest_path(input).c_str());
  }
  m_pending_counters[static_cast<size_t>(Counter::kEvictions)] += static_cast<int64_t>(report.evicted);
  report.bytes_after = bytes;
  return report;
}

Result<VerifyReport> Store::verify() {
  auto all = list();
  if (!all.ok()) return all.status();
  VerifyReport report;
  std::set<std::string> indexed;
  for (auto& r : all.value()) {
    ++report.checked;
    indexed.insert(r.key.hex());
    auto file = read_file(blob_path(r.key));
    if (!file.ok()) {
      ++report.missing;
      report.problems.push_back(r.key.hex() + " (" + r.op + ", " + r.target + "): blob missing");
    } else if (auto blob = decode_blob(file.value()); !blob.ok() || blob->content.size() != r.size) {
      ++report.damaged;
      report.problems.push_back(r.key.hex() + " (" + r.op + ", " + r.target + "): " +
                                (blob.ok() ? std::string("size differs from the index") : blob.status().message()));
    } else {
      ++report.ok;
      // A group's files in place are handed out on their stamp alone (cache/file_group.cpp):
      // this is where they are read again.
      if (auto files = decode_file_group(blob->content); files.ok() && !placed_files_match(m_root, r.key, files.value(), blob_path(r.key)))
        report.files_differing.push_back(r.key.hex() + " (" + r.op + ", " + r.target + ")");
      continue;
    }
    std::lock_guard lock(m_mutex);
    (void)remove_locked(r.key, /*unlink_blob=*/true);
    ++m_pending_counters[static_cast<size_t>(Counter::kRepairs)];
  }
  for_each_blob_file(m_root, [&](const std::string&, const std::string& name, int64_t) {
    if (auto key = key_of_blob_name(name); key && !indexed.count(key->hex())) ++report.orphans;
  });
  return report;
}

Status Store::clear() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  m_pending_hits.clear();
  KILN_RETURN_IF_ERROR(fold_usage_locked(/*in_transaction=*/false));  // its counters stay
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE; DELETE FROM artifacts; UPDATE stats SET value = 0 WHERE name = 'bytes'; COMMIT;"));
  for_each_blob_file(m_root, [&](const std::string& path, const std::string&, int64_t) { ::unlink(path.c_str()); });
  std::error_code ec;
  std::filesystem::remove_all(m_root + "/manifests", ec);
  std::filesystem::remove_all(m_root + "/files", ec);
  return {};
}

Result<uint64_t> Store::rebuild_index() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  return rebuild_index_locked();
}

Result<uint64_t> Store::rebuild_index_locked() {
  std::vector<std::string> paths;
  for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t) {
    if (key_of_blob_name(name)) paths.push_back(path);
  });
  uint64_t restored = 0;
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  for (auto& path : paths) {
    auto file = read_file(path);
    if (!file.ok()) continue;
    auto blob = decode_blob(file.value());
    if (!blob.ok()) continue;  // damaged: left for gc
    auto record = decode_record(blob->metadata);
    if (!record.ok() || blob_path(record->key) != path) continue;
    (void)remove_locked(record->key, /*unlink_blob=*/false);
    if (insert_locked(record.value(), file->size(), xxh3_128(blob->content)).ok()) ++restored;
    // Blobs carry their manifests: direct lookups work again at once.
    if (has_manifest(*record)) (void)write_manifest(record->input_key, record->manifest, true);
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  return restored;
}

}  // namespace kiln::cache
