#include "cache/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include <cstdlib>
#include <cstring>
#include <ctime>

#include "cache/blob.h"
#include "cache/store_sql.h"
#include "support/file_util.h"
#include "support/mapped_file.h"
#include "support/units.h"

namespace kiln::cache {
namespace {

// Flush usage after this many distinct keys so a long-lived process does not hold them forever.
constexpr size_t k_usage_flush_threshold = 256;
// The usage journal, in the cache folder: "H <key> <hits> <unix time>" and "C <counter> <delta>"
// lines, folded into the index by the next write.
constexpr const char* k_usage_journal = "usage";
// The first line of a manifest file: its format.
constexpr std::string_view k_manifest_header = "kiln-manifest 1\n";

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
    case Counter::kHitsRemote: return "hits_remote";
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
  return std::unique_ptr<Store>(new Store(root, options));
}

Status Store::ensure_index_locked() {
  if (m_db) return {};
  if (m_index_tried) return m_index_status;
  m_index_tried = true;
  Status st = open_index();
  if (!st.ok() && m_db && is_corruption(sqlite3_extended_errcode(m_db))) {
    // Set the damaged index aside (never delete what someone may want to inspect), start a
    // new one and rebuild it from the blobs, which describe themselves.
    for (auto& [_, stmt] : m_statements) sqlite3_finalize(stmt);
    m_statements.clear();
    sqlite3_close(m_db);
    m_db = nullptr;
    std::string aside = m_root + "/index.sqlite.corrupt-" + std::to_string(now_seconds());
    ::rename((m_root + "/index.sqlite").c_str(), aside.c_str());
    ::unlink((m_root + "/index.sqlite-wal").c_str());
    ::unlink((m_root + "/index.sqlite-shm").c_str());
    st = open_index();
    if (st.ok()) {
      auto rebuilt = rebuild_index_locked();
      if (!rebuilt.ok()) st = rebuilt.status();
      else {
        m_notice = "the cache index in " + m_root + " was corrupt; it was set aside as " + aside + " and rebuilt from " +
                   std::to_string(rebuilt.value()) + " blobs";
        if (m_options.report_notice) m_options.report_notice(m_notice);
      }
    }
  }
  if (!st.ok()) {
    for (auto& [_, stmt] : m_statements) sqlite3_finalize(stmt);
    m_statements.clear();
    if (m_db) sqlite3_close(m_db);
    m_db = nullptr;
    m_index_status = st;
  }
  return st;
}

Store::~Store() {
  (void)flush_usage();
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
  if (version == 0) {
    st = exec(k_schema_v3);
  } else {
    if (version == 1) st = exec(k_migrate_v1_to_v2);
    // Version 2's manifests become files (a lookup reads those), then its table goes.
    if (st.ok()) {
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
    }
    if (st.ok()) st = exec(k_migrate_v2_to_v3);
  }
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

std::string Store::manifest_path(const Hash128& input_key) const {
  std::string hex = input_key.hex();
  return m_root + "/manifests/" + hex.substr(0, 2) + "/" + hex + ".manifest";
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
  // The blob alone: it carries the artifact's record and the hashes of both.
  auto file = read_file(blob_path(key));
  if (!file.ok()) {
    KILN_RETURN_IF_ERROR(missing(key, file.status()));
    return std::optional<Artifact>();
  }
  if (blob_format_version(file.value()) > k_blob_format_version)
    return std::optional<Artifact>();  // written by a newer kiln: not ours to read, nor to remove
  Result<DecodedBlob> blob = decode_blob(file.value());
  Result<ArtifactRecord> record = blob.ok() ? decode_record(blob->metadata) : Result<ArtifactRecord>(blob.status());
  if (!checked(key, record, blob.ok() ? blob->content.size() : 0)) return std::optional<Artifact>();
  Artifact a;
  a.record = std::move(record).value();
  a.record.stored_size = file->size();
  a.bytes = std::move(blob->content);
  count_hit(key);
  return std::optional<Artifact>(std::move(a));
}

Result<std::optional<MappedArtifact>> Store::map(const Hash128& key) {
  std::string path = blob_path(key);
  // Populated at once: a PCH is read whole by the compile that maps it. Blobs are replaced by
  // rename, never written in place, so a mapped one cannot change (support/mapped_file.h).
  auto opened = MappedFile::open(path, /*populate=*/true);
  if (!opened.ok()) {
    KILN_RETURN_IF_ERROR(missing(key, opened.status()));
    return std::optional<MappedArtifact>();
  }
  std::shared_ptr<const MappedFile> mapping = std::move(opened).value();
  std::string_view file = mapping->view();
  if (blob_format_version(file) > k_blob_format_version) return std::optional<MappedArtifact>();
  Result<BlobInPlace> blob = decode_blob_in_place(file);
  std::shared_ptr<const void> memory = mapping;
  std::string_view content;
  if (blob.ok() && blob->content) {
    content = *blob->content;
  } else if (blob.ok()) {
    // Compressed: its content decoded from the mapping into memory of its own.
    Result<DecodedBlob> decoded = decode_blob(file, /*with_metadata=*/false);
    if (decoded.ok()) {
      auto owned = std::make_shared<const std::string>(std::move(decoded->content));
      content = *owned;
      memory = std::move(owned);
    } else {
      blob = decoded.status();
    }
  }
  Result<ArtifactRecord> record = blob.ok() ? decode_record(blob->metadata) : Result<ArtifactRecord>(blob.status());
  if (!checked(key, record, content.size())) return std::optional<MappedArtifact>();
  MappedArtifact a{std::move(record).value(), content, std::move(memory)};
  a.record.stored_size = file.size();
  count_hit(key);
  return std::optional<MappedArtifact>(std::move(a));
}

Status Store::missing(const Hash128& key, const Status& why) {
  if (why.code() != StatusCode::kNotFound) return why;
  // Not stored, or listed in the index but gone: look there, so a lost blob is repaired
  // (its row removed, counted). Only a miss pays for this, and a compile follows it.
  std::lock_guard lock(m_mutex);
  if (!ensure_index_locked().ok()) return {};
  sqlite3_stmt* s = prepare("SELECT op, target FROM artifacts WHERE key = ?");
  if (!s) return {};
  StatementReset reset{s};
  sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
  if (sqlite3_step(s) == SQLITE_ROW) {
    std::string what = column_text(s, 0) + ", " + column_text(s, 1);
    sqlite3_reset(s);
    repair_locked(key, what, "blob missing");
  }
  return {};
}

bool Store::checked(const Hash128& key, const Result<ArtifactRecord>& record, uint64_t content_size) {
  if (record.ok() && record->key == key && content_size == record->size) return true;
  std::string why = !record.ok() ? record.status().message()
                                 : !(record->key == key) ? "it holds the artifact of another key" : "its size is wrong";
  std::lock_guard lock(m_mutex);
  repair_locked(key, record.ok() ? record->op + ", " + record->target : "unknown op", why);
  return false;
}

void Store::count_hit(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  ++m_pending_hits[key];
  if (m_pending_hits.size() >= k_usage_flush_threshold) (void)flush_locked();
}

void Store::repair_locked(const Hash128& key, const std::string& what, const std::string& why) {
  ++m_pending_counters[static_cast<size_t>(Counter::kRepairs)];
  if (m_options.report_damage && !m_damage_reported) {
    m_damage_reported = true;
    m_options.report_damage("cache entry " + key.hex() + " (" + what + ") was damaged (" + why +
                            "); it was removed and will be compiled again (`kiln cache verify` checks them all)");
  }
  ::unlink(blob_path(key).c_str());
  if (ensure_index_locked().ok()) (void)remove_locked(key, /*unlink_blob=*/false);
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
  return {};
}

Status Store::put(const ArtifactRecord& r, std::string_view bytes, Compression compression) {
  ArtifactRecord record = r;
  record.size = bytes.size();
  if (!record.created) record.created = now_seconds();
  EncodedBlob blob = encode_blob(bytes, encode_record(record), compression);
  std::lock_guard lock(m_mutex);
  return publish_locked(record, blob.bytes, blob.content_hash, /*durable=*/true);
}

Result<Artifact> check_blob_file(const Hash128& key, std::string_view file) {
  KILN_ASSIGN_OR_RETURN(DecodedBlob decoded, decode_blob(file, /*with_metadata=*/true));
  KILN_ASSIGN_OR_RETURN(ArtifactRecord record, decode_record(decoded.metadata));
  if (record.key != key) return Status(StatusCode::kDataLoss, "the blob holds artifact " + record.key.hex() + ", not " + key.hex());
  if (record.size != decoded.content.size()) return Status(StatusCode::kDataLoss, "the blob's metadata disagrees with its size");
  return Artifact{std::move(record), std::move(decoded.content)};
}

Result<Artifact> Store::import(const Hash128& key, std::string_view file) {
  KILN_ASSIGN_OR_RETURN(Artifact artifact, check_blob_file(key, file));
  KILN_RETURN_IF_ERROR(import_checked(artifact.record, file));
  return artifact;
}

Status Store::import_checked(const ArtifactRecord& record, std::string_view file) {
  std::lock_guard lock(m_mutex);
  // Not fsynced: its source still has it, and a blob torn by a crash fails its hash (a miss).
  return publish_locked(record, file, blob_content_hash(file), /*durable=*/false);
}

Status Store::publish_locked(const ArtifactRecord& record, std::string_view file, const Hash128& content_hash, bool durable) {
  // A cache whose index this kiln cannot use (a newer one) is not written: its index would not
  // know what was added.
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  std::string path = blob_path(record.key);
  KILN_RETURN_IF_ERROR(make_dirs(dirname_of(path), 0700));
  KILN_RETURN_IF_ERROR(write_file_atomic(path, file, durable));
  // Then the manifest that leads to it (a failure keeps none: the last compile's headers).
  if (has_manifest(record)) KILN_RETURN_IF_ERROR(write_manifest(record.input_key, record.manifest, durable));

  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  // The file at `path` is already the new blob: drop only the old row, if any.
  Status st = remove_locked(record.key, /*unlink_blob=*/false);
  if (st.ok()) st = insert_locked(record, file.size(), content_hash);
  if (st.ok()) st = fold_usage_locked(/*in_transaction=*/true);
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
  auto file = read_file(manifest_path(input_key));
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) return std::optional<std::string>();
    return file.status();
  }
  std::string_view text = file.value();
  // A manifest of another format (a newer kiln's) is not this kiln's to read: a miss.
  if (text.substr(0, k_manifest_header.size()) != k_manifest_header) return std::optional<std::string>();
  return std::optional<std::string>(std::string(text.substr(k_manifest_header.size())));
}

Status Store::write_manifest(const Hash128& input_key, std::string_view manifest, bool durable) {
  std::string path = manifest_path(input_key);
  KILN_RETURN_IF_ERROR(make_dirs(dirname_of(path), 0700));
  return write_file_atomic(path, std::string(k_manifest_header) + std::string(manifest), durable);
}

Status Store::put_manifest(const Hash128& input_key, std::string_view manifest) {
  return write_manifest(input_key, manifest, /*durable=*/false);
}

void Store::count(Counter c, int64_t delta) {
  std::lock_guard lock(m_mutex);
  m_pending_counters[static_cast<size_t>(c)] += delta;
}

void Store::count(const std::string& name, int64_t delta) {
  if (name.empty() || name.size() > 500 || name.find_first_of(" \t\n") != std::string::npos) return;
  std::lock_guard lock(m_mutex);
  m_pending_named[name] += delta;
}

Status Store::flush_usage() {
  std::lock_guard lock(m_mutex);
  return flush_locked();
}

void Store::flush_or_report_locked() {
  // The journal only carries usage figures: a query answers without this process's share
  // rather than not at all (they stay pending and are tried again at close).
  Status st = flush_locked();
  if (!st.ok() && m_options.report_notice && !m_journal_reported) {
    m_journal_reported = true;
    m_options.report_notice(st.message() + "; hit counts of this process are left out");
  }
}

Status Store::flush_locked() {
  bool counters = !m_pending_named.empty();
  for (auto v : m_pending_counters) counters = counters || v != 0;
  if (m_pending_hits.empty() && !counters) return {};
  // One line per key or counter, appended in one write: lines of several processes never mix
  // (O_APPEND), and a hit costs no index transaction (and no fsync).
  std::string lines;
  std::string now = std::to_string(now_seconds());
  for (auto& [key, hits] : m_pending_hits) lines += "H " + key.hex() + " " + std::to_string(hits) + " " + now + "\n";
  for (size_t i = 0; i < m_pending_counters.size(); ++i)
    if (m_pending_counters[i]) lines += std::string("C ") + counter_name(static_cast<Counter>(i)) + " " + std::to_string(m_pending_counters[i]) + "\n";
  for (auto& [name, delta] : m_pending_named)
    if (delta) lines += "C " + name + " " + std::to_string(delta) + "\n";
  std::string journal = m_root + "/" + k_usage_journal;
  int fd = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return errno_status("cannot append to the usage journal " + journal, errno);
  ssize_t n = ::write(fd, lines.data(), lines.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(lines.size())) return io_error("cannot append to the usage journal in " + m_root);
  m_pending_hits.clear();
  m_pending_counters.fill(0);
  m_pending_named.clear();
  return {};
}

Status Store::fold_usage_locked(bool in_transaction) {
  // Journals to fold: the live one, moved aside first so appends go to a new one, and any a
  // folder that died left behind (its rows were not committed: the file was not removed).
  std::string live = m_root + "/" + k_usage_journal;
  std::string moved = live + ".folding." + std::to_string(::getpid()) + "." + std::to_string(now_seconds());
  std::vector<std::string> journals;
  if (::rename(live.c_str(), moved.c_str()) == 0) journals.push_back(moved);
  // Journals left by a folder that died are looked for once per Store: a listing of the cache
  // folder on every write costs more than the write (tools/bench/remote_bench).
  DIR* d = m_orphan_journals_checked ? nullptr : ::opendir(m_root.c_str());
  m_orphan_journals_checked = true;
  if (d) {
    std::string prefix = std::string(k_usage_journal) + ".folding.";
    while (auto* e = ::readdir(d)) {
      std::string name = e->d_name, path = m_root + "/" + name;
      struct stat st{};
      if (name.rfind(prefix, 0) == 0 && path != moved && ::stat(path.c_str(), &st) == 0 && now_seconds() - st.st_mtime > 600)
        journals.push_back(path);
    }
    ::closedir(d);
  }
  if (journals.empty()) return {};
  if (!in_transaction) KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  sqlite3_stmt* h = prepare("UPDATE artifacts SET hits = hits + ?, last_used = max(last_used, ?) WHERE key = ?");
  sqlite3_stmt* c = prepare("INSERT INTO stats(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value");
  std::vector<std::string> unreadable;
  for (auto& path : journals) {
    auto text = read_file(path);
    if (!text.ok()) {
      // Another user's journal in a shared folder, say: its counts are not this process's to
      // drop, so it stays for one that can read it, and this one goes on without them.
      unreadable.push_back(path);
      if (m_options.report_notice && !m_journal_reported) {
        m_journal_reported = true;
        m_options.report_notice("cannot read the usage journal " + path + ": " + read_failure_reason(text.status(), path) +
                                "; its hit counts are left out of the index until a process that can read it folds it");
      }
      continue;
    }
    std::string_view all = text.value();
    while (!all.empty()) {
      size_t nl = all.find('\n');
      if (nl == std::string_view::npos) break;  // a torn last line
      std::string line(all.substr(0, nl));
      all.remove_prefix(nl + 1);
      char kind = 0;
      char name[512];
      long long count = 0, when = 0;
      if (std::sscanf(line.c_str(), "%c %511s %lld %lld", &kind, name, &count, &when) < 3) continue;
      if (kind == 'H') {
        auto key = Hash128::from_hex(name);
        if (!key || !h) continue;
        StatementReset reset{h};
        sqlite3_bind_int64(h, 1, count);
        sqlite3_bind_int64(h, 2, when);
        sqlite3_bind_blob(h, 3, key->bytes.data(), 16, SQLITE_TRANSIENT);
        sqlite3_step(h);
      } else if (kind == 'C' && c) {
        StatementReset reset{c};
        sqlite3_bind_text(c, 1, name, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(c, 2, count);
        sqlite3_step(c);
      }
    }
  }
  if (!in_transaction) KILN_RETURN_IF_ERROR(exec("COMMIT"));
  // Removed once folded: a fold that dies before its commit leaves them for the next. (One
  // that dies between the commit and here counts them twice: these are usage figures.)
  for (auto& path : journals)
    if (std::find(unreadable.begin(), unreadable.end(), path) == unreadable.end()) ::unlink(path.c_str());
  return {};
}

}  // namespace kiln::cache
