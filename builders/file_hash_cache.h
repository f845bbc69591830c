// Content hashes of files, remembered per process and trusted while the file's identity
// and times are unchanged (like ccache's direct mode). Re-hashing the ~30 headers a small
// kernel includes costs ~130 us per lookup; a stat each costs ~30 us in all.
//
// A hash is remembered only for a file whose modification time was at least two seconds in
// the past when it was hashed, so a write in the same timestamp tick as the hash cannot go
// unseen; ctime (which no user can set) also enters the comparison. Thread-safe.
#pragma once

#include <string>

#include "support/hash.h"
#include "support/status.h"

namespace kiln::builders {

Result<Hash128> hash_file_cached(const std::string& path);

}  // namespace kiln::builders
