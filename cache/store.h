// The local artifact store: blob files named by key under two-character shard folders, the
// header manifest of each input key in a small file beside them, and an index in SQLite (WAL,
// 16-byte BLOB keys in WITHOUT ROWID tables) of what spans many entries.
//
// A lookup reads files only: the manifest (manifests/<xx>/<input key>.manifest) and the blob,
// which carries its own metadata and the hashes of both, checked on every read. The index
// serves statistics, listing, LRU eviction and verification; it is opened on the first write
// or such query, so a process whose ops all hit never opens SQLite (~0.5 ms of a 2 ms process).
//
// The index is a cache of the blobs. Blobs describe themselves (cache/artifact_record.h), so an
// index that is missing, empty while blobs are here, corrupt or another cache's (the folder's
// identity is blobs/.store-id) is set aside and rebuilt from them, each blob checked whole, by
// the first process that opens it, under the store's lock; gc adopts a valid blob the index
// lacks rather than remove it. docs/STORE.md says what survives what.
//
// Publication order makes a crash harmless: a blob is written to a temporary name, fsynced
// and renamed into place, then its manifest the same way, then its index row is inserted: a
// manifest never leads to a blob that was not whole, and an index row never names one. A
// blob that fails its checks on read is a miss, removed with its row so that the next store
// replaces it.
//
// Reads never wait on writes: counters go to a page of memory shared with a file of this
// process's own (cache/counter_page.h), hit counts and "last used" to a usage journal (one
// appended line per key, at least once a second), and both are folded into the index by the
// next process that writes it.
//
// The folder is used only when everyone who can write it is trusted (this user, root, and the
// group cache.shared_group names); one that is not is refused with a warning, and the store opens
// on a private folder instead (cache/store_owner.h). Blobs and manifests are read through the
// folder's descriptor, following no link, and each must belong to a trusted user.
//
// Files: store.cpp (lookups, publication), store_index.cpp (the SQLite index), store_usage.cpp
// (counters and the usage journal), store_admin.cpp (statistics, gc, verify, clear),
// store_owner.cpp (whose the folder is).
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

#include "cache/artifact_record.h"
#include "cache/blob.h"
#include "cache/counter_page.h"
#include "cache/store_owner.h"
#include "support/hash.h"
#include "support/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace kiln::cache {

// An artifact read in place by Store::map: `bytes` views the blob file mapped read-only (or, for
// a compressed blob, its content decoded into `memory`). Copies share the memory; `bytes` stays
// valid while one of them lives.
struct MappedArtifact {
  ArtifactRecord record;
  std::string_view bytes;
  std::shared_ptr<const void> memory;
};

// Counters kept in the index. A process adds to them in its counter page (cache/counter_page.h),
// which outlives it however it ends; the next write to the index folds the pages of processes
// that are gone into it, once each. Compile time is counted twice, as wall time and as the CPU
// time of the compiler's threads and child processes, and each is named so.
enum class Counter {
  kHitsMemory,
  kHitsDisk,
  kHitsRemote,
  kMisses,
  kCompiles,
  kCompileWallUsSpent,
  kCompileCpuUsSpent,
  kCompileWallUsSaved,  // by hits: the wall time their artifact's compile took
  kCompileCpuUsSaved,
  kEvictions,
  kRepairs,
  kAdopted,  // valid blobs the index lacked, given their rows again (an index rebuilt, gc, verify --repair)
  kCount
};
const char* counter_name(Counter c);  // "hits_memory", ...

struct StoreOptions {
  // The cap on every byte the store keeps: its artifacts (blobs, the copies a group of files is
  // handed out as, manifests) and its other files (the index, usage journals, counter pages,
  // staging folders). Past it, the least recently used artifacts are evicted, each whole, to
  // 90% of it (so not every store evicts).
  uint64_t max_bytes = uint64_t{5} << 30;
  // Told, once per Store, when a damaged entry was found and removed (the count goes on in
  // the repairs counter). Null: say nothing.
  std::function<void(const std::string&)> report_damage;
  // Told when opening the index had to do something a person should hear about (a corrupt,
  // lost or foreign index set aside and rebuilt from the blobs; a folder refused, once per
  // process). Null: notice() keeps it (and the log says a refusal at warn level).
  std::function<void(const std::string&)> report_notice;
  // The group that may share the folder (cache.shared_group: then it may be that group's and
  // group-writable, and hold its members' files). Unset: read from the settings, and only when a
  // folder or file proves group-writable or another user's.
  std::optional<std::string> shared_group;
  // A folder refused for whose it is: open a private store instead (and say so, through
  // report_notice), or fail with kPermissionDenied (for commands that act on the folder named:
  // clearing or repairing another folder than the one the user named would surprise them).
  bool private_fallback = true;
};

struct Statistics {
  std::map<std::string, int64_t> counters;  // every Counter by name, and the named ones
  uint64_t artifacts = 0;
  uint64_t bytes = 0;        // what the artifacts take: blob files, copies of groups' files, manifests
  uint64_t blob_bytes = 0;   // of which blob files
  uint64_t raw_bytes = 0;    // the artifacts' content before compression
  uint64_t other_bytes = 0;  // the index, usage journals, counter pages, staging folders
  uint64_t max_bytes = 0;    // the cap on bytes + other_bytes
};

struct GcReport {
  uint64_t evicted = 0, bytes_freed = 0;
  uint64_t bytes_after = 0, other_bytes = 0;  // as Statistics counts them
  uint64_t temporaries_removed = 0;  // leftovers of writers that died (temporaries, staging)
  uint64_t orphans_removed = 0;      // blobs that fail their checks and copies of artifacts gone
  uint64_t adopted = 0;              // valid blobs the index lacked, now indexed
};

struct VerifyReport {
  uint64_t checked = 0, ok = 0, damaged = 0, missing = 0;
  // Blobs the index lacks (each a failure: the cap and gc do not see them); with repair, the
  // valid ones are adopted (given their rows) and the others removed.
  uint64_t unindexed = 0, adopted = 0;
  std::vector<std::string> problems;  // one line per damaged, missing or unindexed artifact
  // Folders of a group of files (cache/file_group.h) that differ from their artifact: each is
  // put back from it on its next use.
  std::vector<std::string> files_differing;
};

class Store {
 public:
  // Creates the folder (mode 0700) if needed, once it and the folder it is made in pass the checks
  // of cache/store_owner.h; a folder that fails is refused (notice() says which, whose and its
  // mode) and a private store opened instead, unless options.private_fallback is false (then
  // kPermissionDenied). The index is opened on first use: then an older
  // one migrates; one that is missing, empty while blobs are here, corrupt, or another cache's
  // is set aside and rebuilt from the blobs (notice() says so, once); and one from a newer kiln
  // is left as it is, writes and queries answering kUnavailable (lookups of what this kiln can
  // read still work).
  static Result<std::unique_ptr<Store>> open(const std::string& root, StoreOptions options = {});
  ~Store();

  // The folder in use: the one asked for, or the private one that replaced it.
  const std::string& root() const { return m_root; }
  // What opening the store or its index had to do that a person should hear about (a folder
  // refused, an index rebuilt); empty normally.
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
  // Compression::kNone keeps the content as it is (for artifacts read through map(), and
  // groups of files, whose copies are counted from it).
  Status put(const ArtifactRecord& record, std::string_view bytes, Compression compression = Compression::kWhenItPays);
  // Stores a blob file as it came from elsewhere (a remote tier, a bundle) once it passes
  // check_blob_file(). Its manifest and index row follow as in put(). Returns the artifact, so
  // the caller need not read it back.
  Result<Artifact> import(const Hash128& key, std::string_view blob_file);
  // The same for a blob file that check_blob_file() has passed as `record` (a bundle checks
  // every object before it imports any, and need not decode each twice).
  Status import_checked(const ArtifactRecord& record, std::string_view blob_file);
  // A blob file as it is stored (for a bundle, a remote tier, a PCH read whole), read as get()
  // reads it: no link followed, and only when it belongs to a trusted user and no one else can
  // write it (else kPermissionDenied). A missing one is kNotFound. Its content is not checked.
  Result<std::string> read_blob_file(const Hash128& key);
  Result<std::optional<std::string>> get_manifest(const Hash128& input_key);
  // Writes the manifest of `input_key` alone (its artifact is already here).
  Status put_manifest(const Hash128& input_key, std::string_view manifest);
  // The index row alone (no blob read, no hit recorded).
  Result<std::optional<ArtifactRecord>> record(const Hash128& key);

  // Adds to a counter in this process's counter page: lock-free, and kept however the process
  // ends (in memory until the Store closes when the page cannot be made: a read-only folder).
  void count(Counter c, int64_t delta = 1);
  // A hit on `key` served without reading its blob (a group's checked files in place,
  // cache/file_group.h): counted like one that read it (hits, last used).
  void count_hit(const Hash128& key);
  // A counter by name (at most 500 bytes; a blank or control character in it is kept as '_'),
  // kept beside the fixed ones: the remote tiers' figures ("remote|<tier>|hits").
  void count(const std::string& name, int64_t delta);
  // Appends pending hit counts and "last used" to the usage journal (done at least once a
  // second while hits come, every 256 keys, and on destruction); the next write to the index
  // folds them in.
  Status flush_usage();

  // ---- administration (store_admin.cpp)
  Result<Statistics> statistics();
  Result<std::vector<ArtifactRecord>> list(const std::string& op = "", const std::string& target = "");
  // By whole key or a unique prefix of its hex.
  Result<std::optional<ArtifactRecord>> find(const std::string& key_prefix);
  // Removes the leftovers of writers that died and what fails its checks, adopts valid blobs the
  // index lacks, then evicts the least recently used artifacts until everything the store keeps
  // fits in `max_bytes`. Nothing that checks out as a valid artifact is removed for not being
  // in the index.
  Result<GcReport> gc(uint64_t max_bytes);
  // Reads every artifact; damaged or missing ones are removed (so they recompile). Blobs the
  // index lacks are reported; with `repair`, the valid ones are adopted and the others removed.
  Result<VerifyReport> verify(bool repair = false);
  Status clear();
  // Re-creates index rows and manifests from the blobs' own metadata (each blob checked whole).
  Result<uint64_t> rebuild_index();

  std::string blob_path(const Hash128& key) const;
  std::string manifest_path(const Hash128& input_key) const;
  uint64_t max_bytes() const { return m_options.max_bytes; }

 private:
  Store(std::string root, StoreOptions options, int root_fd, StoreTrust trust);
  // Where a blob and a manifest lie beneath the root ("blobs/ab/<key>.blob").
  static std::string blob_relative(const Hash128& key);
  static std::string manifest_relative(const Hash128& input_key);
  // The blob of `key` opened beneath the root (no link followed) and checked for whose it is;
  // `st` gets its status.
  Result<int> open_blob(const Hash128& key, struct stat* st);
  // "" when a file read from the store (status `st`) is a trusted user's and no one else can
  // write it; else why not, naming its owner and mode.
  std::string untrusted(const struct stat& st) const;
  // ---- the index (store_index.cpp). The caller holds m_mutex throughout.
  // Opens the index on first use; its failure is remembered.
  Status ensure_index_locked();
  Status open_index();
  void close_index_locked();
  Status init_schema();
  Status migrate(int from_version);
  // Version 4's extra_size of each row, from the manifests and blobs (a migration from 3).
  Status fill_extra_sizes_locked();
  // Sets the index aside as index.sqlite.<why>-<time> (never deleted: someone may want to look;
  // `aside` gets its name) and opens a new, empty one.
  Status set_aside_locked(const std::string& why, std::string* aside);
  // Whether the index belongs to these blobs (blobs/.store-id); a new or migrated index takes
  // the folder's identity.
  Result<bool> index_is_ours_locked();
  // Rebuilds the index from the blobs when it has no rows while blobs are here (a lost, emptied
  // or set-aside index), under the store's lock; `why` says what happened to it, for the notice.
  Status rebuild_if_empty_locked(const std::string& why);
  // After an index operation failed: true when the index proved corrupt and was set aside and
  // rebuilt (do the operation again).
  bool recovered_locked();
  template <class F>
  auto with_recovery_locked(F&& f) -> decltype(f()) {
    auto result = f();
    if (!result.ok() && recovered_locked()) result = f();
    return result;
  }
  Status exec(const char* sql);
  sqlite3_stmt* prepare(const char* sql);
  // `last_used` 0: now.
  Status insert_locked(const ArtifactRecord& r, uint64_t stored_size, uint64_t extra_size, const Hash128& content_hash,
                       int64_t last_used = 0);
  Status remove_locked(const Hash128& key, bool unlink_blob);
  Result<uint64_t> stat_locked(const char* name);
  // Checks the blob files in `blobs` (path, mtime) and gives each valid one its row (and its
  // manifest file), counted as adopted; damaged ones are left to the caller (`damaged` gets their
  // paths when not null).
  Result<uint64_t> adopt_locked(const std::vector<std::pair<std::string, int64_t>>& blobs, std::vector<std::string>* damaged);
  Result<uint64_t> rebuild_index_locked();
  // The store's lock (<root>/index.lock): publications hold it shared, a rebuild exclusively, so a
  // rebuild never mistakes a blob being published for one the index lost.
  Status lock_store_locked(bool exclusive);
  void unlock_store_locked();

  // ---- lookups and publication (store.cpp)
  // Removes an entry found damaged or missing: its blob, its row, counted and reported once,
  // naming the artifact as the index knows it (or its blob's own record says).
  void repair_locked(const Hash128& key, const std::optional<ArtifactRecord>& blob_record, const std::string& why);
  // A blob that could not be read (`why`): ok (a miss) when it is not there, and then if the
  // index lists it, repaired; else the error.
  Status missing(const Hash128& key, const Status& why);
  // True when a blob read as `key` holds that artifact whole; otherwise repairs it (a miss).
  bool checked(const Hash128& key, const Result<ArtifactRecord>& record, uint64_t content_size);
  Status write_manifest(const Hash128& input_key, std::string_view manifest, bool durable);
  // Writes a whole blob file, its manifest and its index row (the caller holds m_mutex).
  // `content`: the artifact's bytes when the caller has them (else read from `file` when it
  // stores them as they are), for what the copies of a group of files take.
  Status publish_locked(const ArtifactRecord& record, std::string_view file, const Hash128& content_hash, bool durable,
                        std::optional<std::string_view> content);
  // Evicts when the artifacts and the store's other files are past the cap.
  Status enforce_cap_locked();

  // ---- usage (store_usage.cpp)
  CounterPage* counter_page();
  void count_locked(Counter c, int64_t delta);
  // Folds the usage journals and the counter pages of processes that are gone into the index,
  // each exactly once, in a transaction of its own. `all_pages`: look for abandoned pages now (a
  // listing of counters/), not only on this Store's first fold.
  Status fold_usage_locked(bool all_pages = false);
  // A journal or counter page to fold: its path relative to the root (its key in the folded
  // table) and, for an abandoned page, its lock.
  struct FoldSource {
    std::string name;
    bool page = false;
    std::optional<AbandonedPage> lock;
  };
  Status fold_sources_locked(std::vector<FoldSource>& sources);
  // This Store's own page, folded and removed at close (when the index is open already).
  void fold_own_page_locked();
  // The counters of the pages of live processes, as they stand (statistics add them).
  std::map<std::string, int64_t> live_counters_locked();
  Status flush_locked();
  // flush_locked(), a failure said once (report_notice) rather than failing a query.
  void flush_or_report_locked();
  // What the store keeps beside its artifacts (the index, journals, counter pages, staging).
  uint64_t other_bytes_locked();

  // ---- administration (store_admin.cpp)
  Result<GcReport> gc_locked(uint64_t target_bytes);

  std::string m_root;
  int m_root_fd = -1;  // m_root, checked when opened: files are opened beneath it
  StoreTrust m_trust;
  StoreOptions m_options;
  sqlite3* m_db = nullptr;
  uint64_t m_index_dev = 0, m_index_ino = 0;  // the file m_db opened
  bool m_index_tried = false;
  Status m_index_status;  // why the index cannot be used, once tried and failed
  std::string m_notice;
  std::mutex m_mutex;
  std::unordered_map<std::string, sqlite3_stmt*> m_statements;
  int m_lock_fd = -1;  // <root>/index.lock
  std::unordered_map<Hash128, uint64_t, Hash128Hasher> m_pending_hits;
  int64_t m_last_flush_ns = 0;  // steady clock; 0 until the first hit
  // Counters kept in memory only when the page cannot be made (written to the journal at close).
  std::array<int64_t, static_cast<size_t>(Counter::kCount)> m_pending_counters{};
  std::map<std::string, int64_t> m_pending_named;
  std::once_flag m_page_once;
  std::unique_ptr<CounterPage> m_page;
  std::array<size_t, static_cast<size_t>(Counter::kCount)> m_page_slots{};
  uint64_t m_other_bytes = 0;  // other_bytes_locked() as last measured
  bool m_other_bytes_known = false;
  bool m_damage_reported = false;
  bool m_orphans_checked = false;  // journals and pages left by processes that died, looked for once
  bool m_journal_reported = false;  // an unreadable usage journal is said once per Store
};

}  // namespace kiln::cache
