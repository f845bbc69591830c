// The store's SQLite index (store.h): opening it, setting aside one that is corrupt or another
// cache's and rebuilding it from the blobs, its schema and migrations, and the row writes that keep
// the bytes counter in step.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "cache/blob.h"
#include "cache/store.h"
#include "cache/store_files.h"
#include "cache/store_sql.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

bool is_corruption(int code) {
  code &= 0xff;
  return code == SQLITE_CORRUPT || code == SQLITE_NOTADB;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The folder's identity (blobs/.store-id), or "" when it has none yet.
std::string folder_id(const std::string& root) {
  auto text = read_file(root + "/" + k_store_id_file);
  return text.ok() ? trimmed(std::move(text).value()) : "";
}

// Gives the folder the identity `id` unless it has one already; returns the one it has.
std::string claim_folder_id(const std::string& root, const std::string& id) {
  std::string path = root + "/" + k_store_id_file;
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  // link() fails when the name exists: of two processes giving the folder an identity, one wins.
  if (write_file_atomic(tmp, id + "\n", /*durable=*/true).ok()) {
    (void)::link(tmp.c_str(), path.c_str());
    ::unlink(tmp.c_str());
  }
  std::string now = folder_id(root);
  return now.empty() ? id : now;
}

std::string new_store_id() {
  Hash128 h;
  if (::getrandom(h.bytes.data(), h.bytes.size(), 0) != static_cast<ssize_t>(h.bytes.size()))
    h = xxh3_128(std::to_string(::getpid()) + " " + std::to_string(now_seconds()));
  return h.hex();
}

std::string meta_value(sqlite3* db, const char* name) {
  sqlite3_stmt* s = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE name = ?", -1, &s, nullptr) == SQLITE_OK) {
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) out = column_text(s, 0);
  }
  sqlite3_finalize(s);
  return out;
}

bool any_blob(const std::string& root) {
  bool found = false;
  for_each_blob_file(root, [&](const std::string&, const std::string& name, int64_t) {
    found = key_of_blob_name(name).has_value();
    return !found;
  });
  return found;
}

}  // namespace

Status Store::open_index() {
  std::string index = m_root + "/index.sqlite";
  int rc = sqlite3_open_v2(index.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  if (rc != SQLITE_OK) return sql_error(m_db, "open " + index);
  struct stat st{};
  if (::stat(index.c_str(), &st) == 0) {
    m_index_dev = st.st_dev;
    m_index_ino = st.st_ino;
  }
  return init_schema();
}

void Store::close_index_locked() {
  for (auto& [_, stmt] : m_statements) sqlite3_finalize(stmt);
  m_statements.clear();
  if (m_db) sqlite3_close(m_db);
  m_db = nullptr;
}

Status Store::ensure_index_locked() {
  if (m_db) {
    // The index this Store opened may have been removed or replaced since (a user's rm, a copy
    // over it): rows written there would be lost to every other process. One stat tells.
    struct stat st{};
    if (::stat((m_root + "/index.sqlite").c_str(), &st) == 0 && st.st_dev == m_index_dev && st.st_ino == m_index_ino) return {};
    close_index_locked();
    m_index_tried = false;
  }
  if (m_index_tried) return m_index_status;
  m_index_tried = true;
  // What happened to the index, should it have to be rebuilt: for the notice.
  std::string what = ::access((m_root + "/index.sqlite").c_str(), F_OK) == 0 ? "empty" : "missing";
  Status st = open_index();
  if (!st.ok() && m_db && is_corruption(sqlite3_extended_errcode(m_db))) {
    std::string aside;
    st = set_aside_locked("corrupt", &aside);
    what = "corrupt (set aside as " + aside + ")";
  }
  if (st.ok()) {
    auto ours = index_is_ours_locked();
    if (!ours.ok()) {
      st = ours.status();
    } else if (!*ours) {
      std::string aside;
      st = set_aside_locked("foreign", &aside);
      what = "another cache's (set aside as " + aside + ")";
      if (st.ok()) st = index_is_ours_locked().status();  // the new one takes the folder's identity
    }
  }
  if (st.ok()) st = rebuild_if_empty_locked(what);
  if (!st.ok()) {
    close_index_locked();
    m_index_status = st;
  }
  return st;
}

Status Store::set_aside_locked(const std::string& why, std::string* aside_out) {
  close_index_locked();
  // Never deleted: someone may want to look at what went wrong. Its WAL goes with it (it holds
  // its latest pages); its shared memory is rebuilt by whoever opens it.
  std::string index = m_root + "/index.sqlite";
  std::string aside = index + "." + why + "-" + std::to_string(now_seconds());
  ::rename(index.c_str(), aside.c_str());
  ::rename((index + "-wal").c_str(), (aside + "-wal").c_str());
  ::unlink((index + "-shm").c_str());
  if (aside_out) *aside_out = aside;
  return open_index();
}

Result<bool> Store::index_is_ours_locked() {
  std::string index_id = meta_value(m_db, "store_id");
  std::string folder = folder_id(m_root);
  if (!index_id.empty()) {
    if (folder.empty()) folder = claim_folder_id(m_root, index_id);  // a cache from before folders had one
    return index_id == folder;
  }
  // A new index, or one from before indexes named their folder: it takes the folder's identity
  // (the folder's stays: its blobs are the truth), under the write lock, re-read there.
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  index_id = meta_value(m_db, "store_id");
  if (index_id.empty()) {
    index_id = folder.empty() ? claim_folder_id(m_root, new_store_id()) : folder;
    sqlite3_stmt* s = prepare("INSERT OR REPLACE INTO meta(name, value) VALUES('store_id', ?)");
    Status st = s ? Status() : sql_error(m_db, "prepare store id");
    if (st.ok()) {
      StatementReset reset{s};
      bind_text(s, 1, index_id);
      if (sqlite3_step(s) != SQLITE_DONE) st = sql_error(m_db, "write the store id");
    }
    if (!st.ok()) {
      (void)exec("ROLLBACK");
      return st;
    }
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  return index_id == folder_id(m_root);
}

Status Store::rebuild_if_empty_locked(const std::string& what) {
  auto has_rows = [&]() -> Result<bool> {
    sqlite3_stmt* s = prepare("SELECT 1 FROM artifacts LIMIT 1");
    if (!s) return sql_error(m_db, "prepare row probe");
    StatementReset reset{s};
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_error(m_db, "read the index");
    return rc == SQLITE_ROW;
  };
  KILN_ASSIGN_OR_RETURN(bool rows, has_rows());
  if (rows || !any_blob(m_root)) return {};
  // Under the store's lock: no blob is between its rename and its row now, and of the processes
  // that find the index empty at once, one rebuilds it and the others find it rebuilt.
  KILN_RETURN_IF_ERROR(lock_store_locked(/*exclusive=*/true));
  auto rows_now = has_rows();
  Result<uint64_t> rebuilt = rows_now.ok() && !*rows_now ? rebuild_index_locked() : Result<uint64_t>(uint64_t{0});
  unlock_store_locked();
  if (!rows_now.ok()) return rows_now.status();
  if (!rebuilt.ok()) return rebuilt.status();
  if (*rows_now) return {};
  m_notice = "the cache index in " + m_root + " was " + what + ": it was rebuilt from " + std::to_string(rebuilt.value()) +
             " blobs, each checked (their hit counts and the cache's counters start again; `kiln cache verify` reads them all)";
  if (m_options.report_notice) m_options.report_notice(m_notice);
  return {};
}

bool Store::recovered_locked() {
  if (!m_db || !is_corruption(sqlite3_extended_errcode(m_db))) return false;
  (void)exec("ROLLBACK");  // whatever was under way
  std::string aside;
  Status st = set_aside_locked("corrupt", &aside);
  if (st.ok()) st = index_is_ours_locked().status();
  if (st.ok()) st = rebuild_if_empty_locked("corrupt (set aside as " + aside + ")");
  if (!st.ok()) {
    close_index_locked();
    m_index_status = st;
  }
  return st.ok();
}

Status Store::lock_store_locked(bool exclusive) {
  if (m_lock_fd < 0) {
    std::string path = m_root + "/index.lock";
    m_lock_fd = ::openat(m_root_fd, "index.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (m_lock_fd < 0) return errno_status("cannot open the store's lock " + path, errno);
  }
  while (::flock(m_lock_fd, exclusive ? LOCK_EX : LOCK_SH) != 0)
    if (errno != EINTR) return errno_status("cannot take the store's lock " + m_root + "/index.lock", errno);
  return {};
}

void Store::unlock_store_locked() {
  if (m_lock_fd >= 0) ::flock(m_lock_fd, LOCK_UN);
}

Status Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(m_db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return io_error("sqlite: " + msg);
  }
  return {};
}

sqlite3_stmt* Store::prepare(const char* sql) {
  auto it = m_statements.find(sql);
  if (it != m_statements.end()) return it->second;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(m_db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK) return nullptr;
  m_statements[sql] = s;
  return s;
}

Status Store::init_schema() {
  sqlite3_busy_timeout(m_db, 10000);
  // A process that only reads should not write or sync anything on open or close: no
  // checkpoint when the last connection closes (the next writer's auto-checkpoint does it),
  // and the schema is created only when it is missing.
  sqlite3_db_config(m_db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  KILN_RETURN_IF_ERROR(exec("PRAGMA journal_mode=WAL"));
  // NORMAL in WAL mode: a power loss may drop the last commits, never corrupt the index;
  // blobs are fsynced before their row is written, so a surviving row has a whole blob.
  KILN_RETURN_IF_ERROR(exec("PRAGMA synchronous=NORMAL"));
  int version = 0;
  {
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v2(m_db, "SELECT value FROM meta WHERE name = 'schema_version'", -1, &s, nullptr);
    if (rc == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) version = std::atoi(column_text(s, 0).c_str());
    sqlite3_finalize(s);
    if (rc != SQLITE_OK && is_corruption(sqlite3_extended_errcode(m_db))) return sql_error(m_db, "read schema version");
  }
  if (version > k_index_schema_version)
    return unavailable("the cache index in " + m_root + " has schema version " + std::to_string(version) +
                       ", newer than this kiln understands (" + std::to_string(k_index_schema_version) +
                       "); it was left untouched: use a newer kiln or another KILN_CACHE_DIR");
  if (version < k_index_schema_version) KILN_RETURN_IF_ERROR(migrate(version));
  // Touch the main tables: a damaged file shows here rather than on the first lookup.
  for (const char* probe_sql : {"SELECT count(*) FROM stats", "SELECT count(*) FROM (SELECT 1 FROM artifacts LIMIT 1)"}) {
    sqlite3_stmt* probe = prepare(probe_sql);
    if (!probe || sqlite3_step(probe) != SQLITE_ROW) return sql_error(m_db, "read the index");
    sqlite3_reset(probe);
  }
  return {};
}

Status Store::migrate(int from) {
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  // Re-read under the write lock: another process may have migrated meanwhile.
  int version = std::atoi(meta_value(m_db, "schema_version").c_str());
  (void)from;
  Status st;
  if (version == 0) {
    st = exec(k_schema_v4);
  } else {
    if (version == 1) st = exec(k_migrate_v1_to_v2);
    // Version 2's manifests become files (a lookup reads those), then its table goes.
    if (st.ok() && version <= 2) {
      sqlite3_stmt* m = nullptr;
      if (sqlite3_prepare_v2(m_db, "SELECT input_key, body FROM manifests", -1, &m, nullptr) == SQLITE_OK) {
        while (st.ok() && sqlite3_step(m) == SQLITE_ROW) {
          ArtifactRecord r;
          if (sqlite3_column_bytes(m, 0) != 16) continue;
          std::memcpy(r.input_key.bytes.data(), sqlite3_column_blob(m, 0), 16);
          auto* body = static_cast<const char*>(sqlite3_column_blob(m, 1));
          r.manifest.assign(body ? body : "", static_cast<size_t>(sqlite3_column_bytes(m, 1)));
          st = write_manifest(r.input_key, r.manifest, true);
        }
      }
      sqlite3_finalize(m);
      if (st.ok()) st = exec(k_migrate_v2_to_v3);
    }
    if (st.ok() && version <= 3) st = exec(k_migrate_v3_to_v4);
    if (st.ok() && version <= 3) st = fill_extra_sizes_locked();
  }
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return st;
  }
  return exec("COMMIT");
}

Status Store::fill_extra_sizes_locked() {
  // What each artifact keeps beside its blob: its manifest file as it is on disk, and for a group
  // of files (only another compiler's kind can be one: kiln's own never are, and a PCH's blob is
  // large), what its copies take.
  std::vector<std::pair<Hash128, uint64_t>> sizes;
  {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(m_db,
                           "SELECT key, input_key, kind IN ('host-so', 'ptx', 'cubin', 'hsaco', 'spirv', 'opencl-binary',"
                           " 'opencl-program', 'pch', 'compile-error') FROM artifacts",
                           -1, &s, nullptr) != SQLITE_OK)
      return sql_error(m_db, "prepare the artifacts' sizes");
    while (sqlite3_step(s) == SQLITE_ROW) {
      Hash128 key, input;
      if (sqlite3_column_bytes(s, 0) != 16) continue;
      std::memcpy(key.bytes.data(), sqlite3_column_blob(s, 0), 16);
      if (sqlite3_column_bytes(s, 1) == 16) std::memcpy(input.bytes.data(), sqlite3_column_blob(s, 1), 16);
      uint64_t extra = 0;
      struct stat st{};
      if (!(input == key) && ::stat(manifest_path(input).c_str(), &st) == 0) extra += static_cast<uint64_t>(st.st_size);
      if (!sqlite3_column_int(s, 2))
        if (auto file = read_blob_file(key); file.ok())
          if (auto blob = decode_blob(file.value(), /*with_metadata=*/false); blob.ok()) extra += placed_size_of(blob->content).value_or(0);
      if (extra) sizes.emplace_back(key, extra);
    }
    sqlite3_finalize(s);
  }
  sqlite3_stmt* u = prepare("UPDATE artifacts SET extra_size = ? WHERE key = ?");
  if (!u) return sql_error(m_db, "prepare the artifacts' sizes");
  for (auto& [key, extra] : sizes) {
    StatementReset reset{u};
    sqlite3_bind_int64(u, 1, static_cast<int64_t>(extra));
    sqlite3_bind_blob(u, 2, key.bytes.data(), 16, SQLITE_STATIC);
    if (sqlite3_step(u) != SQLITE_DONE) return sql_error(m_db, "write an artifact's size");
  }
  return exec("UPDATE stats SET value = (SELECT coalesce(sum(stored_size + extra_size), 0) FROM artifacts) WHERE name = 'bytes'");
}

Result<uint64_t> Store::stat_locked(const char* name) {
  sqlite3_stmt* s = prepare("SELECT value FROM stats WHERE name = ?");
  if (!s) return sql_error(m_db, "prepare stats");
  StatementReset reset{s};
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_error(m_db, "read stats");
  return rc == SQLITE_ROW ? static_cast<uint64_t>(std::max<int64_t>(0, sqlite3_column_int64(s, 0))) : 0;
}

Status Store::remove_locked(const Hash128& key, bool unlink_blob) {
  // Called inside or outside a transaction; keeps the bytes counter in step with the rows.
  sqlite3_stmt* s = prepare("DELETE FROM artifacts WHERE key = ? RETURNING stored_size + extra_size");
  if (!s) return sql_error(m_db, "prepare delete");
  int64_t freed = 0;
  {
    StatementReset reset{s};
    sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) freed += sqlite3_column_int64(s, 0);
    if (rc != SQLITE_DONE) return sql_error(m_db, "delete");
  }
  if (freed) {
    sqlite3_stmt* u = prepare("UPDATE stats SET value = value - ? WHERE name = 'bytes'");
    StatementReset reset{u};
    sqlite3_bind_int64(u, 1, freed);
    sqlite3_step(u);
  }
  if (unlink_blob) {
    // The artifact goes whole: its blob, and the copies its group of files was handed out as.
    remove_beneath(m_root_fd, blob_relative(key));
    remove_placed_files(m_root, key);
  }
  return {};
}

Status Store::insert_locked(const ArtifactRecord& r, uint64_t stored_size, uint64_t extra_size, const Hash128& content_hash,
                            int64_t last_used) {
  sqlite3_stmt* s = prepare(
      "INSERT INTO artifacts(key, op, target, kind, size, stored_size, content_hash, toolchain, entry_points, created,"
      " last_used, hits, compile_ms, log, components, input_key, extra_size, compile_cpu_ms)"
      " VALUES(?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?,?,?)");
  if (!s) return sql_error(m_db, "prepare insert");
  StatementReset reset{s};
  int64_t created = r.created ? r.created : now_seconds();
  sqlite3_bind_blob(s, 1, r.key.bytes.data(), 16, SQLITE_STATIC);
  bind_text(s, 2, r.op);
  bind_text(s, 3, r.target);
  bind_text(s, 4, r.kind);
  sqlite3_bind_int64(s, 5, static_cast<int64_t>(r.size));
  sqlite3_bind_int64(s, 6, static_cast<int64_t>(stored_size));
  sqlite3_bind_blob(s, 7, content_hash.bytes.data(), 16, SQLITE_TRANSIENT);
  bind_text(s, 8, r.toolchain);
  bind_text(s, 9, r.entry_points);
  sqlite3_bind_int64(s, 10, created);
  sqlite3_bind_int64(s, 11, last_used ? last_used : now_seconds());
  sqlite3_bind_double(s, 12, r.compile_ms);
  bind_text(s, 13, r.log);
  bind_text(s, 14, r.components);
  sqlite3_bind_blob(s, 15, r.input_key.bytes.data(), 16, SQLITE_STATIC);
  sqlite3_bind_int64(s, 16, static_cast<int64_t>(extra_size));
  sqlite3_bind_double(s, 17, r.compile_cpu_ms);
  if (sqlite3_step(s) != SQLITE_DONE) return sql_error(m_db, "insert artifact " + r.key.hex());
  sqlite3_stmt* u = prepare("UPDATE stats SET value = value + ? WHERE name = 'bytes'");
  StatementReset reset_u{u};
  sqlite3_bind_int64(u, 1, static_cast<int64_t>(stored_size + extra_size));
  if (sqlite3_step(u) != SQLITE_DONE) return sql_error(m_db, "update bytes");
  return {};
}

Result<uint64_t> Store::adopt_locked(const std::vector<std::pair<std::string, int64_t>>& blobs, std::vector<std::string>* damaged) {
  // Read and checked before the transaction (a rebuild may read gigabytes): the write lock is held
  // only for the rows.
  struct Found {
    ArtifactRecord record;
    uint64_t stored = 0, extra = 0;
    Hash128 content_hash;
    int64_t mtime = 0;
  };
  std::vector<Found> found;
  for (auto& [path, mtime] : blobs) {
    bool others = false;  // someone else's: never an artifact of this store's
    auto file = read_file_beneath(m_root_fd, relative_to(path, m_root), path, [&](const struct stat& st) {
      std::string why = untrusted(st);
      others = !why.empty();
      return why;
    });
    if (others && damaged) damaged->push_back(path);
    if (!file.ok()) continue;  // gone meanwhile (evicted, replaced), or someone else's
    auto blob = decode_blob(file.value());
    auto record = blob.ok() ? decode_record(blob->metadata) : Result<ArtifactRecord>(blob.status());
    if (!record.ok() || blob_path(record->key) != path || record->size != blob->content.size()) {
      if (damaged) damaged->push_back(path);
      continue;
    }
    // Blobs carry their manifests: direct lookups work again at once.
    if (has_manifest(*record)) (void)write_manifest(record->input_key, record->manifest, true);
    uint64_t extra = extra_size_of(*record, std::string_view(blob->content));
    found.push_back({std::move(record).value(), file->size(), extra, xxh3_128(blob->content), mtime});
  }
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  for (auto& f : found) {
    // A blob's time is when it was stored or last replaced: the best guess at its last use.
    Status st = remove_locked(f.record.key, /*unlink_blob=*/false);
    if (st.ok()) st = insert_locked(f.record, f.stored, f.extra, f.content_hash, f.mtime);
    if (!st.ok()) {
      (void)exec("ROLLBACK");
      return st;
    }
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  if (!found.empty()) count(Counter::kAdopted, static_cast<int64_t>(found.size()));
  return found.size();
}

Result<uint64_t> Store::rebuild_index_locked() {
  std::vector<std::pair<std::string, int64_t>> blobs;
  for_each_blob_file(m_root, [&](const std::string& path, const std::string& name, int64_t mtime) {
    if (key_of_blob_name(name)) blobs.emplace_back(path, mtime);
    return true;
  });
  return adopt_locked(blobs, nullptr);  // damaged ones are left for gc and verify
}

}  // namespace kiln::cache
