// Plug-ins that must be refused, built twice from this file:
//   KILN_BROKEN_WRONG_ABI     exports a plug-in ABI version this kiln does not speak
//   KILN_BROKEN_FAILING_INIT  speaks it, but its registration fails with a reason of its own
#include "runtime/plugin.h"

#if defined(KILN_BROKEN_WRONG_ABI)
extern "C" __attribute__((visibility("default"))) const int kiln_plugin_abi_version = 999;
extern "C" __attribute__((visibility("default"))) int kiln_plugin_init(const kiln::runtime::PluginHost*, char*, size_t) {
  return 0;  // never called: kiln reads the version first
}
#elif defined(KILN_BROKEN_FAILING_INIT)
static kiln::Status refuse(const kiln::runtime::PluginHost&) {
  return kiln::unavailable("the frobnicator device is not plugged in");
}
KILN_PLUGIN(refuse)
#endif
