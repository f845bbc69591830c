// One process's counters in a file of its own under <cache>/counters/, mapped shared: adding to a
// counter is one atomic add to memory (no lock, no system call: a memory hit counts at the cost
// of the hash-map lookup it is), and what was added outlives the process however it ends. A
// SIGKILL leaves the mapped page in the page cache, which reaches the file; only a crash of the
// machine itself can lose it.
//
// While its process lives, a page is held by an exclusive flock, which the kernel drops however
// the process ends: a page whose lock can be taken is abandoned, and the next fold
// (store_usage.cpp) adds it to the index, once, and removes it.
//
// A process takes over an abandoned page before it makes one (open): its counts add to what the
// page holds, which no fold has taken yet. So processes that only hit (a `kiln cc` per compile,
// thousands in one build) leave as many pages as ever ran at once, not one each.
//
// A fold marks a page it is about to count (mark_counter_page_folded, before its commit): a page so
// marked is never taken over, so a page whose folder died between its commit and its unlink (its
// name in the index's `folded` table, not counted again) gains no counts that would be dropped.
//
// The file: 64 slots of 64 bytes. Slot 0 is the header ("KILNCNT1", the slot count, then at byte
// 12 the folded mark); each
// other slot a counter: its name (at most 54 bytes, NUL-padded), a byte set to 1 once the name is
// whole, then its value (int64, native byte order: the page never leaves the machine). A
// counter's slot is taken once and never moves.
//
// Thread-safety: add() may be called from any thread; read_counter_page from any process.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "support/status.h"

namespace kiln::cache {

inline constexpr size_t k_counter_page_slots = 64;
inline constexpr size_t k_counter_name_max = 54;

class CounterPage {
 public:
  // An abandoned page in `folder` taken over, else a new one (open); a new page in `folder`
  // (made 0700 when missing), named for this process (create).
  static Result<std::unique_ptr<CounterPage>> open(const std::string& folder);
  static Result<std::unique_ptr<CounterPage>> create(const std::string& folder);
  // An abandoned page at `path`, its lock taken; null when it is held, gone (folded meanwhile),
  // not this user's or not a page.
  static std::unique_ptr<CounterPage> adopt(const std::string& folder, const std::string& name);
  // Unmaps it and drops its lock; the file stays for the next fold.
  ~CounterPage();
  CounterPage(const CounterPage&) = delete;
  CounterPage& operator=(const CounterPage&) = delete;

  // Adds `delta` to counter `name` (taking a slot for it on its first use). False when the name
  // is longer than k_counter_name_max or every slot is taken: the caller keeps it elsewhere.
  bool add(std::string_view name, int64_t delta);
  // The same for a counter already given slot `slot` by reserve() (no lookup: the fast path).
  void add(size_t slot, int64_t delta);
  // The slot of `name`, taken now when it has none; 0 when it cannot have one.
  size_t reserve(std::string_view name);

  const std::string& path() const { return m_path; }
  const std::string& name() const { return m_name; }  // the file's name within its folder

 private:
  CounterPage() = default;
  std::string m_path, m_name;
  int m_fd = -1;
  char* m_data = nullptr;
  std::mutex m_mutex;  // taking slots
  std::unordered_map<std::string, size_t> m_slots;
  size_t m_next_slot = 1;
};

// The counters a page file holds as it stands (of any process, live or gone): (name, value) for
// each slot whose name is whole. kDataLoss when the file is not a counter page.
Result<std::vector<std::pair<std::string, int64_t>>> read_counter_page(const std::string& path);

// Whether a file in the counters folder is a page by its name ("<pid>.<n>.page").
bool is_counter_page_name(std::string_view name);

// Marks the page at `path` (whose lock the caller holds) as being folded; false when it cannot.
bool mark_counter_page_folded(const std::string& path);

// An abandoned page's lock, taken: while this lives, no other fold takes the page. Empty (not
// held) when its process still lives, or another fold holds it.
class AbandonedPage {
 public:
  static AbandonedPage take(const std::string& path);
  AbandonedPage(AbandonedPage&& other) noexcept : m_fd(other.m_fd) { other.m_fd = -1; }
  AbandonedPage& operator=(AbandonedPage&&) = delete;
  ~AbandonedPage();
  bool held() const { return m_fd >= 0; }

 private:
  AbandonedPage() = default;
  int m_fd = -1;
};

}  // namespace kiln::cache
