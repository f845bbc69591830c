#include "cache/store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

#include "cache/blob.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

constexpr int k_index_schema_version = 1;
// Flush usage after this many hits so a long-lived process does not hold them forever.
constexpr size_t k_usage_flush_threshold = 256;

Status sqlite_error(sqlite3* db, const std::string& what) {
  return io_error("sqlite: " + what + ": " + (db ? sqlite3_errmsg(db) : "cannot open"));
}

struct Reset {
  sqlite3_stmt* s;
  ~Reset() {
    if (s) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
    }
  }
};

std::string column_text(sqlite3_stmt* s, int i) {
  auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, i))) : "";
}

}  // namespace

std::string Store::default_root() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

Result<std::unique_ptr<Store>> Store::open(const std::string& root_in) {
  std::string root = absolute_path(root_in);
  KILN_RETURN_IF_ERROR(make_dirs(root, 0700));
  KILN_RETURN_IF_ERROR(make_dirs(root + "/blobs", 0700));
  sqlite3* db = nullptr;
  std::string index = root + "/index.sqlite";
  int rc = sqlite3_open_v2(index.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status st = sqlite_error(db, "open " + index);
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<Store> store(new Store(root, db));
  KILN_RETURN_IF_ERROR(store->init_schema());
  return store;
}

Store::~Store() {
  (void)flush_usage();
  for (auto& [_, s] : m_statements) sqlite3_finalize(s);
  sqlite3_close(m_db);
}

Status Store::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(m_db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return io_error(std::string("sqlite: ") + msg + " in: " + sql);
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
  if (sqlite3_stmt* s = prepare("SELECT value FROM meta WHERE name = 'schema_version'")) {
    Reset reset{s};
    if (sqlite3_step(s) == SQLITE_ROW) version = std::atoi(column_text(s, 0).c_str());
  }
  if (version == 0) {
    for (auto& [_, s] : m_statements) sqlite3_finalize(s);
    m_statements.clear();
    KILN_RETURN_IF_ERROR(exec(
        "BEGIN IMMEDIATE;"
        "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
        "CREATE TABLE IF NOT EXISTS artifacts("
        "  key BLOB PRIMARY KEY, op TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,"
        "  size INTEGER NOT NULL, stored_size INTEGER NOT NULL, content_hash BLOB NOT NULL,"
        "  toolchain TEXT NOT NULL, entry_points TEXT NOT NULL, created INTEGER NOT NULL,"
        "  last_used INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0, compile_ms REAL NOT NULL,"
        "  log TEXT NOT NULL) WITHOUT ROWID;"
        "CREATE INDEX IF NOT EXISTS artifacts_by_op ON artifacts(op, target);"
        "CREATE TABLE IF NOT EXISTS manifests("
        "  input_key BLOB PRIMARY KEY, op TEXT NOT NULL, body BLOB NOT NULL, created INTEGER NOT NULL) WITHOUT ROWID;"
        "INSERT OR IGNORE INTO meta(name, value) VALUES('schema_version', '1');"
        "COMMIT;"));
    version = k_index_schema_version;
  }
  if (version > k_index_schema_version)
    return unavailable("the cache index in " + m_root + " has schema version " + std::to_string(version) +
                       ", newer than this kiln understands (" + std::to_string(k_index_schema_version) +
                       "): use a newer kiln or another KILN_CACHE_DIR");
  return {};
}

std::string Store::blob_path(const Hash128& key) const {
  std::string hex = key.hex();
  return m_root + "/blobs/" + hex.substr(0, 2) + "/" + hex + ".blob";
}

Status Store::remove_locked(const Hash128& key) {
  sqlite3_stmt* s = prepare("DELETE FROM artifacts WHERE key = ?");
  if (!s) return sqlite_error(m_db, "prepare delete");
  Reset reset{s};
  sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
  if (sqlite3_step(s) != SQLITE_DONE) return sqlite_error(m_db, "delete");
  ::unlink(blob_path(key).c_str());
  return {};
}

Result<std::optional<Artifact>> Store::get(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare(
      "SELECT op, target, kind, toolchain, entry_points, compile_ms, log, size, created FROM artifacts WHERE key = ?");
  if (!s) return sqlite_error(m_db, "prepare lookup");
  Artifact a;
  {
    Reset reset{s};
    sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return std::optional<Artifact>();
    if (rc != SQLITE_ROW) return sqlite_error(m_db, "lookup");
    a.record.key = key;
    a.record.op = column_text(s, 0);
    a.record.target = column_text(s, 1);
    a.record.kind = column_text(s, 2);
    a.record.toolchain = column_text(s, 3);
    a.record.entry_points = column_text(s, 4);
    a.record.compile_ms = sqlite3_column_double(s, 5);
    a.record.log = column_text(s, 6);
    a.record.size = static_cast<uint64_t>(sqlite3_column_int64(s, 7));
    a.record.created = sqlite3_column_int64(s, 8);
  }
  auto file = read_file(blob_path(key));
  Result<std::string> content = file.ok() ? decode_blob(file.value()) : Result<std::string>(file.status());
  if (!content.ok() || content->size() != a.record.size) {
    // Listed but missing or damaged: a miss, and the row goes so the next compile replaces it.
    ++m_repairs;
    (void)remove_locked(key);
    return std::optional<Artifact>();
  }
  a.bytes = std::move(content).value();
  if (++m_pending_hits[key] && m_pending_hits.size() >= k_usage_flush_threshold) {
    // Flushing here is rare (once per k_usage_flush_threshold distinct keys).
    m_mutex.unlock();
    (void)flush_usage();
    m_mutex.lock();
  }
  return std::optional<Artifact>(std::move(a));
}

Status Store::put(const ArtifactRecord& r, std::string_view bytes) {
  EncodedBlob blob = encode_blob(bytes);
  std::string path = blob_path(r.key);
  KILN_RETURN_IF_ERROR(make_dirs(dirname_of(path), 0700));
  KILN_RETURN_IF_ERROR(write_file_atomic(path, blob.bytes));

  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare(
      "INSERT OR REPLACE INTO artifacts(key, op, target, kind, size, stored_size, content_hash, toolchain,"
      " entry_points, created, last_used, hits, compile_ms, log) VALUES(?,?,?,?,?,?,?,?,?,?,?,0,?,?)");
  if (!s) return sqlite_error(m_db, "prepare insert");
  Reset reset{s};
  int64_t now = r.created ? r.created : static_cast<int64_t>(std::time(nullptr));
  sqlite3_bind_blob(s, 1, r.key.bytes.data(), 16, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, r.op.data(), static_cast<int>(r.op.size()), SQLITE_STATIC);
  sqlite3_bind_text(s, 3, r.target.data(), static_cast<int>(r.target.size()), SQLITE_STATIC);
  sqlite3_bind_text(s, 4, r.kind.data(), static_cast<int>(r.kind.size()), SQLITE_STATIC);
  sqlite3_bind_int64(s, 5, static_cast<int64_t>(bytes.size()));
  sqlite3_bind_int64(s, 6, static_cast<int64_t>(blob.bytes.size()));
  sqlite3_bind_blob(s, 7, blob.content_hash.bytes.data(), 16, SQLITE_STATIC);
  sqlite3_bind_text(s, 8, r.toolchain.data(), static_cast<int>(r.toolchain.size()), SQLITE_STATIC);
  sqlite3_bind_text(s, 9, r.entry_points.data(), static_cast<int>(r.entry_points.size()), SQLITE_STATIC);
  sqlite3_bind_int64(s, 10, now);
  sqlite3_bind_int64(s, 11, now);
  sqlite3_bind_double(s, 12, r.compile_ms);
  sqlite3_bind_text(s, 13, r.log.data(), static_cast<int>(r.log.size()), SQLITE_STATIC);
  if (sqlite3_step(s) != SQLITE_DONE) return sqlite_error(m_db, "insert artifact " + r.key.hex());
  return {};
}

Result<std::optional<std::string>> Store::get_manifest(const Hash128& input_key) {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare("SELECT body FROM manifests WHERE input_key = ?");
  if (!s) return sqlite_error(m_db, "prepare manifest lookup");
  Reset reset{s};
  sqlite3_bind_blob(s, 1, input_key.bytes.data(), 16, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return sqlite_error(m_db, "manifest lookup");
  auto* p = static_cast<const char*>(sqlite3_column_blob(s, 0));
  return std::optional<std::string>(std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(s, 0))));
}

Status Store::put_manifest(const Hash128& input_key, std::string_view op, std::string_view manifest) {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare("INSERT OR REPLACE INTO manifests(input_key, op, body, created) VALUES(?,?,?,?)");
  if (!s) return sqlite_error(m_db, "prepare manifest insert");
  Reset reset{s};
  sqlite3_bind_blob(s, 1, input_key.bytes.data(), 16, SQLITE_STATIC);
  sqlite3_bind_text(s, 2, op.data(), static_cast<int>(op.size()), SQLITE_STATIC);
  sqlite3_bind_blob(s, 3, manifest.data(), static_cast<int>(manifest.size()), SQLITE_STATIC);
  sqlite3_bind_int64(s, 4, static_cast<int64_t>(std::time(nullptr)));
  if (sqlite3_step(s) != SQLITE_DONE) return sqlite_error(m_db, "insert manifest");
  return {};
}

Result<uint64_t> Store::artifact_count() {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare("SELECT count(*) FROM artifacts");
  if (!s) return sqlite_error(m_db, "prepare count");
  Reset reset{s};
  if (sqlite3_step(s) != SQLITE_ROW) return sqlite_error(m_db, "count");
  return static_cast<uint64_t>(sqlite3_column_int64(s, 0));
}

Status Store::flush_usage() {
  std::lock_guard lock(m_mutex);
  if (m_pending_hits.empty()) return {};
  sqlite3_stmt* s = prepare("UPDATE artifacts SET hits = hits + ?, last_used = ? WHERE key = ?");
  if (!s) return sqlite_error(m_db, "prepare usage update");
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (auto& [key, hits] : m_pending_hits) {
    Reset reset{s};
    sqlite3_bind_int64(s, 1, static_cast<int64_t>(hits));
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_blob(s, 3, key.bytes.data(), 16, SQLITE_STATIC);
    sqlite3_step(s);
  }
  m_pending_hits.clear();
  return exec("COMMIT");
}

}  // namespace kiln::cache
