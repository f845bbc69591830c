// The store's lookups and publication: blobs read and checked, damage repaired, blobs and their
// manifests written whole (store.h).
#include "cache/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ctime>

#include "cache/blob.h"
#include "cache/counter_page.h"
#include "cache/store_files.h"
#include "cache/store_sql.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::cache {
namespace {

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

// A blob file mapped read-only from a descriptor opened beneath the store (MappedFile maps by
// path, which would follow a link planted on the way).
struct BlobMapping {
  void* data = nullptr;
  size_t size = 0;
  BlobMapping(const BlobMapping&) = delete;
  BlobMapping(void* d, size_t n) : data(d), size(n) {}
  ~BlobMapping() {
    if (data) ::munmap(data, size);
  }
};

}  // namespace

Result<std::unique_ptr<Store>> Store::open(const std::string& root_in, StoreOptions options) {
  if (root_in.empty())
    return invalid_argument("no cache folder: $HOME is unset, this user's passwd entry names no home, and no private folder could be made");
  std::string root = absolute_path(root_in);
  StoreTrust trust = options.shared_group ? StoreTrust(*options.shared_group) : StoreTrust::from_settings();
  Result<int> fd = open_owned_folder(root, trust);
  std::string refusal;
  if (!fd.ok() && fd.status().code() == StatusCode::kPermissionDenied && options.private_fallback) {
    auto own = open_private_store(root);
    if (!own.ok()) return permission_denied(fd.status().message() + "; and no private store could be made: " + own.status().message());
    refusal = fd.status().message() + "; kiln uses the private store " + own->path +
              " instead (make the folder this user's with mode 0700, or to share it with a group, name the group in "
              "cache.shared_group and give the folder to it)";
    root = own->path;
    fd = own->fd;
    trust = StoreTrust();  // a private store is this user's alone
  }
  if (!fd.ok()) return fd.status();
  auto blobs = make_dirs_beneath(fd.value(), "blobs", 0700, root + "/blobs");
  if (!blobs.ok()) {
    ::close(fd.value());
    return blobs.status();
  }
  ::close(blobs.value());
  std::unique_ptr<Store> store(new Store(root, std::move(options), fd.value(), std::move(trust)));
  if (!refusal.empty()) {
    store->m_notice = refusal;
    // Once per process, however many stores open the folder.
    if (first_time_in_process("refused " + root_in + " " + refusal)) {
      if (store->m_options.report_notice) {
        store->m_options.report_notice(refusal);
      } else {
        KILN_LOG_AT(kWarn, "cache", refusal);
      }
    }
  }
  return store;
}

Store::Store(std::string root, StoreOptions options, int root_fd, StoreTrust trust)
    : m_root(std::move(root)), m_root_fd(root_fd), m_trust(std::move(trust)), m_options(std::move(options)) {}

Store::~Store() {
  {
    std::lock_guard lock(m_mutex);
    (void)flush_locked();
    // A process that wrote the index folds its own counters now; one that only hit leaves its
    // page for the next writer (a hit never opens SQLite).
    if (m_db) fold_own_page_locked();
    close_index_locked();
  }
  m_page.reset();
  if (m_lock_fd >= 0) ::close(m_lock_fd);
  if (m_root_fd >= 0) ::close(m_root_fd);
}

std::string Store::blob_relative(const Hash128& key) {
  std::string hex = key.hex();
  return "blobs/" + hex.substr(0, 2) + "/" + hex + ".blob";
}

std::string Store::manifest_relative(const Hash128& input_key) {
  std::string hex = input_key.hex();
  return "manifests/" + hex.substr(0, 2) + "/" + hex + ".manifest";
}

std::string Store::blob_path(const Hash128& key) const { return m_root + "/" + blob_relative(key); }

std::string Store::manifest_path(const Hash128& input_key) const { return m_root + "/" + manifest_relative(input_key); }

std::string Store::untrusted(const struct stat& st) const {
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  std::string why = m_trust.problem(st);
  return why.empty() ? why : "it belongs to " + describe_owner(st) + ", and " + why;
}

Result<int> Store::open_blob(const Hash128& key, struct stat* st) {
  std::string path = blob_path(key);
  KILN_ASSIGN_OR_RETURN(int fd, open_beneath(m_root_fd, blob_relative(key), O_RDONLY | O_NONBLOCK, path));  // no wait on a FIFO
  std::string why = ::fstat(fd, st) == 0 ? untrusted(*st) : "it cannot be examined";
  if (why.empty()) return fd;
  ::close(fd);
  return permission_denied(path + ": " + why);
}

Result<std::string> Store::read_blob_file(const Hash128& key) {
  return read_file_beneath(m_root_fd, blob_relative(key), blob_path(key), [this](const struct stat& st) { return untrusted(st); });
}

Result<std::optional<Artifact>> Store::get(const Hash128& key) {
  // The blob alone: it carries the artifact's record and the hashes of both.
  auto file = read_blob_file(key);
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
  struct stat st{};
  auto opened = open_blob(key, &st);
  if (!opened.ok()) {
    KILN_RETURN_IF_ERROR(missing(key, opened.status()));
    return std::optional<MappedArtifact>();
  }
  // Populated at once: a PCH is read whole by the compile that maps it. Blobs are replaced by
  // rename, never written in place, so a mapped one cannot change (support/mapped_file.h).
  size_t size = static_cast<size_t>(st.st_size);
  void* data = size ? ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, opened.value(), 0) : nullptr;
  int err = errno;
  ::close(opened.value());
  if (data == MAP_FAILED) return errno_status("map " + blob_path(key), err);
  auto mapping = std::make_shared<const BlobMapping>(data, size);
  std::string_view file(static_cast<const char*>(data), size);
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
  if (why.code() == StatusCode::kPermissionDenied) {
    // A link on the way to the blob, or a blob someone untrusted wrote: not read, and removed
    // like a damaged one (a link itself goes, never what it points to), so it is compiled again.
    std::lock_guard lock(m_mutex);
    std::string reason = why.message();
    if (reason.rfind(blob_path(key) + ": ", 0) == 0) reason = reason.substr(blob_path(key).size() + 2);
    repair_locked(key, std::nullopt, reason);
    return {};
  }
  if (why.code() != StatusCode::kNotFound) return why;
  // Not stored, or listed in the index but gone: look there, so a lost blob is repaired
  // (its row removed, counted). Only a miss pays for this, and a compile follows it.
  std::lock_guard lock(m_mutex);
  if (!ensure_index_locked().ok()) return {};
  sqlite3_stmt* s = prepare("SELECT 1 FROM artifacts WHERE key = ?");
  if (!s) return {};
  StatementReset reset{s};
  sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
  if (sqlite3_step(s) == SQLITE_ROW) {
    sqlite3_reset(s);
    repair_locked(key, std::nullopt, "blob missing");
  }
  return {};
}

bool Store::checked(const Hash128& key, const Result<ArtifactRecord>& record, uint64_t content_size) {
  if (record.ok() && record->key == key && content_size == record->size) return true;
  std::string why = !record.ok() ? record.status().message()
                                 : !(record->key == key) ? "it holds the artifact of another key" : "its size is wrong";
  std::lock_guard lock(m_mutex);
  std::optional<ArtifactRecord> own;
  if (record.ok() && record->key == key) own = record.value();  // its metadata is whole, and its own
  repair_locked(key, own, why);
  return false;
}

void Store::repair_locked(const Hash128& key, const std::optional<ArtifactRecord>& blob_record, const std::string& why) {
  count_locked(Counter::kRepairs, 1);
  bool indexed = ensure_index_locked().ok();
  if (m_options.report_damage && !m_damage_reported) {
    m_damage_reported = true;
    // Named as the index knows it (a damaged blob's own metadata may be what is damaged): the
    // kernel or op and its target.
    std::string what = blob_record ? blob_record->op + ", " + blob_record->target : "";
    if (indexed) {
      sqlite3_stmt* s = prepare("SELECT op, target, kind FROM artifacts WHERE key = ?");
      StatementReset reset{s};
      if (s) sqlite3_bind_blob(s, 1, key.bytes.data(), 16, SQLITE_STATIC);
      if (s && sqlite3_step(s) == SQLITE_ROW) what = column_text(s, 2) + " " + column_text(s, 0) + ", " + column_text(s, 1);
    }
    if (what.empty()) what = "not in the index; its metadata unreadable";
    m_options.report_damage("cache entry " + key.hex() + " (" + what + ") was damaged (" + why +
                            "); it was removed and will be compiled again (`kiln cache verify` checks them all)");
  }
  remove_beneath(m_root_fd, blob_relative(key));
  remove_placed_files(m_root, key);
  if (indexed) (void)remove_locked(key, /*unlink_blob=*/false);
}

Status Store::put(const ArtifactRecord& r, std::string_view bytes, Compression compression) {
  ArtifactRecord record = r;
  record.size = bytes.size();
  if (!record.created) record.created = now_seconds();
  EncodedBlob blob = encode_blob(bytes, encode_record(record), compression);
  std::lock_guard lock(m_mutex);
  return publish_locked(record, blob.bytes, blob.content_hash, /*durable=*/true, bytes);
}

Result<Artifact> Store::import(const Hash128& key, std::string_view file) {
  KILN_ASSIGN_OR_RETURN(Artifact artifact, check_blob_file(key, file));
  KILN_RETURN_IF_ERROR(import_checked(artifact.record, file));
  return artifact;
}

Status Store::import_checked(const ArtifactRecord& record, std::string_view file) {
  std::lock_guard lock(m_mutex);
  // Not fsynced: its source still has it, and a blob torn by a crash fails its hash (a miss).
  // Its content counts for the cap when it is a group of files (stored as it is, so in place).
  std::optional<std::string_view> content;
  if (auto in_place = decode_blob_in_place(file); in_place.ok() && in_place->content) content = *in_place->content;
  return publish_locked(record, file, blob_content_hash(file), /*durable=*/false, content);
}

Status Store::publish_locked(const ArtifactRecord& record, std::string_view file, const Hash128& content_hash, bool durable,
                             std::optional<std::string_view> content) {
  // A cache whose index this kiln cannot use (a newer one) is not written: its index would not
  // know what was added.
  KILN_RETURN_IF_ERROR(ensure_index_locked());
  // Shared with other publications, exclusive of a rebuild: a blob written here gets its row
  // before any rebuild can look.
  KILN_RETURN_IF_ERROR(lock_store_locked(/*exclusive=*/false));
  Status st = [&]() -> Status {
    // Its shard folder a real one of this store (a link planted there is replaced, not followed).
    std::string relative = blob_relative(record.key), path = blob_path(record.key);
    KILN_ASSIGN_OR_RETURN(int shard, make_dirs_beneath(m_root_fd, dirname_of(relative), 0700, dirname_of(path)));
    Status written = write_file_atomic_at(shard, relative.substr(relative.rfind('/') + 1), file, durable, path);
    ::close(shard);
    KILN_RETURN_IF_ERROR(written);
    // Then the manifest that leads to it (a failure keeps none: the last compile's headers).
    if (has_manifest(record)) KILN_RETURN_IF_ERROR(write_manifest(record.input_key, record.manifest, durable));
    return with_recovery_locked([&]() -> Status {
      KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
      // The file at `path` is already the new blob: drop only the old row, if any.
      Status in = remove_locked(record.key, /*unlink_blob=*/false);
      if (in.ok()) in = insert_locked(record, file.size(), extra_size_of(record, content), content_hash);
      if (!in.ok()) {
        (void)exec("ROLLBACK");
        return in;
      }
      return exec("COMMIT");
    });
  }();
  unlock_store_locked();
  KILN_RETURN_IF_ERROR(st);
  // The usage figures others left, while the index is open anyway (a failure costs no artifact).
  if (Status folded = fold_usage_locked(); !folded.ok() && m_options.report_notice && !m_journal_reported) {
    m_journal_reported = true;
    m_options.report_notice("cannot fold the usage figures into the cache index: " + folded.message());
  }
  return enforce_cap_locked();
}

Status Store::enforce_cap_locked() {
  KILN_ASSIGN_OR_RETURN(uint64_t bytes, stat_locked("bytes"));
  // The store's other files are measured once per Store and again whenever the total nears the
  // cap (a listing of the staging and counter folders: not on every write).
  if (!m_other_bytes_known || bytes + m_other_bytes > m_options.max_bytes / 10 * 9) {
    m_other_bytes = other_bytes_locked();
    m_other_bytes_known = true;
  }
  if (bytes + m_other_bytes <= m_options.max_bytes) return {};
  uint64_t target = m_options.max_bytes / 10 * 9;
  return gc_locked(target > m_other_bytes ? target - m_other_bytes : 0).status();
}

Result<std::optional<std::string>> Store::get_manifest(const Hash128& input_key) {
  auto file = read_file_beneath(m_root_fd, manifest_relative(input_key), manifest_path(input_key),
                                [this](const struct stat& st) { return untrusted(st); });
  if (!file.ok()) {
    // A link on the way is not followed: a miss, as is a manifest someone untrusted wrote (it
    // could lead a lookup to another artifact). The next compile writes it again.
    if (file.status().code() == StatusCode::kNotFound || file.status().code() == StatusCode::kPermissionDenied)
      return std::optional<std::string>();
    return file.status();
  }
  std::string_view text = file.value();
  // A manifest of another format (a newer kiln's) is not this kiln's to read: a miss.
  if (text.substr(0, k_manifest_header.size()) != k_manifest_header) return std::optional<std::string>();
  return std::optional<std::string>(std::string(text.substr(k_manifest_header.size())));
}

Status Store::write_manifest(const Hash128& input_key, std::string_view manifest, bool durable) {
  std::string relative = manifest_relative(input_key), path = manifest_path(input_key);
  KILN_ASSIGN_OR_RETURN(int shard, make_dirs_beneath(m_root_fd, dirname_of(relative), 0700, dirname_of(path)));
  Status written = write_file_atomic_at(shard, relative.substr(relative.rfind('/') + 1),
                                        std::string(k_manifest_header) + std::string(manifest), durable, path);
  ::close(shard);
  return written;
}

Status Store::put_manifest(const Hash128& input_key, std::string_view manifest) {
  return write_manifest(input_key, manifest, /*durable=*/false);
}

}  // namespace kiln::cache
