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
#include "cache/store_files.h"
#include "cache/store_sql.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

// An index set aside (corrupt, foreign) is kept this long for someone to look at, then gc removes it.
constexpr int64_t k_aside_keep_seconds = 7 * 24 * 3600;

constexpr const char* k_select_record =
    "SELECT key, op, target, kind, toolchain, entry_points, compile_ms, log, size, created, stored_size, last_used,"
    " hits, components, input_key, extra_size, compile_cpu_ms FROM artifacts";

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
  r.extra_size = static_cast<uint64_t>(sqlite3_column_int64(s, 15));
  r.compile_cpu_ms = sqlite3_column_double(s, 16);
  return r;
}

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

// "what (op, target)" of a blob file from its own metadata, for a line about one the index lacks.
std::string described(const std::string& path) {
  auto file = read_file(path);
  auto blob = file.ok() ? decode_blob(file.value()) : Result<DecodedBlob>(file.status());
  auto record = blob.ok() ? decode_record(blob->metadata) : Result<ArtifactRecord>(blob.status());
  return record.ok() ? record->kind + " " + record->op + ", " + record->target : "metadata unreadable";
}

}  // namespace

Result<Statistics> Store::statistics() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  flush_or_report_locked();
  return with_recovery_locked([&]() -> Result<Statistics> {
    // The pages of processes that are gone go into the index; those of live ones are added as
    // they stand, so that a figure counts what happened up to now.
    KILN_RETURN_IF_ERROR(fold_usage_locked(/*all_pages=*/true));
    Statistics out;
    out.max_bytes = m_options.max_bytes;
    for (size_t i = 0; i < static_cast<size_t>(Counter::kCount); ++i) out.counters[counter_name(static_cast<Counter>(i))] = 0;
    sqlite3_stmt* s = prepare("SELECT name, value FROM stats");
    if (!s) return sql_error(m_db, "prepare stats");
    {
      StatementReset reset{s};
      int rc;
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        std::string name = column_text(s, 0);
        if (name != "bytes") out.counters[name] = sqlite3_column_int64(s, 1);
      }
      if (rc != SQLITE_DONE) return sql_error(m_db, "read stats");
    }
    for (auto& [name, value] : live_counters_locked()) out.counters[name] += value;
    sqlite3_stmt* c = prepare("SELECT count(*), coalesce(sum(size), 0), coalesce(sum(stored_size), 0), coalesce(sum(extra_size), 0) FROM artifacts");
    StatementReset reset{c};
    if (!c || sqlite3_step(c) != SQLITE_ROW) return sql_error(m_db, "count artifacts");
    out.artifacts = static_cast<uint64_t>(sqlite3_column_int64(c, 0));
    out.raw_bytes = static_cast<uint64_t>(sqlite3_column_int64(c, 1));
    out.blob_bytes = static_cast<uint64_t>(sqlite3_column_int64(c, 2));
    out.bytes = out.blob_bytes + static_cast<uint64_t>(sqlite3_column_int64(c, 3));
    m_other_bytes = out.other_bytes = other_bytes_locked();
    m_other_bytes_known = true;
    return out;
  });
}

Result<std::vector<ArtifactRecord>> Store::list(const std::string& op, const std::string& target) {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  flush_or_report_locked();
  return with_recovery_locked([&]() -> Result<std::vector<ArtifactRecord>> {
    KILN_RETURN_IF_ERROR(fold_usage_locked());
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
  });
}

Result<std::optional<ArtifactRecord>> Store::record(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  return with_recovery_locked([&]() -> Result<std::optional<ArtifactRecord>> {
    std::string sql = std::string(k_select_record) + " WHERE key = ?";
    sqlite3_stmt* s = prepare(sql.c_str());
    if (!s) return sql_error(m_db, "prepare record");
    StatementReset reset{s};
    sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return std::optional<ArtifactRecord>();
    if (rc != SQLITE_ROW) return sql_error(m_db, "record");
    return std::optional<ArtifactRecord>(read_row(s));
  });
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
  KILN_RETURN_IF_ERROR(with_recovery_locked([&] { return fold_usage_locked(/*all_pages=*/true); }));
  GcReport report;
  int64_t now = now_seconds();
  // 1. What writers that died left (temporaries, staging folders, unfinished counter pages) and
  // indexes set aside long ago.
  auto indexed_keys = [&]() -> Result<std::set<std::string>> {
    std::set<std::string> out;
    sqlite3_stmt* s = prepare("SELECT key FROM artifacts");
    if (!s) return sql_error(m_db, "prepare the keys");
    StatementReset reset{s};
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
      if (sqlite3_column_bytes(s, 0) == 16) {
        Hash128 k;
        std::memcpy(k.bytes.data(), sqlite3_column_blob(s, 0), 16);
        out.insert(k.hex());
      }
    if (rc != SQLITE_DONE) return sql_error(m_db, "read the keys");
    return out;
  };
  KILN_ASSIGN_OR_RETURN(std::set<std::string> indexed, with_recovery_locked(indexed_keys));
  // 2. Blobs the index lacks: a valid one is adopted (it is an artifact, whatever the index
  // forgot), one that fails its checks goes. Only those past the grace period: a younger one may
  // be between its rename and its row.
  std::vector<std::pair<std::string, int64_t>> unindexed;
  for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t mtime) {
    if (now - mtime < k_grace_seconds) return true;
    auto key = key_of_blob_name(name);
    if (!key) {
      if (name.find(".tmp.") != std::string::npos && ::unlink(path.c_str()) == 0) ++report.temporaries_removed;
    } else if (!indexed.count(key->hex())) {
      unindexed.emplace_back(path, mtime);
    }
    return true;
  });
  std::vector<std::string> damaged;
  KILN_ASSIGN_OR_RETURN(report.adopted, adopt_locked(unindexed, &damaged));
  for (auto& path : damaged)
    if (::unlink(path.c_str()) == 0) ++report.orphans_removed;
  for (auto& [path, _] : unindexed)
    if (auto key = key_of_blob_name(std::filesystem::path(path).filename().string())) indexed.insert(key->hex());
  // 3. The folders that hand out groups of files: those of artifacts gone, and temporaries of
  // writers that died (staging folders among them: files/staging/<...>.tmp.<pid>).
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
      if (!temporary && (indexed.count(name) || shard->path().filename() == "staging")) continue;
      std::error_code ec3;
      if (std::filesystem::remove_all(it->path(), ec3) > 0 && !ec3) ++(temporary ? report.temporaries_removed : report.orphans_removed);
    }
  }
  // Chunks kept for a remote fetch to resume (cache/remote_chunks.cpp): a fetch resumes within
  // minutes if at all, so those past the grace period are what a failed fetch left.
  {
    std::error_code ec5;
    for (auto it = std::filesystem::directory_iterator(m_root + "/remote-chunks", ec5); !ec5 && it != std::filesystem::directory_iterator();
         it.increment(ec5)) {
      struct stat st{};
      if (::lstat(it->path().c_str(), &st) == 0 && now - st.st_mtime >= k_grace_seconds && ::unlink(it->path().c_str()) == 0)
        ++report.temporaries_removed;
    }
  }
  {
    std::error_code ec4;
    for (auto it = std::filesystem::directory_iterator(m_root + "/" + k_counter_folder, ec4); !ec4 && it != std::filesystem::directory_iterator();
         it.increment(ec4)) {
      struct stat st{};
      if (it->path().extension() == ".tmp" && ::lstat(it->path().c_str(), &st) == 0 && now - st.st_mtime >= k_grace_seconds &&
          ::unlink(it->path().c_str()) == 0)
        ++report.temporaries_removed;
    }
    for (auto it = std::filesystem::directory_iterator(m_root, ec4); !ec4 && it != std::filesystem::directory_iterator(); it.increment(ec4)) {
      std::string name = it->path().filename().string();
      struct stat st{};
      bool aside = name.rfind("index.sqlite.", 0) == 0 && name.find('-') != std::string::npos;
      if (aside && ::lstat(it->path().c_str(), &st) == 0 && now - st.st_mtime >= k_aside_keep_seconds && ::unlink(it->path().c_str()) == 0)
        ++report.temporaries_removed;
    }
  }
  // 4. Then the least recently used artifacts, until everything fits.
  m_other_bytes = other_bytes_locked();
  m_other_bytes_known = true;
  KILN_ASSIGN_OR_RETURN(GcReport evicted, with_recovery_locked([&] { return gc_locked(max_bytes > m_other_bytes ? max_bytes - m_other_bytes : 0); }));
  report.evicted = evicted.evicted;
  report.bytes_freed = evicted.bytes_freed;
  report.bytes_after = evicted.bytes_after;
  report.other_bytes = m_other_bytes;
  return report;
}

Result<GcReport> Store::gc_locked(uint64_t target_bytes) {
  GcReport report;
  KILN_ASSIGN_OR_RETURN(uint64_t bytes, stat_locked("bytes"));
  // Least recently used first; of those used as long ago, the oldest.
  sqlite3_stmt* oldest = prepare("SELECT key, stored_size + extra_size, input_key FROM artifacts ORDER BY last_used, created LIMIT 512");
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
        if (!(input == k)) inputs.insert(input);
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
  if (report.evicted) count_locked(Counter::kEvictions, static_cast<int64_t>(report.evicted));
  report.bytes_after = bytes;
  return report;
}

Result<VerifyReport> Store::verify(bool repair) {
  auto all = list();
  if (!all.ok()) return all.status();
  VerifyReport report;
  std::set<std::string> indexed;
  for (auto& r : all.value()) {
    ++report.checked;
    indexed.insert(r.key.hex());
    std::string what = r.key.hex() + " (" + r.kind + " " + r.op + ", " + r.target + ")";
    auto file = read_blob_file(r.key);
    if (!file.ok() && file.status().code() == StatusCode::kPermissionDenied) {
      // A link on the way, or a blob someone untrusted wrote: not read, and removed.
      ++report.damaged;
      report.problems.push_back(what + ": " + file.status().message());
    } else if (!file.ok()) {
      ++report.missing;
      report.problems.push_back(what + ": blob missing");
    } else if (auto blob = decode_blob(file.value()); !blob.ok() || blob->content.size() != r.size) {
      ++report.damaged;
      report.problems.push_back(what + ": " + (blob.ok() ? std::string("size differs from the index") : blob.status().message()));
    } else {
      ++report.ok;
      // A group's files in place are handed out on their stamp alone (cache/file_group.cpp):
      // this is where they are read again.
      if (auto files = decode_file_group(blob->content); files.ok() && !placed_files_match(m_root, r.key, files.value(), blob_path(r.key)))
        report.files_differing.push_back(what);
      continue;
    }
    std::lock_guard lock(m_mutex);
    (void)remove_locked(r.key, /*unlink_blob=*/true);
    count_locked(Counter::kRepairs, 1);
  }
  // Blobs the index lacks: the cap and gc do not see them, so each is a failure; repaired, a
  // valid one gets its row and one that fails its checks goes.
  std::vector<std::pair<std::string, int64_t>> unindexed;
  for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t mtime) {
    if (auto key = key_of_blob_name(name); key && !indexed.count(key->hex())) unindexed.emplace_back(path, mtime);
    return true;
  });
  report.unindexed = unindexed.size();
  for (auto& [path, _] : unindexed)
    report.problems.push_back(std::filesystem::path(path).stem().string() + " (" + described(path) + "): not in the index" +
                              (repair ? "" : " (`kiln cache verify --repair` adopts it)"));
  if (repair && !unindexed.empty()) {
    std::lock_guard lock(m_mutex);
    std::vector<std::string> damaged;
    KILN_ASSIGN_OR_RETURN(report.adopted, with_recovery_locked([&] { return adopt_locked(unindexed, &damaged); }));
    for (auto& path : damaged) {
      ::unlink(path.c_str());
      count_locked(Counter::kRepairs, 1);
    }
  }
  return report;
}

Status Store::clear() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  m_pending_hits.clear();
  KILN_RETURN_IF_ERROR(fold_usage_locked());  // its counters stay
  // Exclusive of publications and rebuilds: none sees the rows gone and the blobs still there.
  KILN_RETURN_IF_ERROR(lock_store_locked(/*exclusive=*/true));
  Status st = exec("BEGIN IMMEDIATE; DELETE FROM artifacts; UPDATE stats SET value = 0 WHERE name = 'bytes'; COMMIT;");
  if (st.ok()) {
    for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t) {
      if (key_of_blob_name(name) || name.find(".tmp.") != std::string::npos) ::unlink(path.c_str());
      return true;
    });
    std::error_code ec, ec2;
    std::filesystem::remove_all(m_root + "/manifests", ec);
    // The copies of groups of files, and the folders too once empty: compiles under way (staging
    // folders younger than the grace period) keep theirs.
    int64_t now = now_seconds();
    std::string staging = m_root + "/files/staging";
    for (auto it = std::filesystem::directory_iterator(staging, ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      struct stat st{};
      if (::lstat(it->path().c_str(), &st) == 0 && now - st.st_mtime >= k_grace_seconds) std::filesystem::remove_all(it->path(), ec2);
    }
    ::rmdir(staging.c_str());
    for (auto it = std::filesystem::directory_iterator(m_root + "/files", ec); !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      if (it->path().filename() != "staging") std::filesystem::remove_all(it->path(), ec2);
    ::rmdir((m_root + "/files").c_str());
  }
  unlock_store_locked();
  return st;
}

Result<uint64_t> Store::rebuild_index() {
  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  KILN_RETURN_IF_ERROR(lock_store_locked(/*exclusive=*/true));
  auto rebuilt = rebuild_index_locked();
  unlock_store_locked();
  return rebuilt;
}

}  // namespace kiln::cache
