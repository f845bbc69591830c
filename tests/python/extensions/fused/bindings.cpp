#include "fused.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bias_gelu", &fused::bias_gelu, "scale * gelu(x + bias)", py::arg("x"), py::arg("bias"), py::arg("scale") = 1.0);
  m.attr("scale_default") = FUSED_SCALE_DEFAULT;
}
