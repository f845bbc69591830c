// `kiln key`: publisher keys (docs/SECURITY.md). `generate` writes an Ed25519 private key to a
// new owner-only file and prints its public half as NAME:BASE64, what readers list in
// KILN_TRUSTED_KEYS; `public` prints the public half of an existing key file again.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cache/trust.h"
#include "support/file_util.h"
#include "tools/cli_common.h"

namespace kiln::tools {
namespace {

constexpr const char* k_key_help = R"(usage: kiln key generate NAME --out FILE
       kiln key public FILE

generate  writes a new Ed25519 private key named NAME to FILE (created, mode 0600; an existing
          FILE is never overwritten) and prints its public key as NAME:BASE64 on stdout.
public    prints the public key of the private key in FILE.

A publisher (a CI job, the node that builds for the cluster) names its key file in
KILN_SIGNING_KEY_FILE (remote.signing_key_file); every node lists the public keys whose
objects it loads in KILN_TRUSTED_KEYS (remote.trusted_keys, comma or space separated). A node
that trusts keys but holds none publishes nothing. Rotate by adding a new key (ci-2) to the
trusted list before the publisher switches, then revoke the old one (remote.revoked_keys).
See docs/SECURITY.md.
)";

// Writes `text` to a new file that only its owner can read: O_EXCL, so an existing key (or a
// link planted in its place) is never overwritten or followed.
Status write_new_secret(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return invalid_argument(path + " already exists: kiln never overwrites a key (remove it, or choose another file)");
    return errno_status("create " + path, errno);
  }
  Status st = write_all(fd, text, path);
  if (st.ok() && ::fsync(fd) != 0) st = errno_status("fsync " + path, errno);
  ::close(fd);
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

}  // namespace

int cmd_key(const std::vector<std::string>& argv, const GlobalOptions&) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::cout << k_key_help;
    return argv.empty() ? 2 : 0;
  }
  if (argv[0] == "generate") {
    std::string name, out;
    for (size_t i = 1; i < argv.size(); ++i) {
      if (argv[i] == "--help" || argv[i] == "-h") return std::cout << k_key_help, 0;
      if (argv[i] == "--out" && i + 1 < argv.size()) out = argv[++i];
      else if (argv[i].rfind("--out=", 0) == 0) out = argv[i].substr(6);
      else if (argv[i].rfind("-", 0) == 0) return usage_error("unknown option " + argv[i], k_key_help);
      else if (name.empty()) name = argv[i];
      else return usage_error("key generate takes one NAME", k_key_help);
    }
    if (name.empty() || out.empty()) return usage_error("key generate needs a NAME and --out FILE", k_key_help);
    auto key = cache::generate_signing_key(name);
    if (!key.ok()) return fail(key.status());
    Status st = write_new_secret(out, cache::format_signing_key(*key));
    if (!st.ok()) return fail(st);
    std::cout << key->public_key.str() << "\n";
    std::cerr << "kiln: wrote the private key " << name << " to " << out
              << " (mode 0600); publish with KILN_SIGNING_KEY_FILE=" << out << ", trust with KILN_TRUSTED_KEYS=" << key->public_key.str()
              << "\n";
    return 0;
  }
  if (argv[0] == "public") {
    if (argv.size() != 2) return usage_error("key public takes one FILE", k_key_help);
    auto key = cache::read_signing_key_file(argv[1]);
    if (!key.ok()) return fail(key.status());
    std::cout << key->public_key.str() << "\n";
    return 0;
  }
  return usage_error("unknown key command '" + argv[0] + "'", k_key_help);
}

}  // namespace kiln::tools
