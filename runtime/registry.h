// Backends register a factory under a name; callers get an Accelerator by name, from
// KILN_ACCELERATOR, or the first available one in priority order.
//
// Registering does nothing but remember the factory: no device is opened, no thread
// started, until get_accelerator() creates the backend (once per process, then shared).
// Thread-safe.
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
  // Cheap check that must not initialise the backend (no context, no thread).
  std::function<bool()> is_available;
  std::function<Result<std::unique_ptr<Accelerator>>()> create;
};

// A second registration of a name fails unless `replace_existing` is set.
Status register_backend(BackendRegistration registration, bool replace_existing = false);

std::vector<std::string> registered_backends();

// `name` empty: KILN_ACCELERATOR if set, else the available backend of highest priority.
// The Accelerator lives until the process exits.
Result<Accelerator*> get_accelerator(const std::string& name = "");

}  // namespace kiln::runtime
