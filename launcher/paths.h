// Paths as they enter a launcher's keys and manifests: a path inside the compile's working folder
// as "cwd:<relative path>", one inside a base folder (KILN_CC_BASEDIR, ':'-separated, in order)
// as "base<i>:<relative path>", any other as its absolute path. Where several of those folders
// hold it, the innermost names it (the working folder on a tie). Two nodes whose workspaces lie in
// different places, with the same layout beneath, then make the same keys: FlashInfer's
// workspace under each user's home, DeepGEMM's absolute -I paths into a venv.
//
// A base written "DIR/*" stands for whichever one folder directly under DIR holds the compile's
// source (bind_source): tools that write each source into a fresh temporary folder (TileLang's
// /tmp/tmpXXXX/tvm_kernels.cu) then key it by its name in that folder. Only that one folder is
// the base; any other folder under DIR keeps its absolute path, so a label still names one file.
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
  // Binds each "DIR/*" base to the folder under DIR that holds `source` (relative to cwd); true
  // when one was bound (labels made before then may change). A base the source is not under
  // matches nothing.
  bool bind_source(const std::string& source);

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
  std::string absolute(const std::string& path) const;  // relative to cwd, normalised
  size_t innermost_base(const std::string& abs) const;  // npos for none
  std::string label_in_bases(const std::string& abs, size_t base) const;  // `base` from innermost_base

  std::vector<std::string> m_bases;  // "" for a pattern not bound
  std::vector<std::string> m_patterns;  // per base: DIR of "DIR/*", or "" for a plain base
  std::vector<std::string> m_prefixes;
};

}  // namespace kiln::launcher
