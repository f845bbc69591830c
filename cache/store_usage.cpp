// The store's usage figures (store.h): counters in a counter page this process holds, hit counts and
// "last used" in the usage journal, both folded into the index by the next process that writes
// it, each journal and page exactly once; and what the store's files other than its artifacts take.
#include <dirent.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "cache/counter_page.h"
#include "cache/store.h"
#include "cache/store_files.h"
#include "cache/store_sql.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

// Hit counts are appended after this many distinct keys, or once this long has passed since the
// last append (at the next hit), so that a process that is killed loses at most a second of them.
constexpr size_t k_usage_flush_threshold = 256;
constexpr int64_t k_usage_flush_interval_ns = 1'000'000'000;
// A journal past this is folded by the process that appended to it: a cache that only ever hits
// has no writer to fold it otherwise.
constexpr uint64_t k_journal_fold_bytes = uint64_t{1} << 20;
// With more abandoned counter pages than this at its close, a process that only hit folds them.
constexpr size_t k_pages_before_fold = 64;
// A journal left by a folder that died is taken once it is this old (seconds).
constexpr int64_t k_orphan_journal_age = 600;

int64_t now_seconds() { return static_cast<int64_t>(std::time(nullptr)); }

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Counters by the names older kilns wrote (journals and indexes written before compile time was
// split into wall and CPU time).
std::string current_name(const std::string& name) {
  if (name == "compile_us_spent") return "compile_wall_us_spent";
  if (name == "compile_us_saved") return "compile_wall_us_saved";
  return name;
}

// The names of the files in `folder` (not its subfolders), unsorted.
std::vector<std::string> file_names(const std::string& folder) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(folder.c_str())) {
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

}  // namespace

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::kHitsMemory: return "hits_memory";
    case Counter::kHitsDisk: return "hits_disk";
    case Counter::kHitsRemote: return "hits_remote";
    case Counter::kMisses: return "misses";
    case Counter::kCompiles: return "compiles";
    case Counter::kCompileWallUsSpent: return "compile_wall_us_spent";
    case Counter::kCompileCpuUsSpent: return "compile_cpu_us_spent";
    case Counter::kCompileWallUsSaved: return "compile_wall_us_saved";
    case Counter::kCompileCpuUsSaved: return "compile_cpu_us_saved";
    case Counter::kEvictions: return "evictions";
    case Counter::kRepairs: return "repairs";
    case Counter::kAdopted: return "adopted";
    case Counter::kCount: break;
  }
  return "?";
}

CounterPage* Store::counter_page() {
  std::call_once(m_page_once, [this] {
    auto page = CounterPage::open(m_root + "/" + k_counter_folder);
    // A folder this process cannot write (a shared read-only cache, a full disk): the counters
    // stay in memory and go to the journal at close, if it can be written then. Nothing is said:
    // the same cause fails the store's writes, which say so once.
    if (!page.ok()) return;
    for (size_t i = 0; i < m_page_slots.size(); ++i) m_page_slots[i] = (*page)->reserve(counter_name(static_cast<Counter>(i)));
    m_page = std::move(page).value();
  });
  return m_page.get();
}

void Store::count(Counter c, int64_t delta) {
  CounterPage* page = counter_page();
  // A counter with no slot (a page taken over from an older kiln, full): the journal, at close.
  if (size_t slot = m_page_slots[static_cast<size_t>(c)]; page && slot) return page->add(slot, delta);
  std::lock_guard lock(m_mutex);
  m_pending_counters[static_cast<size_t>(c)] += delta;
}

void Store::count_locked(Counter c, int64_t delta) {
  CounterPage* page = counter_page();
  if (size_t slot = m_page_slots[static_cast<size_t>(c)]; page && slot) return page->add(slot, delta);
  m_pending_counters[static_cast<size_t>(c)] += delta;
}

void Store::count(const std::string& given, int64_t delta) {
  if (given.empty() || given.size() > 500) return;
  // Blanks and control characters as '_': a stored name holds none, and a reason a caller counts
  // by ("unknown option -foo") may.
  std::string name = given;
  std::replace_if(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) <= ' '; }, '_');
  if (CounterPage* page = counter_page(); page && page->add(name, delta)) return;
  std::lock_guard lock(m_mutex);  // too long a name, or a full page: the journal, at close
  m_pending_named[name] += delta;
}

void Store::count_hit(const Hash128& key) {
  std::lock_guard lock(m_mutex);
  ++m_pending_hits[key];
  int64_t now = steady_ns();
  if (!m_last_flush_ns) m_last_flush_ns = now;  // the first hit starts the second
  if (m_pending_hits.size() >= k_usage_flush_threshold || now - m_last_flush_ns >= k_usage_flush_interval_ns) (void)flush_locked();
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
  m_last_flush_ns = steady_ns();
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
  struct stat st{};
  bool large = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > k_journal_fold_bytes;
  ::close(fd);
  if (n != static_cast<ssize_t>(lines.size())) return io_error("cannot append to the usage journal in " + m_root);
  m_pending_hits.clear();
  m_pending_counters.fill(0);
  m_pending_named.clear();
  if (large && ensure_index_locked().ok()) (void)fold_usage_locked(/*all_pages=*/false);
  return {};
}

Status Store::fold_usage_locked(bool all_pages) {
  // What to fold: the live journal, moved aside first so that appends go to a new one; journals
  // a folder that died left behind; and the counter pages of processes that are gone (their
  // locks taken: no other fold takes them meanwhile). The folder is listed once per Store (a
  // listing on every write costs more than the write: tools/bench/remote_bench) or when asked.
  std::vector<FoldSource> sources;
  std::string live = m_root + "/" + k_usage_journal;
  std::string moved = std::string(k_usage_journal) + ".folding." + std::to_string(::getpid()) + "." + std::to_string(steady_ns());
  if (::rename(live.c_str(), (m_root + "/" + moved).c_str()) == 0) sources.push_back({moved, false, std::nullopt});
  bool look = all_pages || !m_orphans_checked;
  if (!m_orphans_checked) {
    m_orphans_checked = true;
    std::string prefix = std::string(k_usage_journal) + ".folding.";
    for (auto& name : file_names(m_root)) {
      struct stat st{};
      if (name.rfind(prefix, 0) == 0 && name != moved && ::stat((m_root + "/" + name).c_str(), &st) == 0 &&
          now_seconds() - st.st_mtime > k_orphan_journal_age)
        sources.push_back({name, false, std::nullopt});
    }
  }
  if (look) {
    std::string folder = m_root + "/" + k_counter_folder;
    for (auto& name : file_names(folder)) {
      if (!is_counter_page_name(name) || (m_page && name == m_page->name())) continue;
      AbandonedPage lock = AbandonedPage::take(folder + "/" + name);
      if (lock.held()) sources.push_back({std::string(k_counter_folder) + "/" + name, true, std::move(lock)});
    }
  }
  if (sources.empty()) return {};
  return fold_sources_locked(sources);
}

Status Store::fold_sources_locked(std::vector<FoldSource>& sources) {
  KILN_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
  sqlite3_stmt* h = prepare("UPDATE artifacts SET hits = hits + ?, last_used = max(last_used, ?) WHERE key = ?");
  sqlite3_stmt* c = prepare("INSERT INTO stats(name, value) VALUES(?, ?) ON CONFLICT(name) DO UPDATE SET value = value + excluded.value");
  sqlite3_stmt* seen = prepare("SELECT 1 FROM folded WHERE name = ?");
  sqlite3_stmt* mark = prepare("INSERT OR REPLACE INTO folded(name, at) VALUES(?, ?)");
  if (!h || !c || !seen || !mark) {
    Status st = sql_error(m_db, "prepare the fold");
    (void)exec("ROLLBACK");
    return st;
  }
  // Sources folded before whose files outlived their fold (a folder that died between its commit
  // and its unlink) are only removed now; rows whose files are gone are not needed any more.
  {
    std::vector<std::string> gone;
    sqlite3_stmt* all = prepare("SELECT name FROM folded");
    StatementReset reset{all};
    while (all && sqlite3_step(all) == SQLITE_ROW)
      if (std::string name = column_text(all, 0); ::access((m_root + "/" + name).c_str(), F_OK) != 0) gone.push_back(name);
    sqlite3_stmt* drop = prepare("DELETE FROM folded WHERE name = ?");
    for (auto& name : gone) {
      StatementReset r{drop};
      bind_text(drop, 1, name);
      sqlite3_step(drop);
    }
  }
  auto add_counter = [&](const std::string& name, int64_t delta) {
    if (!delta) return;
    std::string current = current_name(name);
    StatementReset reset{c};
    bind_text(c, 1, current);
    sqlite3_bind_int64(c, 2, delta);
    sqlite3_step(c);
  };
  std::vector<std::string> done;
  for (auto& source : sources) {
    std::string path = m_root + "/" + source.name;
    {
      StatementReset reset{seen};
      bind_text(seen, 1, source.name);
      if (sqlite3_step(seen) == SQLITE_ROW) {  // counted once already
        done.push_back(path);
        continue;
      }
    }
    if (source.page) {
      auto counters = read_counter_page(path);
      if (!counters.ok()) continue;  // not a page: left for gc
      // Marked before the commit: should this fold die before its unlink, no process takes the
      // page over (its counts would be dropped with it as counted already).
      if (!mark_counter_page_folded(path)) continue;
      for (auto& [name, value] : counters.value()) add_counter(name, value);
    } else {
      auto text = read_file(path);
      if (!text.ok()) {
        // Another user's journal in a shared folder, say: its counts are not this process's to
        // drop, so it stays for one that can read it, and this one goes on without them.
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
          if (!key) continue;
          StatementReset reset{h};
          sqlite3_bind_int64(h, 1, count);
          sqlite3_bind_int64(h, 2, when);
          sqlite3_bind_blob(h, 3, key->bytes.data(), 16, SQLITE_TRANSIENT);
          sqlite3_step(h);
        } else if (kind == 'C') {
          add_counter(name, count);
        }
      }
    }
    StatementReset reset{mark};
    bind_text(mark, 1, source.name);
    sqlite3_bind_int64(mark, 2, now_seconds());
    if (sqlite3_step(mark) != SQLITE_DONE) {
      Status st = sql_error(m_db, "mark " + source.name + " folded");
      (void)exec("ROLLBACK");
      return st;
    }
    done.push_back(path);
  }
  KILN_RETURN_IF_ERROR(exec("COMMIT"));
  // Removed once their figures are committed; the folded table keeps one that dies before its
  // unlink from being counted again.
  for (auto& path : done) ::unlink(path.c_str());
  return {};
}

void Store::fold_own_page_locked() {
  if (!m_page) return;
  std::vector<FoldSource> own;
  own.push_back({std::string(k_counter_folder) + "/" + m_page->name(), true, std::nullopt});
  if (!fold_sources_locked(own).ok()) return;  // the page stays; the next fold takes it once this process is gone
  // A process that only hit leaves its page: with many such, the next writer would find them all.
  // So the process that finds many folds them itself, once it wrote anyway.
  size_t pages = 0;
  for (auto& name : file_names(m_root + "/" + k_counter_folder)) pages += is_counter_page_name(name);
  if (pages > k_pages_before_fold) (void)fold_usage_locked(/*all_pages=*/true);
}

std::map<std::string, int64_t> Store::live_counters_locked() {
  std::map<std::string, int64_t> out;
  std::string folder = m_root + "/" + k_counter_folder;
  sqlite3_stmt* seen = prepare("SELECT 1 FROM folded WHERE name = ?");
  for (auto& name : file_names(folder)) {
    if (!is_counter_page_name(name)) continue;
    if (seen) {
      StatementReset reset{seen};
      bind_text(seen, 1, std::string(k_counter_folder) + "/" + name);
      if (sqlite3_step(seen) == SQLITE_ROW) continue;  // in the index already
    }
    auto counters = read_counter_page(folder + "/" + name);
    if (!counters.ok()) continue;
    for (auto& [counter, value] : counters.value()) out[current_name(counter)] += value;
  }
  for (size_t i = 0; i < m_pending_counters.size(); ++i) out[counter_name(static_cast<Counter>(i))] += m_pending_counters[i];
  for (auto& [name, value] : m_pending_named) out[name] += value;
  return out;
}

uint64_t Store::other_bytes_locked() {
  // The index (and indexes set aside), journals, the store's lock and file memo at the top; then
  // the counter pages, the staging folders of compiles under way and the chunks kept for a
  // remote fetch to resume.
  uint64_t total = 0;
  for (auto& name : file_names(m_root)) {
    struct stat st{};
    std::string path = m_root + "/" + name;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
  }
  total += bytes_under(m_root + "/" + k_counter_folder);
  total += bytes_under(m_root + "/files/staging");
  // Chunks of a large remote artifact whose fetch stopped part way (cache/remote_chunks.cpp).
  total += bytes_under(m_root + "/remote-chunks");
  return total;
}

}  // namespace kiln::cache
