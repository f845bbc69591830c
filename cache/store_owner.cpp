// Whose the store's folder is (store_owner.h).
#include "cache/store_owner.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "cache/settings.h"
#include "support/file_util.h"

namespace kiln::cache {
namespace {

// What the store keeps at its top (store_files.h): none may be a link, and its folders are checked
// as the store folder is.
constexpr const char* k_top_folders[] = {"blobs", "manifests", "files", "locks", "counters", "remote-chunks"};
constexpr const char* k_top_files[] = {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm", "index.lock",
                                       "usage",        "file-memo"};

// getpwuid_r / getgrgid_r / getgrnam_r with a buffer that grows until the entry fits.
template <class Entry, class Fn>
bool lookup(Entry& entry, std::vector<char>& buf, Fn fn) {
  buf.resize(16384);
  for (;;) {
    Entry* found = nullptr;
    int rc = fn(&entry, buf.data(), buf.size(), &found);
    if (rc == ERANGE && buf.size() < (size_t{1} << 24)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    return rc == 0 && found;
  }
}

std::string user_name(uid_t uid) {
  struct passwd pw {};
  std::vector<char> buf;
  bool found = lookup(pw, buf, [&](passwd* e, char* b, size_t n, passwd** r) { return ::getpwuid_r(uid, e, b, n, r); });
  return (found ? std::string(pw.pw_name) + " " : "") + "(uid " + std::to_string(uid) + ")";
}

std::string group_label(gid_t gid) {
  struct group gr {};
  std::vector<char> buf;
  bool found = lookup(gr, buf, [&](group* e, char* b, size_t n, group** r) { return ::getgrgid_r(gid, e, b, n, r); });
  return (found ? std::string(gr.gr_name) + " " : "") + "(gid " + std::to_string(gid) + ")";
}

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// "the cache folder R is refused: <subject> belongs to <owner>, and <why>".
Status refused(const std::string& root, const std::string& subject, const struct stat* st, const std::string& why) {
  std::string text = "the cache folder " + root + " is refused: " + subject;
  if (st) text += " belongs to " + describe_owner(*st) + ", and";
  return permission_denied(text + " " + why + " (what a cache holds is code kiln loads)");
}

// Checks what the store keeps at its top in the folder open as `fd`.
Status check_top_entries(int fd, const std::string& root, const StoreTrust& trust) {
  auto check = [&](const char* name, bool folder) -> Status {
    struct stat st {};
    if (::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return {};  // not there (yet)
    if (S_ISLNK(st.st_mode))
      return refused(root, std::string("its ") + name, nullptr,
                     "is a symbolic link, which kiln follows nowhere in its store");
    if (!folder) return {};
    std::string why = trust.problem(st);
    return why.empty() ? Status() : refused(root, std::string("its folder ") + name, &st, why);
  };
  for (const char* name : k_top_folders) KILN_RETURN_IF_ERROR(check(name, true));
  for (const char* name : k_top_files) KILN_RETURN_IF_ERROR(check(name, false));
  return {};
}

// Creates `root` (missing) in the nearest folder above it that exists, which must be one kiln may
// create in; each folder made on the way must come out as this user's.
Result<int> create_owned(const std::string& root, const StoreTrust& trust) {
  std::vector<std::string> missing;  // outermost first
  std::string at = root;
  int fd = -1;
  while (fd < 0) {
    size_t slash = at.find_last_of('/');
    missing.insert(missing.begin(), at.substr(slash + 1));
    at = slash == 0 ? "/" : at.substr(0, slash);
    fd = ::open(at.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && (errno != ENOENT || at == "/"))
      return errno_status("open " + at + " to make the cache folder " + root, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errno_status("stat " + at, err);
  }
  if (std::string why = trust.problem(st, /*create_in=*/true); !why.empty()) {
    ::close(fd);
    return refused(root, "kiln would create it in " + at + ", which", &st, why);
  }
  std::string path = at == "/" ? "" : at;
  for (const std::string& name : missing) {
    path += "/" + name;
    if (::mkdirat(fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
      int err = errno;
      ::close(fd);
      return errno_status("mkdir " + path, err);
    }
    // Opened without following: a link another user put there first is not where kiln goes.
    int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    ::close(fd);
    if (next < 0 && (err == ELOOP || err == ENOTDIR))
      return refused(root, path == root ? "it" : "the folder above it " + path, nullptr,
                     "is a symbolic link or a file where kiln creates a folder");
    if (next < 0) return errno_status("open " + path, err);
    fd = next;
    if (::fstat(fd, &st) != 0) {
      err = errno;
      ::close(fd);
      return errno_status("stat " + path, err);
    }
    if (std::string why = trust.problem(st); !why.empty()) {
      ::close(fd);
      return refused(root, path == root ? "it" : "the folder above it " + path + ", made meanwhile,", &st, why);
    }
  }
  return fd;
}

bool in_own_groups(gid_t gid) {
  if (::getegid() == gid) return true;
  int n = ::getgroups(0, nullptr);
  std::vector<gid_t> groups(n > 0 ? static_cast<size_t>(n) : 0);
  if (n > 0) n = ::getgroups(n, groups.data());
  return n > 0 && std::find(groups.begin(), groups.begin() + n, gid) != groups.begin() + n;
}

std::string passwd_home() {
  struct passwd pw {};
  std::vector<char> buf;
  uid_t uid = ::geteuid();
  if (!lookup(pw, buf, [&](passwd* e, char* b, size_t n, passwd** r) { return ::getpwuid_r(uid, e, b, n, r); }))
    return "";
  return pw.pw_dir && pw.pw_dir[0] == '/' ? std::string(pw.pw_dir) : "";
}

std::mutex g_private_mutex;
std::string g_private_dir;  // this process's private folder, once made
pid_t g_private_pid = 0;    // the process that made it (a forked child leaves it alone)

void remove_private_dir() {
  std::lock_guard lock(g_private_mutex);
  if (g_private_dir.empty() || ::getpid() != g_private_pid) return;
  std::error_code ec;
  std::filesystem::remove_all(g_private_dir, ec);  // links inside are removed, never followed
}

}  // namespace

struct StoreTrust::Group {
  std::function<std::string()> source;  // the group's name, asked once
  std::once_flag once;
  std::string name;
  bool exists = false;
  gid_t gid = 0;
  bool user_member = false;            // this process is in the group
  std::set<std::string> member_names;  // its supplementary members
  std::mutex mutex;
  std::map<uid_t, bool> members;  // owners looked up so far

  void resolve() {
    name = source ? source() : "";
    if (name.empty()) return;
    struct group gr {};
    std::vector<char> buf;
    exists = lookup(gr, buf, [&](struct group* e, char* b, size_t n, struct group** r) {
      return ::getgrnam_r(name.c_str(), e, b, n, r);
    });
    if (!exists) return;
    gid = gr.gr_gid;
    for (char** m = gr.gr_mem; m && *m; ++m) member_names.insert(*m);
    user_member = in_own_groups(gid);
  }
  // Whether `uid` is in the group (as its primary group, or listed in it).
  bool has_member(uid_t uid) {
    if (uid == ::geteuid()) return user_member;
    std::lock_guard lock(mutex);
    auto it = members.find(uid);
    if (it != members.end()) return it->second;
    struct passwd pw {};
    std::vector<char> buf;
    bool found =
        lookup(pw, buf, [&](passwd* e, char* b, size_t n, passwd** r) { return ::getpwuid_r(uid, e, b, n, r); });
    bool member = found && (pw.pw_gid == gid || member_names.count(pw.pw_name));
    members[uid] = member;
    return member;
  }
};

StoreTrust::StoreTrust(const std::string& shared_group) {
  if (shared_group.empty()) return;
  m_group = std::make_shared<Group>();
  m_group->source = [shared_group] { return shared_group; };
}

StoreTrust StoreTrust::from_settings() {
  StoreTrust trust;
  trust.m_group = std::make_shared<Group>();
  trust.m_group->source = [] {
    // A config file that does not parse fails the caller's own load of the settings: none here.
    auto settings = Settings::load();
    return settings.ok() ? settings->get(SettingKey::kSharedGroup) : std::string();
  };
  return trust;
}

StoreTrust::Group* StoreTrust::group() const {
  if (!m_group) return nullptr;
  std::call_once(m_group->once, [g = m_group.get()] { g->resolve(); });
  return m_group->name.empty() ? nullptr : m_group.get();
}

std::string StoreTrust::group_name() const {
  const Group* g = group();
  return g ? g->name : "";
}

std::string StoreTrust::problem(const struct stat& st, bool create_in) const {
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link";
  mode_t mode = st.st_mode & 07777;
  // /tmp: anyone may create in it, but no one may rename or remove what another made there.
  if (create_in && S_ISDIR(st.st_mode) && st.st_uid == 0 && (mode & S_ISVTX)) return "";
  if (mode & S_IWOTH) return "anyone can write in it";
  uid_t me = ::geteuid();
  bool trusted_owner = st.st_uid == me || st.st_uid == 0;
  if (trusted_owner && !(mode & S_IWGRP)) return "";  // the common case: no name looked up
  auto whose = [&] { return "it is " + user_name(st.st_uid) + "'s, not this user's (" + user_name(me) + ")"; };
  Group* g = group();
  if (!g)
    return (mode & S_IWGRP) ? "its group " + group_label(st.st_gid) +
                                  " can write in it, and cache.shared_group names no group to share with"
                            : whose();
  if (!g->exists) return "cache.shared_group names '" + g->name + "', which is no group on this machine";
  if (mode & S_IWGRP) {
    if (st.st_gid != g->gid)
      return "its group " + group_label(st.st_gid) + " can write in it, but cache.shared_group names " +
             group_label(g->gid);
    if (!g->user_member)
      return "it is shared with the group " + group_label(g->gid) + " (cache.shared_group), of which this user (" +
             user_name(me) + ") is not a member";
  }
  if (!trusted_owner && !g->has_member(st.st_uid)) return whose() + ", nor a member's of " + group_label(g->gid);
  return "";
}

std::string describe_owner(const struct stat& st) {
  return user_name(st.st_uid) + ", group " + group_label(st.st_gid) + ", mode " + mode_text(st.st_mode);
}

Result<int> open_owned_folder(const std::string& root, const StoreTrust& trust) {
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno != ENOENT) return errno_status("open the cache folder " + root, errno);
  if (fd < 0) {
    KILN_ASSIGN_OR_RETURN(fd, create_owned(root, trust));
  } else {
    // The folder named may be reached through links (the user chose it); what it is, is checked.
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return errno_status("stat " + root, err);
    }
    if (std::string why = trust.problem(st); !why.empty()) {
      ::close(fd);
      return refused(root, "it", &st, why);
    }
  }
  if (Status top = check_top_entries(fd, root, trust); !top.ok()) {
    ::close(fd);
    return top;
  }
  return fd;
}

Result<PrivateStore> open_private_store(const std::string& refused_root) {
  std::string own = default_store_dir();
  if (!own.empty()) own = absolute_path(own);
  if (!own.empty() && own != refused_root) {
    if (auto fd = open_owned_folder(own, StoreTrust()); fd.ok()) return PrivateStore{own, fd.value()};
  }
  KILN_ASSIGN_OR_RETURN(std::string dir, process_private_dir());
  KILN_ASSIGN_OR_RETURN(int fd, open_owned_folder(dir, StoreTrust()));
  return PrivateStore{dir, fd};
}

std::string default_store_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln";
  // No $HOME (a service, a cron job, `env -i`): the home the system gives this user, if it has one.
  if (std::string home = passwd_home(); !home.empty()) {
    struct stat st {};
    if (::stat(home.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return home + "/.cache/kiln";
  }
  auto dir = process_private_dir();
  return dir.ok() ? dir.value() : "";
}

Result<std::string> process_private_dir() {
  std::lock_guard lock(g_private_mutex);
  if (!g_private_dir.empty()) return g_private_dir;
  std::string base = "/tmp";
  if (const char* tmpdir = std::getenv("TMPDIR"); tmpdir && tmpdir[0] == '/') {
    struct stat st {};
    if (::stat(tmpdir, &st) == 0 && S_ISDIR(st.st_mode) && StoreTrust().problem(st, /*create_in=*/true).empty())
      base = absolute_path(tmpdir);
  }
  std::string pattern = (base == "/" ? "" : base) + "/kiln-" + std::to_string(::geteuid()) + "-XXXXXX";
  if (!::mkdtemp(pattern.data())) return errno_status("make a private cache folder in " + base, errno);
  g_private_dir = pattern;
  g_private_pid = ::getpid();
  std::atexit(remove_private_dir);
  return g_private_dir;
}

bool first_time_in_process(const std::string& what) {
  static std::mutex mutex;
  static std::set<std::string> told;
  std::lock_guard lock(mutex);
  return told.insert(what).second;
}

}  // namespace kiln::cache
