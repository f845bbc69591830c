// Python bindings in their own source, as DeepSpeed keeps them (csrc/adam/cpu_adam.cpp).
#include <torch/extension.h>

#include "adam_ops.h"
#include "kiln_adam.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("create_adam", &kiln_test::create_adam, "Create a CPU Adam optimizer under an id");
  m.def("destroy_adam", &kiln_test::destroy_adam, "Destroy the optimizer with this id");
  m.def("adam_update", &kiln_test::adam_update,
        "One Adam step: (id, step, lr, params, grads, exp_avg, exp_avg_sq), tensors in place");
  m.def("registry_size", &kiln_test::registry_size, "How many optimizers exist");
  m.def("simd_isa", &kiln_test::simd_isa, "The SIMD width the kernels were built for");
}
