// Where an installed kiln keeps its files, found without any KILN_* variable.
//
// `cmake --install` lays kiln out as <prefix>/bin/kiln, <prefix>/lib/libkiln.so,
// <prefix>/lib/kiln/libkiln_jit_clang.so and <prefix>/share/kiln/{specs,include}. Code linked
// into the kiln program or into libkiln.so finds <prefix> from its own file (dladdr), so a
// tree installed in one place and moved to another keeps working. A build tree has no
// share/kiln beside its bin/ and lib/: then the folders compiled in (the source tree) are used.
#pragma once

#include <string>

namespace kiln {

// "<prefix>/share/kiln" when this code runs from an installed tree, else "".
const std::string& installed_data_dir();

// The folder of the executable or shared library this code is linked into.
std::string own_object_dir();

// One of kiln's own files that is not data (the toolchain library, the helper programs): the
// file `env_var` names when set, else `name` found beside the code running (bin/ or lib/ of a
// build tree; bin/, lib/ or lib/kiln/ of an installed tree), else `build_path`, where the build
// tree put it.
std::string find_kiln_file(const std::string& name, const char* env_var, const std::string& build_path);

}  // namespace kiln
