#include "cache/store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>

#include "cache/blob.h"
#include "cache/store_sql.h"
#include "support/file_util.h"
#include "support/units.h"

namespace kiln::cache {
namespace {

// Flush usage after this many distinct keys so a long-lived process does not hold them forever.
constexpr size_t k_usage_flush_threshold = 256;

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

// ---- record encoding: version byte, then u32-length-prefixed fields in a fixed order.

constexpr uint8_t k_record_version = 1;

void put_field(std::string& out, std::string_view v) {
  uint32_t n = static_cast<uint32_t>(v.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>(n >> (8 * i));
  out.append(v);
}

}  // namespace

std::string encode_record(const ArtifactRecord& r) {
  std::string out(1, static_cast<char>(k_record_version));
  put_field(out, std::string_view(reinterpret_cast<const char*>(r.key.bytes.data()), 16));
  put_field(out, std::string_view(reinterpret_cast<const char*>(r.input_key.bytes.data()), 16));
  for (const std::string* f : {&r.manifest, &r.op, &r.target, &r.kind, &r.toolchain, &r.entry_points, &r.components, &r.log})
    put_field(out, *f);
  put_field(out, std::to_string(r.compile_ms));
  put_field(out, std::to_string(r.size));
  put_field(out, std::to_string(r.created));
  return out;
}

Result<ArtifactRecord> decode_record(std::string_view in) {
  auto bad = [](const std::string& what) { return Status(StatusCode::kDataLoss, "bad artifact metadata: " + what); };
  if (in.empty() || static_cast<uint8_t>(in[0]) != k_record_version) return bad("unknown version");
  size_t pos = 1;
  auto next = [&](std::string_view& out) -> bool {
    if (in.size() - pos < 4) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<unsigned char>(in[pos + i])} << (8 * i);
    pos += 4;
    if (in.size() - pos < n) return false;
    out = in.substr(pos, n);
    pos += n;
    return true;
  };
  ArtifactRecord r;
  std::string_view key, input;
  if (!next(key) || !next(input) || key.size() != 16 || input.size() != 16) return bad("keys");
  std::memcpy(r.key.bytes.data(), key.data(), 16);
  std::memcpy(r.input_key.bytes.data(), input.data(), 16);
  for (std::string* f : {&r.manifest, &r.op, &r.target, &r.kind, &r.toolchain, &r.entry_points, &r.components, &r.log}) {
    std::string_view v;
    if (!next(v)) return bad("truncated");
    f->assign(v);
  }
  std::string_view ms, size, created;
  if (!next(ms) || !next(size) || !next(created) || pos != in.size()) return bad("truncated numbers");
  char* end = nullptr;
  std::string tmp(ms);
  r.compile_ms = std::strtod(tmp.c_str(), &end);
  tmp.assign(size);
  r.size = std::strtoull(tmp.c_str(), &end, 10);
  tmp.assign(created);
  r.created = std::strtoll(tmp.c_str(), &end, 10);
  if (r.op.empty() || r.kind.empty()) return bad("no op or kind");
  return r;
}

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::kHitsMemory: return "hits_memory";
    case Counter::kHitsDisk: return "hits_disk";
    case Counter::kMisses: return "misses";
    case Counter::kCompiles: return "compiles";
    case Counter::kCompileUsSpent: return "compile_us_spent";
    case Counter::kCompileUsSaved: return "compile_us_saved";
    case Counter::kEvictions: return "evictions";
    case Counter::kRepairs: return "repairs";
    case Counter::kCount: break;
  }
  return "?";
}

Result<uint64_t> max_bytes_from_env() {
  const char* env = std::getenv("KILN_CACHE_MAX_SIZE");
  if (!env || !*env) return StoreOptions{}.max_bytes;
  auto v = parse_size(env);
  if (!v.ok()) return invalid_argument("KILN_CACHE_MAX_SIZE: " + v.status().message());
  return v;
}

std::string Store::default_root() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

static bool is_corruption(int code) {
  code &= 0xff;
  return code == SQLITE_CORRUPT || code == SQLITE_NOTADB;
}

Status Store::open_index() {
  std::string index = m_root + "/index.sqlite";
  int rc = sqlite3_open_v2(index.c_str(), &m_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) return sql_error(m_db, "open " + index);
  return init_schema();
}

Result<std::unique_ptr<Store>> Store::open(const std::string& root_in, StoreOptions options) {
  std::string root = absolute_path(root_in);
  KILN_RETURN_IF_ERROR(make_dirs(root, 0700));
  KILN_RETURN_IF_ERROR(make_dirs(root + "/blobs", 0700));
  std::unique_ptr<Store> store(new Store(root, options));
  Status st = store->open_index();
  if (!st.ok() && store->m_db && is_corruption(sqlite3_extended_errcode(store->m_db))) {
    // Set the damaged index aside (never delete what someone may want to inspect), start a
    // new one and rebuild it from the blobs, which describe themselves.
    for (auto& [_, s] : store->m_statements) sqlite3_finalize(s);
    store->m_statements.clear();
    sqlite3_close(store->m_db);
    store->m_db = nullptr;
    std::string aside = root + "/index.sqlite.corrupt-" + std::to_string(now_seconds());
    ::rename((root + "/index.sqlite").c_str(), aside.c_str());
    ::unlink((root + "/index.sqlite-wal").c_str());
    ::unlink((root + "/index.sqlite-shm").c_str());
    KILN_RETURN_IF_ERROR(store->open_index());
    auto rebuilt = store->rebuild_index();
    if (!rebuilt.ok()) return rebuilt.status();
    store->m_notice = "the cache index in " + root + " was corrupt; it was set aside as " + aside +
                      " and rebuilt from " + std::to_string(rebuilt.value()) + " blobs";
    return store;
  }
  if (!st.ok()) return st;
  return store;
}

Store::~Store() {
  if (m_db) (void)flush_usage();
  for (auto& [_, s] : m_statements) sqlite3_finalize(s);
  if (m_db) sqlite3_close(m_db);
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
  // Touch the main table: a damaged file shows here rather than on the first lookup.
  sqlite3_stmt* probe = prepare("SELECT count(*) FROM stats");
  if (!probe || sqlite3_step(probe) != SQLITE_ROW) return sql_error(m_db, "read the index");
  sqlite3_reset(probe);
  return {};
}

Status Store::migrate(int from) {
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  // Re-read under the write lock: another process may have migrated meanwhile.
  int version = 0;
  {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(m_db, "SELECT value FROM meta WHERE name = 'schema_version'", -1, &s, nullptr) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
      version = std::atoi(column_text(s, 0).c_str());
    sqlite3_finalize(s);
  }
  (void)from;
  Status st;
  if (version == 0) st = exec(k_schema_v2);
  else if (version == 1) st = exec(k_migrate_v1_to_v2);
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return st;
  }
  return exec("COMMIT");
}

std::string Store::blob_path(const Hash128& key) const {
  std::string hex = key.hex();
  return m_root + "/blobs/" + hex.substr(0, 2) + "/" + hex + ".blob";
}

Result<uint64_t> Store::stat_locked(const char* name) {
  sqlite3_stmt* s = prepare("SELECT value FROM stats WHERE name = ?");
  if (!s) return sql_error(m_db, "prepare stats");
  StatementReset reset{s};
  sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
  return sqlite3_step(s) == SQLITE_ROW ? static_cast<uint64_t>(std::max<int64_t>(0, sqlite3_column_int64(s, 0))) : 0;
}

Status Store::remove_locked(const Hash128& key, bool unlink_blob) {
  // Called inside or outside a transaction; keeps the bytes counter in step with the rows.
  sqlite3_stmt* s = prepare("DELETE FROM artifacts WHERE key = ? RETURNING stored_size");
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
  if (unlink_blob) ::unlink(blob_path(key).c_str());
  return {};
}

Result<std::optional<Artifact>> Store::get(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare(
      "SELECT op, target, kind, toolchain, entry_points, compile_ms, log, size, created, stored_size, components,"
      " input_key FROM artifacts WHERE key = ?");
  if (!s) return sql_error(m_db, "prepare lookup");
  Artifact a;
  {
    StatementReset reset{s};
    sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return std::optional<Artifact>();
    if (rc != SQLITE_ROW) return sql_error(m_db, "lookup");
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
    a.record.stored_size = static_cast<uint64_t>(sqlite3_column_int64(s, 9));
    a.record.components = column_text(s, 10);
    if (sqlite3_column_bytes(s, 11) == 16) std::memcpy(a.record.input_key.bytes.data(), sqlite3_column_blob(s, 11), 16);
  }
  auto file = read_file(blob_path(key));
  Result<DecodedBlob> blob = file.ok() ? decode_blob(file.value(), /*with_metadata=*/false) : Result<DecodedBlob>(file.status());
  if (!blob.ok() || blob->content.size() != a.record.size) {
    // Listed but missing or damaged: a miss, and the row goes so the next compile replaces it.
    ++m_pending_counters[static_cast<size_t>(Counter::kRepairs)];
    if (m_options.report_damage && !m_damage_reported) {
      m_damage_reported = true;
      std::string why = !file.ok() ? file.status().message() : !blob.ok() ? blob.status().message() : "size differs from the index";
      m_options.report_damage("cache entry " + key.hex() + " (" + a.record.op + ", " + a.record.target + ") was damaged (" +
                              why + "); it was removed and will be compiled again (`kiln cache verify` checks them all)");
    }
    (void)remove_locked(key, /*unlink_blob=*/true);
    return std::optional<Artifact>();
  }
  a.bytes = std::move(blob->content);
  ++m_pending_hits[key];
  if (m_pending_hits.size() >= k_usage_flush_threshold) (void)flush_locked();
  return std::optional<Artifact>(std::move(a));
}

Status Store::insert_locked(const ArtifactRecord& r, uint64_t stored_size, const Hash128& content_hash) {
  sqlite3_stmt* s = prepare(
      "INSERT INTO artifacts(key, op, target, kind, size, stored_size, content_hash, toolchain, entry_points, created,"
      " last_used, hits, compile_ms, log, components, input_key) VALUES(?,?,?,?,?,?,?,?,?,?,?,0,?,?,?,?)");
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
  sqlite3_bind_int64(s, 11, now_seconds());
  sqlite3_bind_double(s, 12, r.compile_ms);
  bind_text(s, 13, r.log);
  bind_text(s, 14, r.components);
  sqlite3_bind_blob(s, 15, r.input_key.bytes.data(), 16, SQLITE_STATIC);
  if (sqlite3_step(s) != SQLITE_DONE) return sql_error(m_db, "insert artifact " + r.key.hex());
  sqlite3_stmt* u = prepare("UPDATE stats SET value = value + ? WHERE name = 'bytes'");
  StatementReset reset_u{u};
  sqlite3_bind_int64(u, 1, static_cast<int64_t>(stored_size));
  if (sqlite3_step(u) != SQLITE_DONE) return sql_error(m_db, "update bytes");
  if (!r.manifest.empty() || r.kind != "compile-error") {
    sqlite3_stmt* m = prepare("INSERT OR REPLACE INTO manifests(input_key, op, body, created) VALUES(?,?,?,?)");
    StatementReset reset_m{m};
    sqlite3_bind_blob(m, 1, r.input_key.bytes.data(), 16, SQLITE_STATIC);
    bind_text(m, 2, r.op);
    sqlite3_bind_blob(m, 3, r.manifest.data(), static_cast<int>(r.manifest.size()), SQLITE_STATIC);
    sqlite3_bind_int64(m, 4, created);
    if (sqlite3_step(m) != SQLITE_DONE) return sql_error(m_db, "insert manifest");
  }
  return {};
}

Status Store::put(const ArtifactRecord& r, std::string_view bytes) {
  ArtifactRecord record = r;
  record.size = bytes.size();
  if (!record.created) record.created = now_seconds();
  EncodedBlob blob = encode_blob(bytes, encode_record(record));
  std::string path = blob_path(r.key);
  KILN_RETURN_IF_ERROR(make_dirs(dirname_of(path), 0700));
  KILN_RETURN_IF_ERROR(write_file_atomic(path, blob.bytes));

  std::lock_guard lock(m_mutex);
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  // The file at `path` is already the new blob: drop only the old row, if any.
  Status st = remove_locked(r.key, /*unlink_blob=*/false);
  if (st.ok()) st = insert_locked(record, blob.bytes.size(), blob.content_hash);
  if (!st.ok()) {
    (void)exec("ROLLBACK");
    return st;
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  auto bytes_now = stat_locked("bytes");
  if (bytes_now.ok() && bytes_now.value() > m_options.max_bytes) {
    auto report = gc_locked(m_options.max_bytes / 10 * 9);
    if (!report.ok()) return report.status();
  }
  return {};
}

Result<std::optional<std::string>> Store::get_manifest(const Hash128& input_key) {
  std::lock_guard lock(m_mutex);
  sqlite3_stmt* s = prepare("SELECT body FROM manifests WHERE input_key = ?");
  if (!s) return sql_error(m_db, "prepare manifest lookup");
  StatementReset reset{s};
  sqlite3_bind_blob(s, 1, input_key.bytes.data(), 16, SQLITE_STATIC);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return sql_error(m_db, "manifest lookup");
  auto* p = static_cast<const char*>(sqlite3_column_blob(s, 0));
  return std::optional<std::string>(std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(s, 0))));
}

void Store::count(Counter c, int64_t delta) {
  std::lock_guard lock(m_mutex);
  m_pending_counters[static_cast<size_t>(c)] += delta;
}

Status Store::flush_usage() {
  std::lock_guard lock(m_mutex);
  return flush_locked();
}

Status Store::flush_locked() {
  bool counters = false;
  for (auto v : m_pending_counters) counters = counters || v != 0;
  if (m_pending_hits.empty() && !counters) return {};
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  int64_t now = now_seconds();
  sqlite3_stmt* s = prepare("UPDATE artifacts SET hits = hits + ?, last_used = ? WHERE key = ?");
  for (auto& [key, hits] : m_pending_hits) {
    StatementReset reset{s};
    sqlite3_bind_int64(s, 1, static_cast<int64_t>(hits));
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_blob(s, 3, key.bytes.data(), 16, SQLITE_STATIC);
    sqlite3_step(s);
  }
  sqlite3_stmt* c = prepare("INSERT INTO stats(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value");
  for (size_t i = 0; i < m_pending_counters.size(); ++i) {
    if (!m_pending_counters[i]) continue;
    StatementReset reset{c};
    sqlite3_bind_text(c, 1, counter_name(static_cast<Counter>(i)), -1, SQLITE_STATIC);
    sqlite3_bind_int64(c, 2, m_pending_counters[i]);
    sqlite3_step(c);
  }
  Status st = exec("COMMIT");
  if (st.ok()) {
    m_pending_hits.clear();
    m_pending_counters.fill(0);
  } else {
    (void)exec("ROLLBACK");
  }
  return st;
}

}  // namespace kiln::cache
