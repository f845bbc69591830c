// A host shared object loaded from bytes: written to a memfd and opened with dlopen, so a
// cached artifact never needs a file of its own on disk. What the CPU backend (and any
// accelerator that runs host code, such as a plug-in) builds its modules on.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "support/status.h"

namespace kiln::runtime {

class HostObject {
 public:
  // `label` names it in messages and in /proc/self/maps ("kiln:<label>").
  static Result<std::unique_ptr<HostObject>> load(std::string_view bytes, const std::string& label);
  ~HostObject();
  HostObject(const HostObject&) = delete;
  HostObject& operator=(const HostObject&) = delete;

  // The address of `name`, or null.
  void* symbol(const std::string& name) const;

 private:
  HostObject() = default;
  void* m_handle = nullptr;
  int m_fd = -1;
};

}  // namespace kiln::runtime
