// Whose the store's folder is. kiln loads code from its cache (host shared objects, device
// modules), so a folder someone else can write is a way into every process that uses it. A store
// folder is used only when everyone who can write it is trusted: this user and root (who can
// change anything this user runs anyway), and, when cache.shared_group names a group, that group
// and its members; never everyone.
//
// What is checked, by ownership and mode (never access(): root passes every access check):
//  - the cache folder itself, when it exists;
//  - else the nearest existing folder above it, which kiln creates it in, and then each folder it
//    creates on the way (each must come out as its own: a name another user made there first is
//    refused). A root-owned sticky folder (/tmp) may be created in: the sticky bit keeps others
//    from renaming or removing what kiln makes there, and what it makes is checked as its own;
//  - the store's own folders and files at its top (blobs/, manifests/, the index, ...): none may
//    be a symbolic link, and its folders pass the same test;
//  - each blob and manifest as it is read (the status of the descriptor read, so it costs
//    nothing): it must belong to a trusted user and be writable by no one else (store.cpp).
// One stat per folder or file checked; the folder is then used through the descriptor checked.
//
// A folder that fails is refused with one warning per process naming it, its owner and its mode,
// and kiln runs on a private store instead (Store::open).
//
// Thread-safety: StoreTrust may be shared by threads (its group is resolved once, under a lock);
// the functions are safe from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "support/status.h"

namespace kiln::cache {

// Who may write a store besides this user and root: the members of the group cache.shared_group
// names, if it names one.
class StoreTrust {
 public:
  // This user and root alone.
  StoreTrust() = default;
  // And the group named ("" = none).
  explicit StoreTrust(const std::string& shared_group);
  // The group cache.shared_group names in the settings, read only when a folder or file proves to
  // be group-writable or another user's (so a private store never loads the settings for it).
  static StoreTrust from_settings();

  // "" when everyone who can write a folder or file with status `st` is trusted; else why not
  // ("anyone can write in it"), for a message. `create_in`: a folder kiln creates the store in,
  // where a root-owned sticky folder (/tmp) passes.
  std::string problem(const struct stat& st, bool create_in = false) const;
  // The group shared with, once resolved ("" for none).
  std::string group_name() const;

 private:
  struct Group;
  Group* group() const;            // null when no group is named
  std::shared_ptr<Group> m_group;  // null: no group
};

// "nobody (uid 65534), group nogroup (gid 65534), mode 0777": a folder's owner and mode in words.
std::string describe_owner(const struct stat& st);

// Opens the store folder `root` (absolute), creating it and the folders above it that are missing
// (0700), when it passes the checks above; kPermissionDenied naming the folder that failed, its
// owner and mode otherwise, and other failures as they come. The descriptor is O_DIRECTORY.
Result<int> open_owned_folder(const std::string& root, const StoreTrust& trust);

// The store kiln falls back on when `refused` is refused, opened as open_owned_folder does: the
// user's own default folder (default_store_dir()) when it is another and passes (persistent, so
// hits survive the process), else this process's private folder (process_private_dir()).
// Not $XDG_RUNTIME_DIR: it is memory (tmpfs), sized for sockets, not for gigabytes of artifacts.
struct PrivateStore {
  std::string path;
  int fd = -1;
};
Result<PrivateStore> open_private_store(const std::string& refused);

// The user's cache folder when none is configured: $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln,
// else <home in the passwd entry>/.cache/kiln when that home exists, else this process's private
// folder; never a fixed name under /tmp, which another user could make first. "" only when not
// even a private folder can be made.
std::string default_store_dir();

// A folder of this process's alone: made once (mkdtemp, 0700) under $TMPDIR when it passes the
// checks, else /tmp, and removed with its content when the process exits (not by a child it forked).
Result<std::string> process_private_dir();

// True the first time this process is told `what` (a refused folder is said once per process,
// however many stores open it).
bool first_time_in_process(const std::string& what);

}  // namespace kiln::cache
