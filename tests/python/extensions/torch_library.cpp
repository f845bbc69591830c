// An extension that registers an operator with the dispatcher instead of binding a module:
// loaded with is_python_module=False, it appears as torch.ops.kiln_test.axpby.
#include <torch/extension.h>
#include <torch/library.h>

torch::Tensor axpby(const torch::Tensor& x, const torch::Tensor& y, double a, double b) { return a * x + b * y; }

TORCH_LIBRARY(kiln_test, m) { m.def("axpby(Tensor x, Tensor y, float a, float b) -> Tensor", &axpby); }
