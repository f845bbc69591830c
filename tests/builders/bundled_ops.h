// The bundled specs as a builders::Ops on the CPU accelerator, its cache in `cache_dir`: what the
// CUDA op tests compile for their GPU targets and their CPU references with.
#pragma once

#include <memory>
#include <string>

#include "builders/ops.h"
#include "tests/test_util.h"

namespace kiln::testing {

inline std::unique_ptr<builders::Ops> bundled_ops_on_cpu(const std::string& cache_dir) {
  builders::OpsOptions o;
  o.cache_dir = cache_dir;
  o.spec_dirs = {bundled_spec_dir()};
  o.accelerator = "cpu";
  return builders::Ops::create(o).value();
}

}  // namespace kiln::testing
