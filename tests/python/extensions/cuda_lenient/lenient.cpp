// The C++ half of a CUDA extension whose .cu half Clang refuses and nvcc accepts
// (lenient_kernel.cu): compiled by Clang, linked with the object nvcc makes.
#include <torch/extension.h>

torch::Tensor clamp_index_cuda(const torch::Tensor& x, int64_t limit);

torch::Tensor clamp_index(const torch::Tensor& x, int64_t limit) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kInt, "clamp_index: x must be an int32 CUDA tensor");
  return clamp_index_cuda(x.contiguous(), limit);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("clamp_index", &clamp_index, "min(x, limit) as a 16-bit pair, widened back, on the GPU");
  m.attr("block_size") = 128;
}
