// The C++ half of a CUDA extension as frameworks write theirs: checks, then a launcher defined in
// the .cu file, bound with pybind11.
#include <torch/extension.h>

void scale_add_cuda(torch::Tensor out, const torch::Tensor& x, const torch::Tensor& y, double alpha);
torch::Tensor half_roundtrip_cuda(const torch::Tensor& x);

torch::Tensor scale_add(const torch::Tensor& x, const torch::Tensor& y, double alpha) {
  TORCH_CHECK(x.is_cuda() && y.is_cuda(), "scale_add: x and y must be CUDA tensors");
  TORCH_CHECK(x.sizes() == y.sizes(), "scale_add: x and y differ in shape");
  auto out = torch::empty_like(x);
  scale_add_cuda(out, x.contiguous(), y.contiguous(), alpha);
  return out;
}

torch::Tensor half_roundtrip(const torch::Tensor& x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "half_roundtrip: x must be a float CUDA tensor");
  return half_roundtrip_cuda(x.contiguous());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale_add", &scale_add, "alpha * x + y, on the GPU");
  m.def("half_roundtrip", &half_roundtrip, "x rounded to half precision and back, on the GPU");
  m.attr("block_size") = 256;
}
