#include "runtime/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "runtime/plugin.h"

namespace kiln::runtime {
namespace {

struct Backend {
  BackendRegistration registration;
  std::string origin;  // "built in", or the plug-in's path
};

struct Registry {
  std::mutex mutex;
  std::map<std::string, Backend> backends;
  std::map<std::string, std::unique_ptr<Accelerator>> created;
  std::vector<std::string> plugin_errors;

  // Highest priority first; equal priorities by name.
  std::vector<const Backend*> by_priority() const {
    std::vector<const Backend*> out;
    for (auto& [_, b] : backends) out.push_back(&b);
    std::stable_sort(out.begin(), out.end(),
                     [](auto* a, auto* b) { return a->registration.priority > b->registration.priority; });
    return out;
  }
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: accelerators outlive static teardown
  return *r;
}

// Set while a plug-in's init runs, so its registrations are attributed to it.
thread_local const std::string* t_loading_plugin = nullptr;

std::string names_of(const Registry& r) {
  std::string out;
  for (auto& [n, _] : r.backends) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// KILN_PLUGINS is read once, on the first call into the registry (never at load time).
void load_env_plugins_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("KILN_PLUGINS");
    if (!env || !*env) return;
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      std::string path = list.substr(start, end - start);
      start = end + 1;
      if (path.empty()) continue;
      Status st = load_plugin(path);
      if (!st.ok()) {
        std::cerr << "kiln: warning: KILN_PLUGINS: " << st.message() << "\n";
        auto& r = registry();
        std::lock_guard lock(r.mutex);
        r.plugin_errors.push_back(st.message());
      }
    }
  });
}

}  // namespace

Status register_backend(BackendRegistration registration, bool replace_existing) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (registration.name.empty() || !registration.create) return invalid_argument("a backend needs a name and a factory");
  if (auto it = r.backends.find(registration.name); it != r.backends.end() && !replace_existing)
    return invalid_argument("backend '" + registration.name + "' is already registered (" + it->second.origin +
                            "); pass replace_existing to override it");
  if (r.created.count(registration.name))
    return invalid_argument("backend '" + registration.name + "' is already in use and cannot be replaced");
  std::string name = registration.name;
  r.backends[name] = Backend{std::move(registration), t_loading_plugin ? *t_loading_plugin : "built in"};
  return {};
}

Status load_plugin(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = ::dlerror();
    return unavailable("cannot load plug-in " + path + ": " + (e ? e : "unknown error"));
  }
  auto* abi = reinterpret_cast<const int*>(::dlsym(handle, k_plugin_abi_symbol));
  auto init = reinterpret_cast<PluginInitFn>(::dlsym(handle, k_plugin_init_symbol));
  if (!abi || !init) {
    ::dlclose(handle);
    return invalid_argument(path + " is not a kiln plug-in (it defines no " + k_plugin_abi_symbol + " and " +
                            k_plugin_init_symbol + "; see runtime/plugin.h)");
  }
  if (int version = *abi; version != k_plugin_abi_version) {
    ::dlclose(handle);  // `abi` points into it: read before
    return invalid_argument(path + " was built for kiln plug-in ABI " + std::to_string(version) + ", this kiln speaks " +
                            std::to_string(k_plugin_abi_version) + ": rebuild it against this kiln");
  }
  PluginHost host;
  host.register_backend = &register_backend;
  char error[512] = {};
  t_loading_plugin = &path;
  int rc = init(&host, error, sizeof error);
  t_loading_plugin = nullptr;
  // Never dlclose after init: it may have registered factories that point into it.
  if (rc != 0) return internal_error("plug-in " + path + " failed to initialise: " + (error[0] ? error : "no reason given"));
  return {};
}

std::vector<std::string> plugin_errors() {
  load_env_plugins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  return r.plugin_errors;
}

std::vector<std::string> registered_backends() {
  load_env_plugins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> out;
  for (auto& [n, _] : r.backends) out.push_back(n);
  return out;
}

std::vector<BackendInfo> backend_infos() {
  load_env_plugins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<BackendInfo> out;
  for (const Backend* b : r.by_priority()) {
    const auto& reg = b->registration;
    Status st = reg.is_available ? reg.is_available() : Status{};
    out.push_back({reg.name, reg.priority, st.ok(), st.message(), b->origin});
  }
  return out;
}

Result<Accelerator*> get_accelerator(const std::string& requested) {
  load_env_plugins_once();
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  std::string name = requested;
  if (name.empty()) {
    if (const char* env = std::getenv("KILN_ACCELERATOR"); env && *env) name = env;
  }
  bool probed = false;  // auto-detection has already found it available
  if (name.empty()) {
    for (const Backend* b : r.by_priority()) {
      const auto& reg = b->registration;
      if (!reg.auto_select) continue;  // chosen by name only
      // One already made is available: no need to probe the device again.
      if (r.created.count(reg.name) || !reg.is_available || reg.is_available().ok()) {
        name = reg.name;
        probed = true;
        break;
      }
    }
    if (name.empty()) return unavailable("no accelerator is available (registered: " + names_of(r) + ")");
  }
  if (auto it = r.created.find(name); it != r.created.end()) return it->second.get();
  auto it = r.backends.find(name);
  if (it == r.backends.end()) {
    std::string hint = r.plugin_errors.empty() ? "" : " (a plug-in failed to load: " + r.plugin_errors.front() + ")";
    return not_found("no accelerator named '" + name + "' (registered: " + names_of(r) + ")" + hint);
  }
  const auto& reg = it->second.registration;
  if (reg.is_available && !probed) {
    if (Status st = reg.is_available(); !st.ok())
      return unavailable("accelerator '" + name + "' is not available here: " + st.message());
  }
  auto made = reg.create();
  if (!made.ok()) return made.status();
  Accelerator* acc = made.value().get();
  r.created[name] = std::move(made).value();
  return acc;
}

}  // namespace kiln::runtime
