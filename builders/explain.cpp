#include "builders/explain.h"

#include <map>

#include "cache/cache_key.h"
#include "jit/toolchain_loader.h"

namespace kiln::builders {
namespace {

using Components = std::vector<std::pair<std::string, std::string>>;

std::map<std::string, std::vector<std::string>> by_field(const Components& c) {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [f, v] : c) out[f].push_back(v);
  return out;
}

std::string join(const std::vector<std::string>& v) {
  if (v.empty()) return "(none)";
  std::string out;
  for (auto& s : v) out += (out.empty() ? "'" : ", '") + (s.size() > 40 && s[0] == '#' ? s.substr(0, 13) + "..." : s) + "'";
  return out;
}

// What differs between the stored entry's components and the current ones. Header
// contents are compared only when the current header list is known.
std::vector<std::string> differences(const Components& stored, const Components& current, bool headers_known) {
  auto a = by_field(stored), b = by_field(current);
  std::vector<std::string> out;
  std::map<std::string, bool> fields;
  for (auto& [f, _] : a) fields[f] = true;
  for (auto& [f, _] : b) fields[f] = true;
  for (auto& [f, _] : fields) {
    bool header = f.rfind("header-content:", 0) == 0;
    if (header && !headers_known) continue;
    const auto& old_values = a[f];
    const auto& new_values = b[f];
    if (old_values == new_values) continue;
    if (header) {
      std::string label = f.substr(15);
      if (old_values.empty()) out.push_back("header " + label + ": now included, was not");
      else if (new_values.empty()) out.push_back("header " + label + ": no longer included");
      else out.push_back("header " + label + ": content differs");
    } else if (f.rfind("source-text:", 0) == 0) {
      out.push_back("source " + f.substr(12) + ": content differs");
    } else if (f == "toolchain") {
      out.push_back("toolchain: " + join(old_values) + " -> " + join(new_values));
    } else {
      out.push_back(f + ": " + join(old_values) + " -> " + join(new_values));
    }
  }
  if (!headers_known) out.push_back("(the headers these inputs include are not known until they compile once)");
  return out;
}

}  // namespace

Result<Explanation> explain_miss(Ops& ops, const OpSpec& spec, const Target& target) {
  Explanation e;
  e.op = spec.name;
  e.target = target.str();
  cache::Store* store = ops.store();
  if (!store) return unavailable("the cache is not available, so every build compiles");
  KILN_ASSIGN_OR_RETURN(BuildRequest request, make_build_request(spec, target));
  KILN_ASSIGN_OR_RETURN(std::string identity, jit::clang_toolchain_identity());
  KeyParts input = input_key(request, identity, /*with_components=*/true);
  Components current = input.components;
  bool headers_known = false;
  auto manifest_text = store->get_manifest(input.key);
  if (manifest_text.ok() && manifest_text->has_value()) {
    auto manifest = decode_manifest(**manifest_text);
    if (manifest.ok()) {
      if (auto hashes = rehash_manifest(manifest.value(), spec)) {
        KeyParts full = artifact_key(input, *hashes);
        e.key = full.key;
        current = full.components;
        headers_known = true;
        auto stored = store->find(full.key.hex());
        e.cached = stored.ok() && stored->has_value();
      }
    }
  }
  KILN_ASSIGN_OR_RETURN(auto entries, store->list(spec.name, target.str()));
  e.stored_entries = entries.size();
  for (auto& r : entries) {
    if (e.key && r.key == *e.key) continue;
    auto diff = differences(cache::decode_components(r.components), current, headers_known);
    if (!e.nearest || diff.size() < e.nearest->differences.size() ||
        (diff.size() == e.nearest->differences.size() && r.created > e.nearest->created))
      e.nearest = Explanation::Nearest{r.key, r.created, r.kind, std::move(diff)};
  }
  return e;
}

}  // namespace kiln::builders
