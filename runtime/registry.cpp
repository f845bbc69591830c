#include "runtime/registry.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

namespace kiln::runtime {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendRegistration> backends;
  std::map<std::string, std::unique_ptr<Accelerator>> created;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: accelerators outlive static teardown
  return *r;
}

std::string names_of(const Registry& r) {
  std::string out;
  for (auto& [n, _] : r.backends) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

}  // namespace

Status register_backend(BackendRegistration registration, bool replace_existing) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (registration.name.empty() || !registration.create) return invalid_argument("a backend needs a name and a factory");
  if (r.backends.count(registration.name) && !replace_existing)
    return invalid_argument("backend '" + registration.name + "' is already registered");
  std::string name = registration.name;
  r.backends[name] = std::move(registration);
  return {};
}

std::vector<std::string> registered_backends() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (auto& [n, _] : r.backends) out.push_back(n);
  return out;
}

Result<Accelerator*> get_accelerator(const std::string& requested) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::string name = requested;
  if (name.empty()) {
    if (const char* env = std::getenv("KILN_ACCELERATOR"); env && *env) name = env;
  }
  if (name.empty()) {
    std::vector<const BackendRegistration*> order;
    for (auto& [_, b] : r.backends) order.push_back(&b);
    std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->priority > b->priority; });
    for (auto* b : order) {
      if (!b->is_available || b->is_available()) {
        name = b->name;
        break;
      }
    }
    if (name.empty()) return unavailable("no accelerator is available (registered: " + names_of(r) + ")");
  }
  if (auto it = r.created.find(name); it != r.created.end()) return it->second.get();
  auto it = r.backends.find(name);
  if (it == r.backends.end())
    return not_found("no accelerator named '" + name + "' (registered: " + names_of(r) + ")");
  if (it->second.is_available && !it->second.is_available())
    return unavailable("accelerator '" + name + "' is registered but not available on this machine");
  auto made = it->second.create();
  if (!made.ok()) return made.status();
  Accelerator* acc = made.value().get();
  r.created[name] = std::move(made).value();
  return acc;
}

}  // namespace kiln::runtime
