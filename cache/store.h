// The local artifact store: blob files named by key under two-character shard folders, and
// an index in SQLite (WAL, 16-byte BLOB keys in WITHOUT ROWID tables).
//
// Publication order makes a crash harmless: a blob is written to a temporary name, fsynced
// and renamed into place before its index row is inserted, so an index row never names a
// blob that was not whole. A blob that fails its checks on read is a miss, and is removed so
// that the next store replaces it.
//
// Thread-safety: one Store may be used from many threads (calls are serialised on its own
// connection). Several processes may open the same folder at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "support/hash.h"
#include "support/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::cache {

// What the index says about an artifact; the bytes are in the blob.
struct ArtifactRecord {
  Hash128 key;
  std::string op;
  std::string target;
  std::string kind;          // "host-so", ...
  std::string toolchain;
  std::string entry_points;  // opaque to the cache: the writer's encoding
  double compile_ms = 0;
  std::string log;           // compiler output worth keeping
  uint64_t size = 0;         // raw bytes
  int64_t created = 0;       // unix seconds
};

struct Artifact {
  ArtifactRecord record;
  std::string bytes;
};

class Store {
 public:
  // $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
  static std::string default_root();
  // Creates the folder (mode 0700) and the index if needed.
  static Result<std::unique_ptr<Store>> open(const std::string& root);
  ~Store();

  const std::string& root() const { return m_root; }

  // A miss, or a blob that fails its checks (then removed and counted), is nullopt.
  Result<std::optional<Artifact>> get(const Hash128& key);
  // Publishes blob then index row; storing an existing key replaces it.
  Status put(const ArtifactRecord& record, std::string_view bytes);

  // Header manifests: an input key (everything but the headers) -> what the last compile
  // of those inputs read, in the writer's encoding.
  Result<std::optional<std::string>> get_manifest(const Hash128& input_key);
  Status put_manifest(const Hash128& input_key, std::string_view op, std::string_view manifest);

  Result<uint64_t> artifact_count();
  uint64_t repairs() const { return m_repairs; }
  std::string blob_path(const Hash128& key) const;

  // Writes pending "last used" and hit counts (also done on destruction).
  Status flush_usage();

 private:
  Store(std::string root, sqlite3* db) : m_root(std::move(root)), m_db(db) {}
  Status init_schema();
  Status exec(const char* sql);
  sqlite3_stmt* prepare(const char* sql);
  Status remove_locked(const Hash128& key);

  std::string m_root;
  sqlite3* m_db;
  std::mutex m_mutex;
  std::unordered_map<std::string, sqlite3_stmt*> m_statements;
  // Hits since the last flush: keeping "last used" off the hit path (a write per lookup
  // costs 17.7 us median with 33 ms stalls at WAL checkpoints, TOOLCHAIN-FACTS.md).
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> m_pending_hits;
  uint64_t m_repairs = 0;
};

}  // namespace kiln::cache
