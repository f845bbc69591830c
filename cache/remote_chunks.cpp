// Large artifacts as content-addressed chunks spread over a tier's endpoints (remote.h).
//
// The artifact's object holds a chunk list instead of the artifact:
//
//   offset  size  field
//   0       8     magic "KILNCHK1"
//   8       8     the artifact's size (little-endian)
//   16      4     the number of chunks (little-endian)
//   20      4     zero
//   24      16    XXH3-128 of the whole artifact
//   40      32    HMAC-SHA256(secret, "kiln-chunks-v1" | key | artifact), or zeros unsigned
//   72      20*n  per chunk: XXH3-128 of its bytes (its name), its size (4 bytes)
//
// The list travels in a signed envelope like any object, and with a secret it carries an HMAC
// of the whole artifact too: a chunk's name (a fast, not a cryptographic, hash) proves it
// arrived as written, the HMAC that nobody without the secret chose it. Each chunk is checked
// on arrival (refetched once if it fails), the whole after it is put together; a reader gets
// the artifact whole and checked, or not at all.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "cache/hmac.h"
#include "cache/remote.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_list_magic = "KILNCHK1";
constexpr size_t k_list_header = 72;
constexpr size_t k_list_entry = 20;
constexpr std::string_view k_whole_tag_domain = "kiln-chunks-v1";

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>(v >> (8 * i));
}
void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>(v >> (8 * i));
}
uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

struct ChunkRef {
  Hash128 hash;
  size_t offset = 0, size = 0;
};

struct ChunkList {
  uint64_t total = 0;
  Hash128 whole;
  HmacTag tag{};
  bool is_signed = false;
  std::vector<ChunkRef> chunks;
};

Result<ChunkList> parse_list(std::string_view list) {
  auto bad = [&](const std::string& why) { return Status(StatusCode::kDataLoss, "a malformed chunk list (" + why + ")"); };
  if (list.size() < k_list_header || list.substr(0, k_list_magic.size()) != k_list_magic) return bad("no KILNCHK1 header");
  ChunkList out;
  out.total = get_u64(list.data() + 8);
  uint32_t count = get_u32(list.data() + 16);
  if (list.size() != k_list_header + size_t{count} * k_list_entry)
    return bad(std::to_string(list.size()) + " bytes for " + std::to_string(count) + " chunks");
  std::memcpy(out.whole.bytes.data(), list.data() + 24, 16);
  std::memcpy(out.tag.data(), list.data() + 40, 32);
  for (uint8_t b : out.tag) out.is_signed = out.is_signed || b != 0;
  size_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const char* e = list.data() + k_list_header + size_t{i} * k_list_entry;
    ChunkRef c;
    std::memcpy(c.hash.bytes.data(), e, 16);
    c.offset = offset;
    c.size = get_u32(e + 16);
    if (c.size == 0) return bad("chunk " + std::to_string(i) + " is empty");
    offset += c.size;
    out.chunks.push_back(c);
  }
  if (offset != out.total) return bad("its chunks hold " + std::to_string(offset) + " bytes, it says " + std::to_string(out.total));
  return out;
}

// Runs `work(i)` for i in [0, n) on up to `threads` threads and returns the first failure; after
// it, hands out no more work unless `keep_going`.
Status parallel_for(size_t n, int threads, const std::function<Status(size_t)>& work, bool keep_going = false) {
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  Status first;
  auto run = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < n;) {
      Status st = work(i);
      if (!st.ok()) {
        std::lock_guard lock(mutex);
        if (first.ok()) first = st;
        failed = !keep_going;
      }
    }
  };
  size_t count = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(run);
  run();
  for (auto& t : pool) t.join();
  return first;
}

}  // namespace

bool is_chunk_list(std::string_view payload) { return payload.substr(0, k_list_magic.size()) == k_list_magic; }

Result<std::string> RemoteTiers::put_chunks(Tier& tier, const Hash128& key, std::string_view payload) {
  size_t size = std::max<size_t>(1, m_options.chunk_bytes);
  std::vector<ChunkRef> chunks;
  for (size_t offset = 0; offset < payload.size(); offset += size) {
    ChunkRef c;
    c.offset = offset;
    c.size = std::min(size, payload.size() - offset);
    c.hash = xxh3_128(payload.substr(c.offset, c.size));
    chunks.push_back(c);
  }
  KILN_RETURN_IF_ERROR(parallel_for(chunks.size(), m_options.chunk_parallel, [&](size_t i) -> Status {
    const ChunkRef& c = chunks[i];
    std::string name = object_name(RemoteObject::kChunk, c.hash);
    auto put = with_failover(tier, chunk_order(tier, key, i), [&](RemoteEndpoint& e) -> Result<bool> {
      KILN_RETURN_IF_ERROR(e.put(name, payload.substr(c.offset, c.size)));
      return true;
    });
    if (!put.ok()) return put.status();
    tier.add(TierCounter::kBytesOut, static_cast<int64_t>(c.size));
    return {};
  }));
  std::string list(k_list_magic);
  put_u64(list, payload.size());
  put_u32(list, static_cast<uint32_t>(chunks.size()));
  put_u32(list, 0);
  Hash128 whole = xxh3_128(payload);
  list.append(reinterpret_cast<const char*>(whole.bytes.data()), 16);
  HmacTag tag{};
  if (!m_options.secret.empty()) {
    std::string_view key_bytes(reinterpret_cast<const char*>(key.bytes.data()), 16);
    KILN_ASSIGN_OR_RETURN(tag, hmac_sha256(m_options.secret, {k_whole_tag_domain, key_bytes, payload}));
  }
  list.append(reinterpret_cast<const char*>(tag.data()), tag.size());
  for (auto& c : chunks) {
    list.append(reinterpret_cast<const char*>(c.hash.bytes.data()), 16);
    put_u32(list, static_cast<uint32_t>(c.size));
  }
  return list;
}

Result<std::string> RemoteTiers::assemble(Tier& tier, const Hash128& key, std::string_view list_bytes) {
  KILN_ASSIGN_OR_RETURN(ChunkList list, parse_list(list_bytes));
  if (!m_options.secret.empty() && !list.is_signed)
    return Status(StatusCode::kDataLoss, "its chunk list carries no signature of the whole, and this node requires signatures");
  std::string out(list.total, '\0');
  std::vector<char> have(list.chunks.size(), 0);
  auto kept_path = [&](const Hash128& h) { return m_options.spool_dir + "/" + h.hex(); };
  // What an earlier, failed fetch kept: used when it still checks.
  for (size_t i = 0; i < list.chunks.size(); ++i) {
    const ChunkRef& c = list.chunks[i];
    std::string kept;
    if (!m_options.spool_dir.empty()) {
      if (auto f = read_file(kept_path(c.hash)); f.ok()) kept = std::move(f).value();
    } else {
      std::lock_guard lock(m_spool_mutex);
      if (auto it = m_spool.find(c.hash); it != m_spool.end()) kept = it->second;
    }
    if (kept.size() == c.size && xxh3_128(kept) == c.hash) {
      std::memcpy(out.data() + c.offset, kept.data(), c.size);
      have[i] = 1;
    }
  }
  size_t resumed = static_cast<size_t>(std::count(have.begin(), have.end(), 1));
  std::vector<size_t> todo;
  for (size_t i = 0; i < have.size(); ++i)
    if (!have[i]) todo.push_back(i);
  Status fetched = parallel_for(todo.size(), m_options.chunk_parallel, [&](size_t t) -> Status {
    size_t i = todo[t];
    const ChunkRef& c = list.chunks[i];
    std::string name = object_name(RemoteObject::kChunk, c.hash);
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {  // a chunk damaged on the way is fetched once more
      std::optional<std::string> got;
      auto asked = with_failover(tier, chunk_order(tier, key, i), [&](RemoteEndpoint& e) -> Result<bool> {
        KILN_ASSIGN_OR_RETURN(got, e.get(name));
        return true;
      });
      if (!asked.ok()) return asked.status();
      if (!got) return unavailable("chunk " + std::to_string(i) + " of " + std::to_string(list.chunks.size()) + " (" + name + ") is missing");
      tier.add(TierCounter::kBytesIn, static_cast<int64_t>(got->size()));
      if (got->size() == c.size && xxh3_128(*got) == c.hash) {
        std::memcpy(out.data() + c.offset, got->data(), c.size);
        have[i] = 1;
        return {};
      }
      why = "chunk " + std::to_string(i) + " (" + name + ") is damaged: " + std::to_string(got->size()) + " bytes, expected " +
            std::to_string(c.size) + (got->size() == c.size ? " with another hash" : "");
    }
    return unavailable(why + ", twice");
  }, /*keep_going=*/true);  // what can be had is had, and kept for the next try
  if (!fetched.ok()) {
    // Keep what arrived, so that the next fetch asks only for the rest.
    size_t kept = 0;
    for (size_t i = 0; i < have.size(); ++i) {
      if (!have[i]) continue;
      const ChunkRef& c = list.chunks[i];
      std::string_view bytes(out.data() + c.offset, c.size);
      if (!m_options.spool_dir.empty()) {
        (void)make_dirs(m_options.spool_dir);
        if (write_file_atomic(kept_path(c.hash), bytes, false).ok()) ++kept;
      } else {
        std::lock_guard lock(m_spool_mutex);
        m_spool[c.hash] = std::string(bytes);
        ++kept;
      }
    }
    return unavailable(fetched.message() + " (" + std::to_string(kept) + " of " + std::to_string(list.chunks.size()) +
                       " chunks kept for the next try)");
  }
  if (xxh3_128(out) != list.whole) return Status(StatusCode::kDataLoss, "the chunks put together do not hash to the artifact's hash");
  if (!m_options.secret.empty()) {
    std::string_view key_bytes(reinterpret_cast<const char*>(key.bytes.data()), 16);
    KILN_ASSIGN_OR_RETURN(HmacTag expected, hmac_sha256(m_options.secret, {k_whole_tag_domain, key_bytes, out}));
    if (!tags_equal(expected, list.tag))
      return Status(StatusCode::kDataLoss, "the chunks put together do not match the list's signature (forged or altered chunks)");
  }
  if (resumed) {
    KILN_LOG_AT(kInfo, "remote", "resumed " + key.hex() + ": " + std::to_string(resumed) + " of " + std::to_string(list.chunks.size()) +
                                     " chunks were kept from an earlier try");
    for (auto& c : list.chunks) {
      if (!m_options.spool_dir.empty()) {
        ::unlink(kept_path(c.hash).c_str());
      } else {
        std::lock_guard lock(m_spool_mutex);
        m_spool.erase(c.hash);
      }
    }
  }
  return out;
}

}  // namespace kiln::cache
