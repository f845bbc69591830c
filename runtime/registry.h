// Backends register a factory under a name; callers get an Accelerator by name, from
// KILN_ACCELERATOR, or the first available one in priority order.
//
// Registering does nothing but remember the factory: no device is opened, no thread
// started, until get_accelerator() creates the backend (once per process, then shared).
// Asking which backends are available must not initialise any of them either, so a process
// may fork after asking and still use the device in the child. Thread-safe.
//
// Plug-ins: KILN_PLUGINS names shared libraries (':'-separated) that are loaded on the
// first call into the registry; each registers its backends through runtime/plugin.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/accelerator.h"

namespace kiln::runtime {

struct BackendRegistration {
  std::string name;
  int priority = 0;  // higher is tried first when nothing is asked for by name
  // Cheap check that must not initialise the backend (no context, no thread, no cuInit):
  // ok, or kUnavailable saying why not. Null means always available.
  std::function<Status()> is_available;
  std::function<Result<std::unique_ptr<Accelerator>>()> create;
  // False: never chosen by auto-detection, only by name (KILN_ACCELERATOR=opencl). For a
  // backend whose cheap check cannot tell a real accelerator from one that runs on the host's
  // CPU (OpenCL's ICD loader is everywhere; PoCL is a CPU device).
  bool auto_select = true;
};

// The priorities of the built-in backends: auto-detection tries them in this order.
inline constexpr int k_priority_cuda = 100;
inline constexpr int k_priority_hip = 90;
inline constexpr int k_priority_opencl = 50;
inline constexpr int k_priority_cpu = 0;

// A second registration of a name fails unless `replace_existing` is set.
Status register_backend(BackendRegistration registration, bool replace_existing = false);

std::vector<std::string> registered_backends();

// What `kiln doctor` shows: each registered backend, highest priority first.
struct BackendInfo {
  std::string name;
  int priority = 0;
  bool available = false;  // from is_available(): nothing was initialised to learn it
  std::string reason;      // why not, when not available
  std::string origin;      // "built in", or the plug-in's path
};
std::vector<BackendInfo> backend_infos();

// Loads one plug-in now (KILN_PLUGINS entries go through here). Errors name the file and
// what is wrong: missing, not a kiln plug-in, a different plug-in ABI, or its own message.
Status load_plugin(const std::string& path);
// Problems met loading KILN_PLUGINS, one message each (they are also printed once on stderr).
std::vector<std::string> plugin_errors();

// `name` empty: KILN_ACCELERATOR if set, else the available backend of highest priority.
// The Accelerator lives until the process exits.
Result<Accelerator*> get_accelerator(const std::string& name = "");

}  // namespace kiln::runtime
