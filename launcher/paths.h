// Paths as they enter a launcher's keys and manifests: a path inside the compile's working folder
// as "cwd:<relative path>", one inside a base folder (KILN_CC_BASEDIR, ':'-separated, in order)
// as "base<i>:<relative path>", any other as its absolute path. Two nodes whose workspaces lie in
// different places, with the same layout beneath, then make the same keys: FlashInfer's
// workspace under each user's home, DeepGEMM's absolute -I paths into a venv.
//
// Paths are normalised lexically (absolute_path): a symlink is not resolved, so a label says
// where the compiler was told to look, which is what its depfile says it read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::launcher {

class PathLabels {
 public:
  // `cwd` and `bases` absolute; a base that is not absolute is left out.
  PathLabels(std::string cwd, std::vector<std::string> bases);
  // From the process: getcwd() and $KILN_CC_BASEDIR.
  static PathLabels from_environment();

  // The label of `path` (relative paths are relative to cwd).
  std::string label(const std::string& path) const;
  // The label of an absolute path among the base folders alone (the working folder is not one):
  // what names the working folder itself.
  std::string base_label(const std::string& abs_path) const;
  // Where a label's file is on this node; "" for a label that names a base this node lacks.
  std::string path_of(const std::string& label) const;
  // The prefixes of labels that are relative ("cwd:", "base0:", ...), for checking labels that
  // came from elsewhere (check_manifest_labels).
  std::vector<std::string_view> relative_prefixes() const;

  const std::string& cwd() const { return m_cwd; }
  const std::vector<std::string>& bases() const { return m_bases; }

 private:
  std::string m_cwd;
  std::vector<std::string> m_bases;
  std::vector<std::string> m_prefixes;
};

}  // namespace kiln::launcher
