// Whose the store's folder is (cache/store_owner.h): real folders with real owners and modes, a
// real store, and the real kiln binary. CI runs the tests as root, which passes every permission
// check: a folder is another user's by chown to nobody, and kiln must refuse it by its owner and
// mode alone. The tests that need to chown skip, saying so, under another uid.
#include "cache/store_owner.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "cache/blob.h"
#include "cache/key_lock.h"
#include "cache/settings.h"
#include "cache/store.h"
#include "support/file_util.h"
#include "tests/cache/record_for.h"
#include "tests/servers.h"
#include "tests/test_util.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
using testing_records::record_for;
using testing::json_field;

constexpr uid_t k_nobody = 65534;

#define REQUIRE_ROOT()  \
  if (::geteuid() != 0) \
  GTEST_SKIP() << "making a folder another user's needs root (tests run as uid " << ::geteuid() << ")"

// Sets (or, with nullopt, unsets) an environment variable for the scope.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : m_name(std::move(name)) {
    if (const char* old = std::getenv(m_name.c_str())) m_old = old;
    if (value) {
      ::setenv(m_name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(m_name.c_str());
    }
  }
  ~ScopedEnv() {
    if (m_old) {
      ::setenv(m_name.c_str(), m_old->c_str(), 1);
    } else {
      ::unsetenv(m_name.c_str());
    }
  }

 private:
  std::string m_name;
  std::optional<std::string> m_old;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = text.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

std::string group_name_of(gid_t gid) {
  struct group* g = ::getgrgid(gid);
  return g ? g->gr_name : "";
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

bool is_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

size_t entries_in(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    ++n;
  return n;
}

// A whole blob file of `record` holding `bytes`, written at its place under `root`.
void plant_blob(const std::string& root, const ArtifactRecord& record, const std::string& bytes) {
  std::string hex = record.key.hex();
  ASSERT_TRUE(make_dirs(root + "/blobs/" + hex.substr(0, 2)).ok());
  ASSERT_TRUE(write_file_atomic(root + "/blobs/" + hex.substr(0, 2) + "/" + hex + ".blob",
                                encode_blob(bytes, encode_record(record), Compression::kNone).bytes)
                  .ok());
}

// Options that say which group is shared (none unless named), collecting what the store reports.
StoreOptions options_with(std::vector<std::string>* notices, const std::string& shared_group = "",
                          bool fallback = true) {
  StoreOptions o;
  o.shared_group = shared_group;
  o.private_fallback = fallback;
  o.report_notice = [notices](const std::string& m) { notices->push_back(m); };
  return o;
}

Status open_status(const std::string& root, const std::string& shared_group) {
  std::vector<std::string> notices;
  auto store = Store::open(root, options_with(&notices, shared_group, /*fallback=*/false));
  return store.ok() ? Status() : store.status();
}

TEST(StoreOwnerTest, AnotherUsersWorldWritableFolderIsRefusedOnceAndAPrivateStoreServesInstead) {
  REQUIRE_ROOT();
  testing::TempDir home, base;
  std::string foreign = base / "shared";
  auto planted = record_for("planted");
  plant_blob(foreign, planted, "planted code");
  ASSERT_EQ(::chown(foreign.c_str(), k_nobody, k_nobody), 0);
  ASSERT_EQ(::chmod(foreign.c_str(), 0777), 0);
  size_t foreign_entries = entries_in(foreign);
  ScopedEnv h("HOME", home.path()), x("XDG_CACHE_HOME", std::nullopt);

  std::vector<std::string> notices;
  auto store = Store::open(foreign, options_with(&notices));
  ASSERT_TRUE(store.ok()) << store.status().message();
  std::string own = home / ".cache/kiln";
  EXPECT_EQ((*store)->root(), own);
  ASSERT_EQ(notices.size(), 1u);
  const std::string& said = notices[0];
  EXPECT_TRUE(contains(said, "the cache folder " + foreign + " is refused")) << said;
  EXPECT_TRUE(contains(said, "belongs to nobody (uid 65534)")) << said;
  EXPECT_TRUE(contains(said, "mode 0777")) << said;
  EXPECT_TRUE(contains(said, "anyone can write in it")) << said;
  EXPECT_TRUE(contains(said, "kiln uses the private store " + own + " instead")) << said;
  EXPECT_EQ((*store)->notice(), said);

  // Nothing from the refused folder is read, and nothing is written there.
  EXPECT_FALSE((*store)->get(planted.key)->has_value());
  auto mine = record_for("mine");
  ASSERT_TRUE((*store)->put(mine, "my code").ok());
  EXPECT_EQ((*(*store)->get(mine.key))->bytes, "my code");
  EXPECT_EQ(entries_in(foreign), foreign_entries);
  EXPECT_EQ(mode_of(own), 0700u);

  // Said once per process, however many stores open it; each store still has it as its notice.
  auto again = Store::open(foreign, options_with(&notices));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(notices.size(), 1u);
  EXPECT_EQ((*again)->notice(), said);
  EXPECT_TRUE((*again)->get(mine.key)->has_value());

  // A command that acts on the folder named gets the refusal, not another folder.
  Status refused = open_status(foreign, "");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(refused.message(), "belongs to nobody (uid 65534)")) << refused.message();
}

TEST(StoreOwnerTest, WhenTheUsersOwnFolderIsTheOneRefusedTheStoreIsAFolderOfTheProcesssOwn) {
  REQUIRE_ROOT();
  testing::TempDir home;
  std::string own = home / ".cache/kiln";
  ASSERT_TRUE(make_dirs(own).ok());
  ASSERT_EQ(::chown(own.c_str(), k_nobody, k_nobody), 0);
  ScopedEnv h("HOME", home.path()), x("XDG_CACHE_HOME", std::nullopt);
  std::vector<std::string> notices;
  auto store = Store::open(own, options_with(&notices));
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto dir = process_private_dir();
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ((*store)->root(), *dir);
  EXPECT_EQ(mode_of(*dir), 0700u);
  EXPECT_TRUE(contains(fs::path(*dir).filename().string(), "kiln-" + std::to_string(::geteuid()) + "-")) << *dir;
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_TRUE(contains(notices[0], "it belongs to nobody (uid 65534)")) << notices[0];
  EXPECT_TRUE(contains(notices[0], "not this user's")) << notices[0];
}

TEST(StoreOwnerTest, AFolderOfThisUsersThatNoOneElseCanWriteIsUsedAsItIs) {
  testing::TempDir dir;
  ASSERT_TRUE(make_dirs(dir / "open").ok());
  ASSERT_EQ(::chmod((dir / "open").c_str(), 0755), 0);  // others may read it: that is no risk
  std::vector<std::string> notices;
  auto store = Store::open(dir / "open", options_with(&notices));
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_EQ((*store)->root(), dir / "open");
  EXPECT_TRUE(notices.empty());
  // Made by kiln: each folder its own, 0700.
  auto made = Store::open(dir / "a/b/kiln", options_with(&notices));
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ((*made)->root(), dir / "a/b/kiln");
  EXPECT_EQ(mode_of(dir / "a"), 0700u);
  EXPECT_EQ(mode_of(dir / "a/b/kiln"), 0700u);
  EXPECT_TRUE(notices.empty());
}

TEST(StoreOwnerTest, AGroupWritableFolderIsRefusedUnlessCacheSharedGroupNamesItsGroup) {
  testing::TempDir dir;
  std::string folder = dir / "team";
  ASSERT_EQ(::mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(::chown(folder.c_str(), ::geteuid(), ::getegid()), 0);
  ASSERT_EQ(::chmod(folder.c_str(), 02770), 0);
  std::string group = group_name_of(::getegid());
  if (group.empty()) GTEST_SKIP() << "this process's group " << ::getegid() << " has no name";
  std::string label = group + " (gid " + std::to_string(::getegid()) + ")";

  Status none = open_status(folder, "");
  EXPECT_EQ(none.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(none.message(), "the cache folder " + folder + " is refused")) << none.message();
  EXPECT_TRUE(contains(none.message(), "mode 2770")) << none.message();
  EXPECT_TRUE(
      contains(none.message(), "its group " + label + " can write in it, and cache.shared_group names no group"))
      << none.message();

  EXPECT_TRUE(open_status(folder, group).ok()) << open_status(folder, group).message();

  Status unknown = open_status(folder, "kiln-no-such-group");
  EXPECT_TRUE(
      contains(unknown.message(), "cache.shared_group names 'kiln-no-such-group', which is no group on this machine"))
      << unknown.message();
  for (gid_t other : {gid_t{65534}, gid_t{0}, gid_t{100}}) {
    std::string name = group_name_of(other);
    if (other == ::getegid() || name.empty()) continue;
    Status wrong = open_status(folder, name);
    EXPECT_TRUE(
        contains(wrong.message(), "its group " + label + " can write in it, but cache.shared_group names " + name))
        << wrong.message();
    break;
  }

  // Named in the settings, as a deployment names it.
  {
    ScopedEnv g("KILN_CACHE_SHARED_GROUP", group), c("KILN_CONFIG", "/dev/null"), s("KILN_SYSTEM_CONFIG", "/dev/null");
    std::vector<std::string> notices;
    StoreOptions from_settings;
    from_settings.private_fallback = false;
    auto store = Store::open(folder, from_settings);
    EXPECT_TRUE(store.ok()) << store.status().message();
  }

  // Never writable by everyone, whatever group is named.
  ASSERT_EQ(::chmod(folder.c_str(), 0777), 0);
  Status open_to_all = open_status(folder, group);
  EXPECT_TRUE(contains(open_to_all.message(), "anyone can write in it")) << open_to_all.message();
}

TEST(StoreOwnerTest, AStoreIsMadeOnlyInAFolderNoOneElseCanWriteOrUnderTheStickyBit) {
  REQUIRE_ROOT();
  testing::TempDir dir;
  // In another user's folder that anyone may write: refused, and nothing made there.
  std::string open_parent = dir / "open";
  ASSERT_EQ(::mkdir(open_parent.c_str(), 0777), 0);
  ASSERT_EQ(::chown(open_parent.c_str(), k_nobody, k_nobody), 0);
  ASSERT_EQ(::chmod(open_parent.c_str(), 0777), 0);
  Status refused = open_status(open_parent + "/cache/kiln", "");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(refused.message(), "the cache folder " + open_parent +
                                              "/cache/kiln is refused: kiln would create it in " + open_parent +
                                              ", which belongs to nobody (uid 65534)"))
      << refused.message();
  EXPECT_EQ(entries_in(open_parent), 0u);

  // In a root-owned sticky folder (as /tmp is): made, each folder this user's and 0700.
  std::string sticky = dir / "sticky";
  ASSERT_EQ(::mkdir(sticky.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  EXPECT_TRUE(open_status(sticky + "/a/kiln", "").ok());
  EXPECT_EQ(mode_of(sticky + "/a"), 0700u);
  EXPECT_EQ(mode_of(sticky + "/a/kiln"), 0700u);
  // ...but a name another user made there first is theirs: refused.
  std::string squat = sticky + "/squatted";
  ASSERT_EQ(::mkdir(squat.c_str(), 0755), 0);
  ASSERT_EQ(::chown(squat.c_str(), k_nobody, k_nobody), 0);
  Status squatted = open_status(squat, "");
  EXPECT_TRUE(contains(squatted.message(), squat + " is refused: it belongs to nobody (uid 65534)"))
      << squatted.message();
  // ...and so is a link planted where kiln would make its folder.
  ASSERT_EQ(::symlink((dir / "elsewhere").c_str(), (sticky + "/linked").c_str()), 0);
  ASSERT_EQ(::lchown((sticky + "/linked").c_str(), k_nobody, k_nobody), 0);
  Status linked = open_status(sticky + "/linked/kiln", "");
  EXPECT_EQ(linked.code(), StatusCode::kPermissionDenied) << linked.message();
  EXPECT_FALSE(fs::exists(dir / "elsewhere"));
}

TEST(StoreOwnerTest, ALinkPlantedForABlobOrAShardFolderIsNotFollowed) {
  testing::TempDir dir;
  std::string root = dir / "store";
  std::vector<std::string> damage;
  StoreOptions options;
  options.shared_group = "";
  options.report_damage = [&](const std::string& m) { damage.push_back(m); };
  auto store = Store::open(root, options).value();
  auto r = record_for("linked");
  ASSERT_TRUE(store->put(r, "the real artifact").ok());
  std::string blob = store->blob_path(r.key), shard = fs::path(blob).parent_path().string();
  std::string name = fs::path(blob).filename().string();

  // A valid blob outside, and a link to it where the blob belongs: not followed, a miss, and the
  // link (never what it points to) removed.
  std::string outside = dir / "outside";
  ASSERT_TRUE(make_dirs(outside).ok());
  plant_blob(dir / "other-store", r, "bytes from elsewhere");
  fs::copy_file(dir / ("other-store/blobs/" + r.key.hex().substr(0, 2) + "/" + name), outside + "/" + name);
  ASSERT_EQ(::unlink(blob.c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/" + name).c_str(), blob.c_str()), 0);
  EXPECT_FALSE(store->get(r.key)->has_value());
  EXPECT_FALSE(is_link(blob));
  EXPECT_TRUE(fs::exists(outside + "/" + name));
  ASSERT_FALSE(damage.empty());
  EXPECT_TRUE(contains(damage[0], "symbolic link")) << damage[0];
  EXPECT_EQ(store->read_blob_file(r.key).status().code(), StatusCode::kNotFound);

  // The same through map().
  ASSERT_EQ(::symlink((outside + "/" + name).c_str(), blob.c_str()), 0);
  EXPECT_FALSE(store->map(r.key)->has_value());
  EXPECT_FALSE(is_link(blob));

  // A link in place of the shard folder: not followed either, and removed.
  fs::remove_all(shard);
  ASSERT_EQ(::symlink(outside.c_str(), shard.c_str()), 0);
  EXPECT_EQ(store->read_blob_file(r.key).status().code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(store->get(r.key)->has_value());
  EXPECT_FALSE(is_link(shard));
  EXPECT_EQ(entries_in(outside), 1u);

  // Publishing through a planted shard link writes into a real folder of the store, not there.
  ASSERT_EQ(::symlink(outside.c_str(), shard.c_str()), 0);
  ASSERT_TRUE(store->put(r, "the real artifact").ok());
  EXPECT_FALSE(is_link(shard));
  EXPECT_EQ(entries_in(outside), 1u);
  EXPECT_EQ((*store->get(r.key))->bytes, "the real artifact");

  // A manifest reached through a link is a miss.
  std::string manifest = store->manifest_path(r.input_key);
  ASSERT_TRUE(fs::exists(manifest));
  fs::copy_file(manifest, outside + "/m");
  ASSERT_EQ(::unlink(manifest.c_str()), 0);
  ASSERT_EQ(::symlink((outside + "/m").c_str(), manifest.c_str()), 0);
  EXPECT_FALSE(store->get_manifest(r.input_key)->has_value());

  // The compile locks: a link in place of their folder is replaced, and no lock file made there.
  fs::remove_all(root + "/locks");
  ASSERT_EQ(::symlink(outside.c_str(), (root + "/locks").c_str()), 0);
  {
    KeyLock lock = KeyLock::acquire(root, r.key, std::chrono::milliseconds(0));
    EXPECT_TRUE(lock.held());
  }
  EXPECT_FALSE(is_link(root + "/locks"));
  EXPECT_EQ(entries_in(outside), 2u);  // the blob and the manifest copied there, nothing more
}

TEST(StoreOwnerTest, TheStoresOwnFoldersAndFilesMayNotBeLinks) {
  testing::TempDir dir;
  std::string root = dir / "store";
  ASSERT_TRUE(Store::open(root).ok());
  ASSERT_TRUE(make_dirs(dir / "elsewhere").ok());
  // Its blobs folder, whatever the mode of the store's folder.
  ASSERT_EQ(::rmdir((root + "/blobs").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "elsewhere").c_str(), (root + "/blobs").c_str()), 0);
  EXPECT_TRUE(contains(open_status(root, "").message(), "its blobs is a symbolic link")) << open_status(root, "").message();
  ASSERT_EQ(::unlink((root + "/blobs").c_str()), 0);
  // The rest when others may enter the folder (a 0700 one only its owner can have changed).
  ASSERT_EQ(::chmod(root.c_str(), 0755), 0);
  ASSERT_EQ(::symlink((dir / "elsewhere").c_str(), (root + "/manifests").c_str()), 0);
  Status refused = open_status(root, "");
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(contains(refused.message(), "its manifests is a symbolic link")) << refused.message();
  ASSERT_EQ(::unlink((root + "/manifests").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "elsewhere/memo").c_str(), (root + "/file-memo").c_str()), 0);
  EXPECT_TRUE(contains(open_status(root, "").message(), "its file-memo is a symbolic link"));
  ASSERT_EQ(::unlink((root + "/file-memo").c_str()), 0);
  // The index and the store's lock are opened without following a link: the index cannot be
  // opened (its queries fail, lookups still work), and nothing is made where the links point.
  ASSERT_TRUE(Store::open(root).value()->put(record_for("first"), "code").ok());  // the index and lock made
  ASSERT_EQ(::unlink((root + "/index.sqlite").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "elsewhere/db").c_str(), (root + "/index.sqlite").c_str()), 0);
  ASSERT_EQ(::unlink((root + "/index.lock").c_str()), 0);
  ASSERT_EQ(::symlink((dir / "elsewhere/lock").c_str(), (root + "/index.lock").c_str()), 0);
  std::vector<std::string> notices;
  auto store = Store::open(root, options_with(&notices, ""));
  ASSERT_TRUE(store.ok()) << store.status().message();
  EXPECT_FALSE((*store)->statistics().ok());
  EXPECT_FALSE((*store)->put(record_for("x"), "code").ok());
  EXPECT_FALSE(fs::exists(dir / "elsewhere/db"));
  EXPECT_FALSE(fs::exists(dir / "elsewhere/lock"));
}

TEST(StoreOwnerTest, ABlobAnotherUserWroteIntoTheStoreIsNotLoaded) {
  testing::TempDir dir;
  std::vector<std::string> damage;
  StoreOptions options;
  options.shared_group = "";
  options.report_damage = [&](const std::string& m) { damage.push_back(m); };
  auto store = Store::open(dir / "store", options).value();
  auto r = record_for("tampered");
  ASSERT_TRUE(store->put(r, "code").ok());
  // Writable by everyone: anyone could have changed it.
  ASSERT_EQ(::chmod(store->blob_path(r.key).c_str(), 0666), 0);
  EXPECT_FALSE(store->get(r.key)->has_value());
  EXPECT_FALSE(fs::exists(store->blob_path(r.key)));
  ASSERT_FALSE(damage.empty());
  EXPECT_TRUE(contains(damage[0], "mode 0666")) << damage[0];
  if (::geteuid() != 0) return;
  // Another user's.
  ASSERT_TRUE(store->put(r, "code").ok());
  ASSERT_EQ(::chown(store->blob_path(r.key).c_str(), k_nobody, k_nobody), 0);
  EXPECT_FALSE(store->map(r.key)->has_value());
  EXPECT_FALSE(fs::exists(store->blob_path(r.key)));
  ASSERT_TRUE(store->put(r, "code").ok());
  EXPECT_EQ((*store->get(r.key))->bytes, "code");
}

TEST(StoreOwnerTest, AFifoPlantedForABlobOrAManifestIsRefusedUnreadAndNothingWaits) {
  testing::TempDir dir;
  StoreOptions options;
  options.shared_group = "";
  options.report_damage = [](const std::string&) {};
  auto store = Store::open(dir / "store", options).value();
  auto r = record_for("fifo");
  ASSERT_TRUE(store->put(r, "code").ok());
  ASSERT_TRUE(store->put_manifest(r.input_key, "").ok());
  std::string blob = store->blob_path(r.key), manifest = store->manifest_path(r.input_key);
  for (const std::string& path : {blob, manifest}) {
    ASSERT_EQ(::unlink(path.c_str()), 0);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
  }
  // Read in a thread: an open that waited for the FIFO's writer would never return, so the test
  // gives it 10 s and then writes to each FIFO itself, so that it ends either way.
  auto reads = std::async(std::launch::async, [&] {
    auto got = store->get(r.key);
    auto manifest_got = store->get_manifest(r.input_key);
    bool blob_refused = !got.ok() || !got->has_value();
    bool manifest_refused = !manifest_got.ok() || !manifest_got->has_value();
    return blob_refused && manifest_refused;
  });
  if (reads.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "a read of a FIFO in the store waited for a writer";
    for (const std::string& path : {blob, manifest})
      if (int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) ::close(fd);
  }
  EXPECT_TRUE(reads.get());
}

TEST(StoreOwnerTest, WithoutHomeTheCacheFolderIsUnderThePasswdHomeNeverUnderTmp) {
  ScopedEnv h("HOME", std::nullopt), x("XDG_CACHE_HOME", std::nullopt), k("KILN_CACHE_DIR", std::nullopt),
      c("KILN_CONFIG", "/dev/null"), s("KILN_SYSTEM_CONFIG", "/dev/null");
  auto settings = Settings::load();
  ASSERT_TRUE(settings.ok()) << settings.status().message();
  struct passwd* pw = ::getpwuid(::geteuid());
  struct stat st {};
  if (!pw || !pw->pw_dir || ::stat(pw->pw_dir, &st) != 0) GTEST_SKIP() << "this user has no home in its passwd entry";
  EXPECT_EQ(settings->cache_dir(), std::string(pw->pw_dir) + "/.cache/kiln");
  EXPECT_NE(settings->cache_dir().rfind("/tmp/.cache", 0), 0u);
}

// ---- the kiln binary

class KilnOwnerTest : public ::testing::Test {
 protected:
  // kiln ARGS with this test's $HOME and no configuration but `env`.
  testing::ProcessResult kiln(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), testing::kiln_binary());
    env.emplace("HOME", m_home.path());
    for (const char* unset :
         {"XDG_CACHE_HOME", "XDG_CONFIG_HOME", "KILN_CACHE_SHARED_GROUP", "KILN_REMOTE_CACHE", "KILN_SPEC_PATH"})
      env.emplace(unset, "");
    env.emplace("KILN_CONFIG", "/dev/null");
    env.emplace("KILN_SYSTEM_CONFIG", "/dev/null");
    return testing::run_process(args, env);
  }
  // The one host-so artifact of op `op` in the store at `root`, from its blob's own record.
  static std::optional<std::pair<ArtifactRecord, std::string>> artifact_in(const std::string& root,
                                                                           const std::string& op) {
    for (auto& e : fs::recursive_directory_iterator(root + "/blobs")) {
      if (!e.is_regular_file() || e.path().extension() != ".blob") continue;
      auto file = read_file(e.path().string());
      auto blob = file.ok() ? decode_blob(*file) : Result<DecodedBlob>(file.status());
      auto record = blob.ok() ? decode_record(blob->metadata) : Result<ArtifactRecord>(blob.status());
      if (record.ok() && record->op == op && record->kind == "host-so") return std::make_pair(*record, blob->content);
    }
    return std::nullopt;
  }
  testing::TempDir m_home, m_work;
};

TEST_F(KilnOwnerTest, APoisonedCacheFolderAnotherUserCanWriteIsRefusedAndNothingFromItIsLoaded) {
  REQUIRE_ROOT();
  std::string marker = m_work / "marker";
  // The artifact of the bundled vector_add, and of a vector_add whose library, once loaded, writes
  // a marker file: what an attacker would plant under the first one's key.
  std::string good = m_work / "good", evil = m_work / "evil", specs = m_work / "specs";
  auto built = kiln({"--cache-dir", good, "run", "vector_add", "--json"});
  ASSERT_EQ(built.exit_code, 0) << built.err;
  testing::copy_bundled_specs(specs);
  std::string kernel = specs + "/kernels/vector_add.cpp";
  ASSERT_TRUE(write_file_atomic(kernel, testing::read_text(kernel) +
                                            "\n#include <cstdio>\n#include <cstdlib>\n"
                                            "__attribute__((constructor)) static void kiln_test_marker() {\n"
                                            "  if (const char* p = std::getenv(\"KILN_TEST_MARKER\"))\n"
                                            "    if (std::FILE* f = std::fopen(p, \"w\")) std::fclose(f);\n}\n")
                  .ok());
  auto evil_built =
      kiln({"--cache-dir", evil, "run", "vector_add", "--spec-dir", specs, "--json"}, {{"KILN_TEST_MARKER", marker}});
  ASSERT_EQ(evil_built.exit_code, 0) << evil_built.err;
  ASSERT_TRUE(fs::exists(marker)) << "the marker library did not run where it was built";
  fs::remove(marker);
  auto real = artifact_in(good, "vector_add");
  auto planted = artifact_in(evil, "vector_add");
  ASSERT_TRUE(real && planted);
  ASSERT_NE(real->second, planted->second);

  // The poisoned cache: the real one's manifests and blobs, vector_add's blob holding the other code.
  std::string poisoned = m_work / "poisoned";
  fs::create_directories(poisoned);
  ::chmod(poisoned.c_str(), 0700);
  fs::copy(good + "/blobs", poisoned + "/blobs", fs::copy_options::recursive);
  fs::copy(good + "/manifests", poisoned + "/manifests", fs::copy_options::recursive);
  ArtifactRecord forged = real->first;
  forged.size = planted->second.size();
  plant_blob(poisoned, forged, planted->second);

  // Where its owner alone can write, kiln trusts it: the planted code runs (the attack is real).
  auto trusted = kiln({"--cache-dir", poisoned, "run", "vector_add", "--json"}, {{"KILN_TEST_MARKER", marker}});
  ASSERT_EQ(trusted.exit_code, 0) << trusted.err;
  ASSERT_TRUE(fs::exists(marker))
      << "the planted artifact was not loaded from a trusted folder: the test proves nothing" << trusted.err;
  fs::remove(marker);

  // Another user's, and anyone's to write: refused with one warning, nothing loaded from it, and
  // the op compiled into the user's own store.
  ASSERT_EQ(::chown(poisoned.c_str(), k_nobody, k_nobody), 0);
  ASSERT_EQ(::chmod(poisoned.c_str(), 0777), 0);
  auto refused = kiln({"--cache-dir", poisoned, "run", "vector_add", "--json"}, {{"KILN_TEST_MARKER", marker}});
  EXPECT_EQ(refused.exit_code, 0) << refused.err;
  EXPECT_EQ(json_field(refused.out, "check"), "ok") << refused.out;
  EXPECT_FALSE(fs::exists(marker)) << "code from the refused folder was loaded";
  EXPECT_EQ(count(refused.err, "kiln: warning:"), 1u) << refused.err;
  EXPECT_EQ(count(refused.err, "the cache folder " + poisoned + " is refused"), 1u) << refused.err;
  EXPECT_TRUE(contains(refused.err, "belongs to nobody (uid 65534)")) << refused.err;
  EXPECT_TRUE(contains(refused.err, "mode 0777")) << refused.err;
  std::string own = m_home / ".cache/kiln";
  EXPECT_TRUE(contains(refused.err, "kiln uses the private store " + own)) << refused.err;
  EXPECT_TRUE(artifact_in(own, "vector_add")) << "the op was not stored in the private store";
  // Through `kiln build` too (a hit from the private store now).
  auto build = kiln({"--cache-dir", poisoned, "build", testing::bundled_spec_dir() + "/vector_add.toml", "--json"},
                    {{"KILN_TEST_MARKER", marker}});
  EXPECT_EQ(build.exit_code, 0) << build.err;
  EXPECT_EQ(json_field(build.out, "source"), "disk") << build.out;
  EXPECT_FALSE(fs::exists(marker));
  // A `kiln cache` command acts on the folder named: refused, it fails, saying so, and touches
  // neither that folder nor the private store (clearing another folder would surprise its user).
  auto clear = kiln({"--cache-dir", poisoned, "cache", "clear"});
  EXPECT_NE(clear.exit_code, 0) << clear.out;
  EXPECT_TRUE(contains(clear.err, "cannot open the kiln cache " + poisoned)) << clear.err;
  EXPECT_TRUE(contains(clear.err, "belongs to nobody (uid 65534)")) << clear.err;
  EXPECT_TRUE(artifact_in(own, "vector_add")) << "the private store was cleared in the named folder's place";
  EXPECT_TRUE(artifact_in(poisoned, "vector_add"));
}

TEST_F(KilnOwnerTest, WithoutHomeKilnNeverMakesItsStoreUnderTmp) {
  // Its `kiln config` names the passwd entry's home (nothing is made to say so).
  bool tmp_cache_before = fs::exists("/tmp/.cache/kiln");
  auto shown = kiln({"config", "--json"}, {{"HOME", ""}, {"KILN_CACHE_DIR", ""}});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  struct passwd* pw = ::getpwuid(::geteuid());
  if (pw && pw->pw_dir && fs::is_directory(pw->pw_dir)) {
    EXPECT_TRUE(contains(shown.out, "\"value\":\"" + std::string(pw->pw_dir) + "/.cache/kiln\"")) << shown.out;
  }
  EXPECT_FALSE(contains(shown.out, "/tmp/.cache/kiln")) << shown.out;

  // A uid whose passwd home does not exist (nobody's is /nonexistent): a folder of the process's
  // own, made in $TMPDIR, used, and gone when it exits.
  if (::geteuid() != 0) GTEST_SKIP() << "running kiln as nobody needs root";
  std::string setpriv = testing::find_program("setpriv", {"/usr/bin/setpriv"});
  if (setpriv.empty()) GTEST_SKIP() << "setpriv (util-linux) is not installed";
  struct passwd* nobody = ::getpwuid(k_nobody);
  if (!nobody || fs::is_directory(nobody->pw_dir)) GTEST_SKIP() << "nobody has a home here";
  testing::TempDir tmp, specs;
  ::chmod(tmp.path().c_str(), 01777);
  testing::copy_bundled_specs(specs.path());
  ::chmod(specs.path().c_str(), 0755);
  auto run = testing::run_process({setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", testing::kiln_binary(),
                                   "run", "vector_add", "--spec-dir", specs.path(), "--json"},
                                  {{"HOME", ""},
                                   {"KILN_CACHE_DIR", ""},
                                   {"XDG_CACHE_HOME", ""},
                                   {"XDG_CONFIG_HOME", ""},
                                   {"TMPDIR", tmp.path()},
                                   {"KILN_CONFIG", "/dev/null"},
                                   {"KILN_SYSTEM_CONFIG", "/dev/null"}});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(json_field(run.out, "check"), "ok") << run.out;
  EXPECT_EQ(count(run.err, "kiln: warning:"), 0u) << run.err;
  EXPECT_EQ(entries_in(tmp.path()), 0u) << "the private folder outlived its process";
  if (!tmp_cache_before) {
    EXPECT_FALSE(fs::exists("/tmp/.cache/kiln"));
  }
}

}  // namespace
}  // namespace kiln::cache
