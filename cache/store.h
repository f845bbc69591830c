// The local artifact store: blob files named by key under two-character shard folders, the
// header manifest of each input key in a small file beside them, and an index in SQLite (WAL,
// 16-byte BLOB keys in WITHOUT ROWID tables) of what spans many entries.
//
// A lookup reads files only: the manifest (manifests/<xx>/<input key>.manifest) and the blob,
// which carries its own metadata and the hashes of both, checked on every read. The index
// serves statistics, listing, LRU eviction and verification; it is opened on the first write
// or such query, so a process whose ops all hit never opens SQLite (~0.5 ms of a 2 ms process).
//
// Publication order makes a crash harmless: a blob is written to a temporary name, fsynced
// and renamed into place, then its manifest the same way, then its index row is inserted: a
// manifest never leads to a blob that was not whole, and an index row never names one. A
// blob that fails its checks on read is a miss, removed with its row so that the next store
// replaces it. Blobs carry their own metadata, so a corrupt index is set aside and rebuilt
// from them.
//
// Reads never wait on writes: hit counts, "last used" and counters go to a usage journal (one
// appended line each, no SQLite) when the Store closes or every 256 keys, and are folded into
// the index by the next process that writes it.
//
// Thread-safety: one Store may be used from many threads (calls are serialised on its own
// connection). Many processes may open the same folder at once.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/blob.h"
#include "support/hash.h"
#include "support/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::cache {

// What the index says about an artifact; the bytes are in the blob.
struct ArtifactRecord {
  Hash128 key;
  Hash128 input_key;         // the inputs before headers; its manifest leads to `key`
  std::string manifest;      // the headers the compile read (opaque: the writer's encoding)
  std::string op;
  std::string target;
  std::string kind;          // "host-so", ..., or "compile-error" for a cached failure
  std::string toolchain;
  std::string entry_points;  // opaque: the writer's encoding
  std::string components;    // opaque: what the key was made of, for `kiln cache explain`
  std::string log;           // compiler output worth keeping
  double compile_ms = 0;
  uint64_t size = 0;         // raw bytes
  int64_t created = 0;       // unix seconds
  // Filled by reads.
  uint64_t stored_size = 0;  // the blob file
  int64_t last_used = 0;
  uint64_t hits = 0;
};

// Whether a manifest leads to the artifact: every compile's, even an empty one (no header read),
// but not a compile error's without one, nor an artifact kept under its caller's key (key ==
// input_key, no manifest: another compiler's, a device's derived code), which is looked up by
// its key alone.
inline bool has_manifest(const ArtifactRecord& r) {
  if (r.input_key == r.key && r.manifest.empty()) return false;
  return !r.manifest.empty() || r.kind != "compile-error";
}

// Binary, length-prefixed; the blob's metadata section.
std::string encode_record(const ArtifactRecord& r);
Result<ArtifactRecord> decode_record(std::string_view bytes);

struct Artifact {
  ArtifactRecord record;
  std::string bytes;
};

// An artifact read in place by Store::map: `bytes` views the blob file mapped read-only (or, for
// a compressed blob, its content decoded into `memory`). Copies share the memory; `bytes` stays
// valid while one of them lives.
struct MappedArtifact {
  ArtifactRecord record;
  std::string_view bytes;
  std::shared_ptr<const void> memory;
};

// A whole blob file from elsewhere, checked as a hit checks it and more: both hashes, its
// metadata, and that it is the artifact `key` (a swapped blob is kDataLoss).
Result<Artifact> check_blob_file(const Hash128& key, std::string_view file);

// Counters kept in the index, added to in memory and written in batches.
enum class Counter { kHitsMemory, kHitsDisk, kHitsRemote, kMisses, kCompiles, kCompileUsSpent, kCompileUsSaved, kEvictions, kRepairs, kCount };
const char* counter_name(Counter c);  // "hits_memory", ...

struct StoreOptions {
  // Evict least recently used artifacts past this (to 90% of it, so not every store evicts).
  uint64_t max_bytes = uint64_t{5} << 30;
  // Told, once per Store, when a damaged entry was found and removed (the count goes on in
  // the repairs counter). Null: say nothing.
  std::function<void(const std::string&)> report_damage;
  // Told when opening the index had to do something a person should hear about (a corrupt
  // index set aside and rebuilt). Null: notice() keeps it.
  std::function<void(const std::string&)> report_notice;
};


struct Statistics {
  std::map<std::string, int64_t> counters;  // every Counter by name
  uint64_t artifacts = 0;
  uint64_t bytes = 0;       // blob files
  uint64_t raw_bytes = 0;   // content before compression
  uint64_t max_bytes = 0;
};

struct GcReport {
  uint64_t evicted = 0, bytes_freed = 0, bytes_after = 0;
  uint64_t temporaries_removed = 0, orphans_removed = 0;
};

struct VerifyReport {
  uint64_t checked = 0, ok = 0, damaged = 0, missing = 0, orphans = 0;
  std::vector<std::string> problems;  // one line per damaged or missing artifact
  // Folders of a group of files (cache/file_group.h) that differ from their artifact: each is
  // put back from it on its next use.
  std::vector<std::string> files_differing;
};

class Store {
 public:
  // Creates the folder (mode 0700) if needed. The index is opened on first use: then an older
  // one migrates, a corrupt one is set aside and rebuilt (notice() says so), and one from a
  // newer kiln is left as it is, writes and queries answering kUnavailable (lookups of what
  // this kiln can read still work).
  static Result<std::unique_ptr<Store>> open(const std::string& root, StoreOptions options = {});
  ~Store();

  const std::string& root() const { return m_root; }
  // What open() had to do that a person should hear about; empty normally.
  const std::string& notice() const { return m_notice; }

  // A miss, or a blob that fails its checks (then removed and counted), is nullopt. Reads the
  // blob file only; its record comes from the blob's own metadata (no last_used or hits).
  Result<std::optional<Artifact>> get(const Hash128& key);
  // get() without the copy: an artifact stored uncompressed is checked in its mapped blob file
  // and returned in place. For large artifacts read on every compile that uses them (a 32 MB
  // PCH: read, copied and checked in 9-48 ms on this VM, mapped and checked in ~2 ms).
  Result<std::optional<MappedArtifact>> map(const Hash128& key);
  // Publishes the blob, then in one transaction the index row and the input key's
  // manifest; then evicts if the store is past its cap. Storing a key again replaces it.
  // Compression::kNone keeps the content as it is (for artifacts read through map()).
  Status put(const ArtifactRecord& record, std::string_view bytes, Compression compression = Compression::kWhenItPays);
  // Stores a blob file as it came from elsewhere (a remote tier, a bundle) once it passes
  // check_blob_file(). Its manifest and index row follow as in put(). Returns the artifact, so
  // the caller need not read it back.
  Result<Artifact> import(const Hash128& key, std::string_view blob_file);
  // The same for a blob file that check_blob_file() has passed as `record` (a bundle checks
  // every object before it imports any, and need not decode each twice).
  Status import_checked(const ArtifactRecord& record, std::string_view blob_file);
  Result<std::optional<std::string>> get_manifest(const Hash128& input_key);
  // Writes the manifest of `input_key` alone (its artifact is already here).
  Status put_manifest(const Hash128& input_key, std::string_view manifest);
  // The index row alone (no blob read, no hit recorded).
  Result<std::optional<ArtifactRecord>> record(const Hash128& key);

  void count(Counter c, int64_t delta = 1);
  // A hit on `key` served without reading its blob (a group's checked files in place,
  // cache/file_group.h): counted like one that read it (hits, last used).
  void count_hit(const Hash128& key);
  // A counter by name (no whitespace, at most 500 bytes), kept beside the fixed ones: the
  // remote tiers' figures ("remote|<tier>|hits").
  void count(const std::string& name, int64_t delta);
  // Appends pending hit counts, "last used" and counters to the usage journal (also done on
  // destruction); the next write to the index folds them in.
  Status flush_usage();

  // ---- administration (store_admin.cpp)
  Result<Statistics> statistics();
  Result<std::vector<ArtifactRecord>> list(const std::string& op = "", const std::string& target = "");
  // By whole key or a unique prefix of its hex.
  Result<std::optional<ArtifactRecord>> find(const std::string& key_prefix);
  Result<GcReport> gc(uint64_t max_bytes);
  // Reads every artifact; damaged or missing ones are removed (so they recompile).
  Result<VerifyReport> verify();
  Status clear();
  // Re-creates index rows and manifests from the blobs' own metadata.
  Result<uint64_t> rebuild_index();

  std::string blob_path(const Hash128& key) const;
  std::string manifest_path(const Hash128& input_key) const;
  uint64_t max_bytes() const { return m_options.max_bytes; }

 private:
  Store(std::string root, StoreOptions options) : m_root(std::move(root)), m_options(options) {}
  // Opens the index on first use (the caller holds m_mutex); its failure is remembered.
  Status ensure_index_locked();
  Status open_index();
  Status init_schema();
  // Folds the usage journal into the index, in a transaction of its own or the caller's.
  Status fold_usage_locked(bool in_transaction);
  // Removes an entry found damaged or missing: its blob, its row, counted and reported once.
  void repair_locked(const Hash128& key, const std::string& what, const std::string& why);
  // A blob that could not be read (`why`): ok (a miss) when it is not there, and then if the
  // index lists it, repaired; else the error.
  Status missing(const Hash128& key, const Status& why);
  // True when a blob read as `key` holds that artifact whole; otherwise repairs it (a miss).
  bool checked(const Hash128& key, const Result<ArtifactRecord>& record, uint64_t content_size);
  Status migrate(int from_version);
  Status exec(const char* sql);
  sqlite3_stmt* prepare(const char* sql);
  Status insert_locked(const ArtifactRecord& r, uint64_t stored_size, const Hash128& content_hash);
  Status write_manifest(const Hash128& input_key, std::string_view manifest, bool durable);
  // Writes a whole blob file, its manifest and its index row (the caller holds m_mutex).
  Status publish_locked(const ArtifactRecord& record, std::string_view file, const Hash128& content_hash, bool durable);
  Result<uint64_t> rebuild_index_locked();
  Status remove_locked(const Hash128& key, bool unlink_blob);
  Status flush_locked();
  // flush_locked(), a failure said once (report_notice) rather than failing a query.
  void flush_or_report_locked();
  Result<GcReport> gc_locked(uint64_t target_bytes);
  Result<uint64_t> stat_locked(const char* name);

  std::string m_root;
  StoreOptions m_options;
  sqlite3* m_db = nullptr;
  bool m_index_tried = false;
  Status m_index_status;  // why the index cannot be used, once tried and failed
  std::string m_notice;
  std::mutex m_mutex;
  std::unordered_map<std::string, sqlite3_stmt*> m_statements;
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> m_pending_hits;
  std::array<int64_t, static_cast<size_t>(Counter::kCount)> m_pending_counters{};
  std::map<std::string, int64_t> m_pending_named;
  bool m_damage_reported = false;
  bool m_orphan_journals_checked = false;
  bool m_journal_reported = false;  // an unreadable usage journal is said once per Store
};

}  // namespace kiln::cache
