// SQL text and small SQLite helpers shared by the store's sources (private to cache/).
#pragma once

#include <sqlite3.h>

#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::cache {

inline constexpr int k_index_schema_version = 4;

// A fresh index, at the current version. (Version 3 keeps header manifests in files beside the
// blobs, so a lookup needs no SQLite: the manifests table of version 2 is gone. Version 4 counts
// what an artifact keeps beside its blob (extra_size: its copies and manifest), keeps the CPU time
// of its compile, names the folder it belongs to (meta store_id), and remembers which journals
// and counter pages it has folded in (folded), so that none is counted twice.)
inline constexpr const char* k_schema_v4 =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS artifacts("
    "  key BLOB PRIMARY KEY, op TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,"
    "  size INTEGER NOT NULL, stored_size INTEGER NOT NULL, content_hash BLOB NOT NULL,"
    "  toolchain TEXT NOT NULL, entry_points TEXT NOT NULL, created INTEGER NOT NULL,"
    "  last_used INTEGER NOT NULL, hits INTEGER NOT NULL DEFAULT 0, compile_ms REAL NOT NULL,"
    "  log TEXT NOT NULL, components TEXT NOT NULL DEFAULT '', input_key BLOB,"
    "  extra_size INTEGER NOT NULL DEFAULT 0, compile_cpu_ms REAL NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS artifacts_by_op ON artifacts(op, target);"
    "CREATE INDEX IF NOT EXISTS artifacts_by_last_used ON artifacts(last_used);"
    "CREATE INDEX IF NOT EXISTS artifacts_by_input_key ON artifacts(input_key);"
    "CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS folded(name TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO stats(name, value) VALUES('bytes', 0);"
    "INSERT OR REPLACE INTO meta(name, value) VALUES('schema_version', '4');";

// Version 1 (the walking skeleton) had no key components, input keys or counters.
inline constexpr const char* k_migrate_v1_to_v2 =
    "ALTER TABLE artifacts ADD COLUMN components TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE artifacts ADD COLUMN input_key BLOB;"
    "CREATE INDEX IF NOT EXISTS artifacts_by_last_used ON artifacts(last_used);"
    "CREATE TABLE IF NOT EXISTS stats(name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT OR REPLACE INTO stats(name, value) SELECT 'bytes', coalesce(sum(stored_size), 0) FROM artifacts;"
    "INSERT OR REPLACE INTO meta(name, value) VALUES('schema_version', '2');";

// Version 2 kept manifests in the index; Store::migrate writes them out as files first.
inline constexpr const char* k_migrate_v2_to_v3 =
    "DROP TABLE IF EXISTS manifests;"
    "CREATE INDEX IF NOT EXISTS artifacts_by_input_key ON artifacts(input_key);"
    "INSERT OR REPLACE INTO meta(name, value) VALUES('schema_version', '3');";

// Version 3 counted blob files alone and compile time as one figure (the wall time). Store::migrate
// then fills extra_size from the blobs and recomputes the bytes counter.
inline constexpr const char* k_migrate_v3_to_v4 =
    "ALTER TABLE artifacts ADD COLUMN extra_size INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE artifacts ADD COLUMN compile_cpu_ms REAL NOT NULL DEFAULT 0;"
    "CREATE TABLE IF NOT EXISTS folded(name TEXT PRIMARY KEY, at INTEGER NOT NULL) WITHOUT ROWID;"
    "UPDATE OR REPLACE stats SET name = 'compile_wall_us_spent' WHERE name = 'compile_us_spent';"
    "UPDATE OR REPLACE stats SET name = 'compile_wall_us_saved' WHERE name = 'compile_us_saved';"
    "INSERT OR REPLACE INTO meta(name, value) VALUES('schema_version', '4');";

inline Status sql_error(sqlite3* db, const std::string& what) {
  return io_error("sqlite: " + what + ": " + (db ? sqlite3_errmsg(db) : "cannot open"));
}

// Resets a cached statement however the scope is left.
struct StatementReset {
  sqlite3_stmt* s;
  ~StatementReset() {
    if (s) {
      sqlite3_reset(s);
      sqlite3_clear_bindings(s);
    }
  }
};

inline std::string column_text(sqlite3_stmt* s, int i) {
  auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, i))) : "";
}

inline void bind_text(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
}

}  // namespace kiln::cache
