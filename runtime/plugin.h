// The contract between kiln and a third-party accelerator in a shared library.
//
// A plug-in is a shared library built against the same runtime headers (accelerator.h,
// registry.h) with the same compiler ABI as kiln. It writes one line,
//
//   KILN_PLUGIN(register_my_backends)   // Status register_my_backends(const PluginHost&)
//
// whose function registers its backends with host.register_backend. The macro exports the
// plug-in's ABI version, which kiln reads before calling anything, and an init function that
// checks the struct sizes both sides were built with. kiln loads the plug-ins named in
// KILN_PLUGINS on the first call into the registry and never unloads them (their code runs
// as long as their accelerator lives).
#pragma once

#include <cstddef>
#include <cstdio>

#include "runtime/registry.h"

namespace kiln::runtime {

// 2: Kernel::launch takes a LaunchConfig (dynamic shared memory); kiln_cpu_block grew.
inline constexpr int k_plugin_abi_version = 2;

struct PluginHost {
  int abi_version = k_plugin_abi_version;
  size_t registration_size = sizeof(BackendRegistration);
  size_t accelerator_size = sizeof(Accelerator);
  Status (*register_backend)(BackendRegistration registration, bool replace_existing) = nullptr;
};

using PluginInitFn = int (*)(const PluginHost* host, char* error, size_t error_size);
inline constexpr const char* k_plugin_init_symbol = "kiln_plugin_init";
inline constexpr const char* k_plugin_abi_symbol = "kiln_plugin_abi_version";

namespace plugin_detail {
inline int run_init(const PluginHost* host, char* error, size_t error_size, Status (*fn)(const PluginHost&)) {
  Status st;
  if (!host || host->abi_version != k_plugin_abi_version || host->registration_size != sizeof(BackendRegistration) ||
      host->accelerator_size != sizeof(Accelerator) || !host->register_backend)
    st = invalid_argument("the plug-in was built against different kiln runtime headers");
  else
    st = fn(*host);
  if (st.ok()) return 0;
  std::snprintf(error, error_size, "%s", st.message().c_str());
  return 1;
}
}  // namespace plugin_detail

}  // namespace kiln::runtime

#define KILN_PLUGIN(register_fn)                                                                                  \
  extern "C" __attribute__((visibility("default"))) const int kiln_plugin_abi_version =                          \
      ::kiln::runtime::k_plugin_abi_version;                                                                      \
  extern "C" __attribute__((visibility("default"))) int kiln_plugin_init(const ::kiln::runtime::PluginHost* host, \
                                                                         char* error, size_t error_size) {        \
    return ::kiln::runtime::plugin_detail::run_init(host, error, error_size, register_fn);                       \
  }
