#include "cache/bundle.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "cache/remote.h"
#include "support/file_util.h"
#include "support/little_endian.h"
#include "support/mapped_file.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_magic = "KILNPACK";
constexpr uint32_t k_version = 1;
constexpr size_t k_header_size = 48;

struct Entry {
  RemoteObject type;
  Hash128 key;
  std::string label;
  uint64_t size = 0;
  Hash128 hash;
};

// The envelope of one entry, made again from the store's files (pack reads each twice: once
// to index it, once to write it, so the bundle never sits whole in memory).
Result<std::string> envelope_of(Store& store, const Entry& e, const TrustConfig& trust) {
  std::string payload;
  if (e.type == RemoteObject::kArtifact) {
    KILN_ASSIGN_OR_RETURN(payload, store.read_blob_file(e.key));
  } else {
    KILN_ASSIGN_OR_RETURN(auto manifest, store.get_manifest(e.key));
    if (!manifest) return not_found("the manifest of " + e.key.hex() + " is gone");
    payload = std::move(*manifest);
  }
  return seal_object(e.type, e.key, payload, trust, k_bundle_namespace);
}

}  // namespace

Result<PackReport> pack_bundle(Store& store, const std::string& path, const PackFilter& filter, const TrustConfig& trust) {
  KILN_ASSIGN_OR_RETURN(auto records, store.list());
  auto wanted = [](const std::vector<std::string>& list, const std::string& v) {
    return list.empty() || std::find(list.begin(), list.end(), v) != list.end();
  };
  std::vector<Entry> entries;
  std::unordered_set<Hash128, Hash128Hasher> manifests_added;
  for (auto& r : records) {
    if (!wanted(filter.ops, r.op) || !wanted(filter.targets, r.target)) continue;
    std::string label = r.op + " for " + r.target;
    entries.push_back({RemoteObject::kArtifact, r.key, label, 0, {}});
    // The manifest that leads to it, when it does (a later compile of the same inputs with
    // other headers may have replaced it; then this artifact is found only through its key).
    auto manifest = store.get_manifest(r.input_key);
    if (manifest.ok() && manifest->has_value() && manifests_added.insert(r.input_key).second)
      entries.push_back({RemoteObject::kManifest, r.input_key, label, 0, {}});
  }
  PackReport report;
  report.signed_objects = trust.signing_key.has_value() || !trust.secret.empty();
  std::string index;
  for (auto& e : entries) {
    KILN_ASSIGN_OR_RETURN(std::string envelope, envelope_of(store, e, trust));
    e.size = envelope.size();
    e.hash = xxh3_128(envelope);
    index += static_cast<char>(e.type);
    put_hash(index, e.key);
    put_le(index, e.size, 8);
    put_hash(index, e.hash);
    std::string label = e.label.substr(0, 65535);
    put_le(index, label.size(), 2);
    index += label;
    (e.type == RemoteObject::kArtifact ? report.artifacts : report.manifests)++;
  }
  std::string header(k_magic);
  put_le(header, k_version, 4);
  put_le(header, report.signed_objects ? 1 : 0, 4);
  put_le(header, entries.size(), 8);
  put_le(header, index.size(), 8);
  Hash128 index_hash = xxh3_128(index);
  put_hash(header, index_hash);

  std::string target = absolute_path(path);
  std::string temp = target + ".tmp." + std::to_string(::getpid());
  // Created exclusively and not through a link: a name planted beforehand (a link to a file
  // of the user's) fails the pack rather than being written through.
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("create " + temp, errno);
  Status st = write_all(fd, header, temp);
  if (st.ok()) st = write_all(fd, index, temp);
  report.bytes = header.size() + index.size();
  for (size_t i = 0; st.ok() && i < entries.size(); ++i) {
    auto envelope = envelope_of(store, entries[i], trust);
    if (!envelope.ok() || xxh3_128(*envelope) != entries[i].hash) {
      st = envelope.ok() ? io_error(entries[i].label + " changed in the cache while it was packed; pack again") : envelope.status();
      break;
    }
    st = write_all(fd, *envelope, temp);
    report.bytes += envelope->size();
  }
  if (st.ok() && ::fsync(fd) != 0) st = errno_status("fsync " + temp, errno);
  ::close(fd);
  if (st.ok() && ::rename(temp.c_str(), target.c_str()) != 0) st = errno_status("rename " + temp + " to " + target, errno);
  if (!st.ok()) {
    ::unlink(temp.c_str());
    return st;
  }
  return report;
}

Result<UnpackReport> unpack_bundle(Store& store, const std::string& path, const TrustConfig& trust) {
  auto file = MappedFile::open(path);
  if (!file.ok())
    return file.status().code() == StatusCode::kNotFound ? not_found("no bundle at " + path) : file.status();
  std::string_view all = (*file)->view();
  auto refuse = [&](const std::string& why) { return Status(StatusCode::kDataLoss, "bundle " + path + " refused: " + why); };
  if (all.size() < k_header_size || all.substr(0, k_magic.size()) != k_magic)
    return refuse("not a kiln bundle (no KILNPACK header)");
  if (uint64_t v = get_le(all, 8, 4); v != k_version)
    return refuse("format version " + std::to_string(v) + ", this kiln reads version " + std::to_string(k_version));
  UnpackReport report;
  report.signed_objects = (get_le(all, 12, 4) & 1) != 0;
  uint64_t count = get_le(all, 16, 8), index_size = get_le(all, 24, 8);
  if (index_size > all.size() - k_header_size) return refuse("truncated in its index");
  std::string_view index = all.substr(k_header_size, index_size);
  if (xxh3_128(index) != get_hash(all, 32)) return refuse("its index is damaged (hash mismatch)");
  if ((trust.keys() || !trust.secret.empty()) && !report.signed_objects)
    return refuse(std::string("its objects are not signed, and this node loads only signed objects (") + trust.describe() + ")");

  // Everything is checked before anything is imported.
  struct Checked {
    RemoteObject type;
    Hash128 key;
    std::string_view payload;
    std::string label;
    ArtifactRecord record;  // an artifact's metadata, as checked
  };
  std::vector<Checked> checked;
  size_t pos = 0, offset = k_header_size + index_size;
  for (uint64_t i = 0; i < count; ++i) {
    if (index.size() - pos < 43) return refuse("its index ends before object " + std::to_string(i + 1) + " of " + std::to_string(count));
    Checked c;
    c.type = static_cast<RemoteObject>(index[pos]);
    c.key = get_hash(index, pos + 1);
    uint64_t size = get_le(index, pos + 17, 8);
    Hash128 hash = get_hash(index, pos + 25);
    size_t label_size = get_le(index, pos + 41, 2);
    pos += 43;
    if (index.size() - pos < label_size) return refuse("its index ends in the label of object " + std::to_string(i + 1));
    c.label = std::string(index.substr(pos, label_size));
    pos += label_size;
    std::string what = std::string(c.type == RemoteObject::kArtifact ? "artifact " : "manifest ") + c.key.hex() + " (" + c.label +
                       ", object " + std::to_string(i + 1) + " of " + std::to_string(count) + ")";
    if (c.type != RemoteObject::kArtifact && c.type != RemoteObject::kManifest) return refuse("object " + std::to_string(i + 1) + " has an unknown type");
    if (size > all.size() - offset)
      return refuse(what + " is cut off: it ends at byte " + std::to_string(offset + size) + " of a " + std::to_string(all.size()) +
                    "-byte file (truncated?)");
    std::string_view envelope = all.substr(offset, size);
    offset += size;
    if (xxh3_128(envelope) != hash) return refuse(what + " is damaged (hash mismatch)");
    auto payload = open_object(c.type, c.key, envelope, trust, k_bundle_namespace);
    if (!payload.ok()) return refuse(what + ": " + payload.status().message());
    c.payload = *payload;  // a view of the mapped file, not a copy
    if (c.type == RemoteObject::kArtifact) {
      auto artifact = check_blob_file(c.key, c.payload);
      if (!artifact.ok()) return refuse(what + ": " + artifact.status().message());
      c.record = std::move(artifact->record);  // the decoded bytes are dropped: import needs only the file
    }
    // An empty manifest is a real one: a compile that read no header (an OpenCL kernel with none).
    checked.push_back(std::move(c));
  }
  if (pos != index.size() || offset != all.size()) return refuse("it holds more than its index lists (" + std::to_string(all.size() - offset) + " bytes)");

  // Artifacts first, then the manifests that lead to them.
  for (auto& c : checked) {
    if (c.type != RemoteObject::kArtifact) continue;
    if (auto here = store.record(c.key); here.ok() && here->has_value() && ::access(store.blob_path(c.key).c_str(), R_OK) == 0) {
      ++report.already_here;
      continue;
    }
    KILN_RETURN_IF_ERROR(store.import_checked(c.record, c.payload));
    ++report.artifacts;
    report.bytes += c.payload.size();
  }
  for (auto& c : checked) {
    if (c.type != RemoteObject::kManifest) continue;
    KILN_RETURN_IF_ERROR(store.put_manifest(c.key, c.payload));
    ++report.manifests;
  }
  return report;
}

}  // namespace kiln::cache
