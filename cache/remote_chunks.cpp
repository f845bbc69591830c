// Large artifacts as content-addressed chunks spread over a tier's endpoints (remote.h).
//
// The artifact's object holds a chunk list instead of the artifact:
//
//   offset  size  field
//   0       8     magic "KILNCHK2"
//   8       8     the artifact's size (little-endian)
//   16      4     the number of chunks (little-endian)
//   20      4     zero
//   24      32    SHA-256 of the whole artifact
//   56      36*n  per chunk: SHA-256 of its bytes (its name), its size (4 bytes)
//
// The list travels in a signed envelope like any object, so its signature covers every
// chunk's SHA-256 and the whole's: nobody without a trusted key can choose a chunk. Each chunk
// is checked on arrival (refetched once if it fails), the whole after it is put together; a
// reader gets the artifact whole and checked, or not at all. Bounded before allocated: a list
// says a size and a count, but memory is taken only for chunks that arrived and checked, each
// at most k_max_chunk, the whole at most RemoteOptions::max_object_bytes.
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
#include "cache/remote_chunks.h"
#include "support/file_util.h"
#include "support/log.h"

namespace kiln::cache {
namespace {

constexpr std::string_view k_list_magic = "KILNCHK2";
constexpr size_t k_list_header = 56;
constexpr size_t k_list_entry = 36;
// The largest chunk a list may name: publishers cut 1 MiB (RemoteOptions::chunk_bytes); 64 MiB
// leaves room for a cluster that raises it, and bounds what one chunk's arrival costs.
constexpr size_t k_max_chunk = size_t{64} << 20;

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

std::string hash_bytes(const Sha256& h) { return std::string(reinterpret_cast<const char*>(h.data()), h.size()); }

}  // namespace

// Every length checked against what is left and against a cap before anything is sized by it.
Result<ChunkList> parse_chunk_list(std::string_view list, size_t max_total) {
  auto bad = [&](const std::string& why) { return Status(StatusCode::kDataLoss, "a malformed chunk list (" + why + ")"); };
  if (list.size() < k_list_header || list.substr(0, k_list_magic.size()) != k_list_magic) return bad("no KILNCHK2 header");
  ChunkList out;
  out.total = get_u64(list.data() + 8);
  uint32_t count = get_u32(list.data() + 16);
  if ((list.size() - k_list_header) / k_list_entry != count || (list.size() - k_list_header) % k_list_entry != 0)
    return bad(std::to_string(list.size()) + " bytes for " + std::to_string(count) + " chunks");
  if (out.total > max_total)
    return bad("it says the artifact is " + std::to_string(out.total) + " bytes, over the cap of " + std::to_string(max_total));
  if (count == 0 || out.total == 0) return bad("no chunks");
  std::memcpy(out.whole.data(), list.data() + 24, 32);
  out.chunks.reserve(count);  // bounded: count entries are in the list's own bytes
  uint64_t offset = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const char* e = list.data() + k_list_header + size_t{i} * k_list_entry;
    ChunkRef c;
    std::memcpy(c.hash.data(), e, 32);
    c.offset = offset;
    c.size = get_u32(e + 32);
    if (c.size == 0 || c.size > k_max_chunk)
      return bad("chunk " + std::to_string(i) + " says " + std::to_string(c.size) + " bytes (1 to " + std::to_string(k_max_chunk) + ")");
    offset += c.size;
    if (offset > out.total) return bad("its chunks hold more than the " + std::to_string(out.total) + " bytes it says");
    out.chunks.push_back(c);
  }
  if (offset != out.total) return bad("its chunks hold " + std::to_string(offset) + " bytes, it says " + std::to_string(out.total));
  return out;
}

namespace {

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
  size_t size = std::clamp<size_t>(m_options.chunk_bytes, 1, k_max_chunk);
  std::vector<ChunkRef> chunks;
  for (size_t offset = 0; offset < payload.size(); offset += size) {
    ChunkRef c;
    c.offset = offset;
    c.size = std::min(size, payload.size() - offset);
    KILN_ASSIGN_OR_RETURN(c.hash, sha256({payload.substr(c.offset, c.size)}));
    chunks.push_back(c);
  }
  KILN_RETURN_IF_ERROR(parallel_for(chunks.size(), m_options.chunk_parallel, [&](size_t i) -> Status {
    const ChunkRef& c = chunks[i];
    std::string name = chunk_object_name(c.hash);
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
  KILN_ASSIGN_OR_RETURN(Sha256 whole, sha256({payload}));
  list += hash_bytes(whole);
  for (auto& c : chunks) {
    list += hash_bytes(c.hash);
    put_u32(list, static_cast<uint32_t>(c.size));
  }
  return list;
}

Result<std::string> RemoteTiers::assemble(Tier& tier, const Hash128& key, std::string_view list_bytes) {
  KILN_ASSIGN_OR_RETURN(ChunkList list, parse_chunk_list(list_bytes, m_options.max_object_bytes));
  // Each chunk's bytes once they arrived and checked: memory follows what a tier really sent,
  // never what a list says (a 156-byte list can say 4 GiB).
  std::vector<std::string> pieces(list.chunks.size());
  auto checks = [](std::string_view bytes, const ChunkRef& c) {
    if (bytes.size() != c.size) return false;
    auto h = sha256({bytes});
    return h.ok() && *h == c.hash;
  };
  auto kept_path = [&](const Sha256& h) { return m_options.spool_dir + "/" + sha256_hex(h); };
  // What an earlier, failed fetch kept: used when it still checks.
  for (size_t i = 0; i < list.chunks.size(); ++i) {
    const ChunkRef& c = list.chunks[i];
    std::string kept;
    if (!m_options.spool_dir.empty()) {
      if (auto f = read_file(kept_path(c.hash)); f.ok() && f->size() == c.size) kept = std::move(f).value();
    } else {
      std::lock_guard lock(m_spool_mutex);
      if (auto it = m_spool.find(c.hash); it != m_spool.end()) kept = it->second;
    }
    if (checks(kept, c)) pieces[i] = std::move(kept);
  }
  size_t resumed = 0;
  std::vector<size_t> todo;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].empty()) todo.push_back(i);
    else ++resumed;
  }
  Status fetched = parallel_for(todo.size(), m_options.chunk_parallel, [&](size_t t) -> Status {
    size_t i = todo[t];
    const ChunkRef& c = list.chunks[i];
    std::string name = chunk_object_name(c.hash);
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {  // a chunk damaged on the way is fetched once more
      std::optional<std::string> got;
      auto asked = with_failover(tier, chunk_order(tier, key, i), [&](RemoteEndpoint& e) -> Result<bool> {
        KILN_ASSIGN_OR_RETURN(got, e.get(name, c.size));  // a longer answer is refused as it arrives
        return true;
      });
      if (!asked.ok()) return asked.status();
      if (!got) return unavailable("chunk " + std::to_string(i) + " of " + std::to_string(list.chunks.size()) + " (" + name + ") is missing");
      tier.add(TierCounter::kBytesIn, static_cast<int64_t>(got->size()));
      if (checks(*got, c)) {
        pieces[i] = std::move(*got);
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
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].empty()) continue;
      const ChunkRef& c = list.chunks[i];
      if (!m_options.spool_dir.empty()) {
        (void)make_dirs(m_options.spool_dir);
        if (write_file_atomic(kept_path(c.hash), pieces[i], false).ok()) ++kept;
      } else {
        std::lock_guard lock(m_spool_mutex);
        m_spool[c.hash] = std::move(pieces[i]);
        ++kept;
      }
    }
    return unavailable(fetched.message() + " (" + std::to_string(kept) + " of " + std::to_string(list.chunks.size()) +
                       " chunks kept for the next try)");
  }
  std::string out;
  out.reserve(list.total);  // every chunk is here and checked: the total is real bytes now
  for (auto& piece : pieces) {
    out += piece;
    std::string().swap(piece);
  }
  KILN_ASSIGN_OR_RETURN(Sha256 whole, sha256({out}));
  if (whole != list.whole) return Status(StatusCode::kDataLoss, "the chunks put together do not hash to the artifact's SHA-256");
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
