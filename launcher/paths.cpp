#include "launcher/paths.h"

#include <unistd.h>

#include <cstdlib>

#include "support/file_util.h"

namespace kiln::launcher {

PathLabels::PathLabels(std::string cwd, std::vector<std::string> bases) : m_cwd(absolute_path(cwd)) {
  m_prefixes.push_back("cwd:");
  for (auto& b : bases) {
    if (b.empty() || b[0] != '/') continue;
    bool pattern = b.size() > 2 && b.compare(b.size() - 2, 2, "/*") == 0;
    m_patterns.push_back(pattern ? absolute_path(b.substr(0, b.size() - 2)) : "");
    m_bases.push_back(pattern ? "" : absolute_path(b));
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

std::string PathLabels::absolute(const std::string& path) const {
  return path.empty() || path[0] != '/' ? absolute_path(m_cwd + "/" + path) : absolute_path(path);
}

bool PathLabels::bind_source(const std::string& source) {
  std::string abs = absolute(source);
  bool bound = false;
  for (size_t i = 0; i < m_patterns.size(); ++i) {
    if (m_patterns[i].empty()) continue;
    m_bases[i].clear();
    if (abs == m_patterns[i] || !path_is_within(abs, m_patterns[i])) continue;
    std::string rest = relative_to(abs, m_patterns[i]);
    size_t slash = rest.find('/');
    if (slash == std::string::npos || slash == 0) continue;  // the source must lie in a folder under DIR
    m_bases[i] = m_patterns[i] + "/" + rest.substr(0, slash);
    bound = true;
  }
  return bound;
}

size_t PathLabels::innermost_base(const std::string& abs) const {
  size_t best = std::string::npos;
  for (size_t i = 0; i < m_bases.size(); ++i)
    if (!m_bases[i].empty() && path_is_within(abs, m_bases[i]) && (best == std::string::npos || m_bases[i].size() > m_bases[best].size()))
      best = i;
  return best;
}

std::string PathLabels::label(const std::string& path) const {
  std::string abs = absolute(path);
  // The innermost folder that holds it names it: a build folder inside a base is still the build
  // folder, a source's temporary folder inside the build folder is still its own (bind_source).
  // On a tie the working folder.
  size_t base = innermost_base(abs);
  if (path_is_within(abs, m_cwd) && (base == std::string::npos || m_cwd.size() >= m_bases[base].size()))
    return abs == m_cwd ? "cwd:." : "cwd:" + relative_to(abs, m_cwd);
  return label_in_bases(abs, base);
}

std::string PathLabels::base_label(const std::string& abs_path) const {
  std::string abs = absolute_path(abs_path);
  return label_in_bases(abs, innermost_base(abs));
}

std::string PathLabels::label_in_bases(const std::string& abs, size_t base) const {
  if (base == std::string::npos) return abs;
  return m_prefixes[base + 1] + (abs == m_bases[base] ? "." : relative_to(abs, m_bases[base]));
}

std::string PathLabels::path_of(const std::string& label) const {
  auto join = [](const std::string& root, std::string_view rest) { return rest == "." ? root : root + "/" + std::string(rest); };
  if (label.rfind("cwd:", 0) == 0) return join(m_cwd, std::string_view(label).substr(4));
  for (size_t i = 0; i < m_bases.size(); ++i)
    if (label.rfind(m_prefixes[i + 1], 0) == 0) return m_bases[i].empty() ? "" : join(m_bases[i], std::string_view(label).substr(m_prefixes[i + 1].size()));
  if (!label.empty() && label[0] == '/') return label;
  return "";
}

std::vector<std::string_view> PathLabels::relative_prefixes() const {
  return std::vector<std::string_view>(m_prefixes.begin(), m_prefixes.end());
}

}  // namespace kiln::launcher
