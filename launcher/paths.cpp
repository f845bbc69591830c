#include "launcher/paths.h"

#include <unistd.h>

#include <cstdlib>

#include "support/file_util.h"

namespace kiln::launcher {

PathLabels::PathLabels(std::string cwd, std::vector<std::string> bases) : m_cwd(absolute_path(cwd)) {
  m_prefixes.push_back("cwd:");
  for (auto& b : bases) {
    if (b.empty() || b[0] != '/') continue;
    m_bases.push_back(absolute_path(b));
    m_prefixes.push_back("base" + std::to_string(m_bases.size() - 1) + ":");
  }
}

PathLabels PathLabels::from_environment() {
  char buf[4096];
  std::string cwd = ::getcwd(buf, sizeof buf) ? buf : "/";
  std::vector<std::string> bases;
  std::string_view list = std::getenv("KILN_CC_BASEDIR") ? std::getenv("KILN_CC_BASEDIR") : "";
  for (size_t at = 0; at <= list.size();) {
    size_t colon = std::min(list.find(':', at), list.size());
    if (colon > at) bases.emplace_back(list.substr(at, colon - at));
    at = colon + 1;
  }
  return PathLabels(std::move(cwd), std::move(bases));
}

std::string PathLabels::label(const std::string& path) const {
  std::string abs = path.empty() || path[0] != '/' ? absolute_path(m_cwd + "/" + path) : absolute_path(path);
  // The working folder first: a build folder inside a base is still the build folder.
  if (path_is_within(abs, m_cwd)) return abs == m_cwd ? "cwd:." : "cwd:" + relative_to(abs, m_cwd);
  for (size_t i = 0; i < m_bases.size(); ++i)
    if (path_is_within(abs, m_bases[i])) return m_prefixes[i + 1] + (abs == m_bases[i] ? "." : relative_to(abs, m_bases[i]));
  return abs;
}

std::string PathLabels::base_label(const std::string& abs_path) const {
  std::string abs = absolute_path(abs_path);
  for (size_t i = 0; i < m_bases.size(); ++i)
    if (path_is_within(abs, m_bases[i])) return m_prefixes[i + 1] + (abs == m_bases[i] ? "." : relative_to(abs, m_bases[i]));
  return abs;
}

std::string PathLabels::path_of(const std::string& label) const {
  auto join = [](const std::string& root, std::string_view rest) { return rest == "." ? root : root + "/" + std::string(rest); };
  if (label.rfind("cwd:", 0) == 0) return join(m_cwd, std::string_view(label).substr(4));
  for (size_t i = 0; i < m_bases.size(); ++i)
    if (label.rfind(m_prefixes[i + 1], 0) == 0) return join(m_bases[i], std::string_view(label).substr(m_prefixes[i + 1].size()));
  if (!label.empty() && label[0] == '/') return label;
  return "";
}

std::vector<std::string_view> PathLabels::relative_prefixes() const {
  return std::vector<std::string_view>(m_prefixes.begin(), m_prefixes.end());
}

}  // namespace kiln::launcher
