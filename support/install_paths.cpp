#include "support/install_paths.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

#include "support/file_util.h"

namespace kiln {

std::string own_object_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&own_object_dir), &info) && info.dli_fname && *info.dli_fname)
    return dirname_of(absolute_path(info.dli_fname));
  return ".";
}

std::string find_kiln_file(const std::string& name, const char* env_var, const std::string& build_path) {
  if (const char* env = std::getenv(env_var); env && *env) return env;
  std::string dir = own_object_dir();
  for (const std::string& candidate : {dir + "/" + name, dir + "/kiln/" + name, dir + "/../lib/kiln/" + name, dir + "/../lib/" + name,
                                       dir + "/../bin/" + name})
    if (::access(candidate.c_str(), R_OK) == 0) return absolute_path(candidate);
  return build_path;
}

const std::string& installed_data_dir() {
  // Computed once: a hit path asks for the bundled spec folder, and this costs a few stats.
  static const std::string dir = [] {
    std::string candidate = dirname_of(own_object_dir()) + "/share/kiln";
    return ::access((candidate + "/specs").c_str(), R_OK | X_OK) == 0 ? candidate : std::string();
  }();
  return dir;
}

}  // namespace kiln
