// A fused bias + tanh with its own backward, as a model's custom op is written for
// torch.autograd.Function: the Lightning test trains through it.
#include <torch/extension.h>

#include <vector>

torch::Tensor bias_tanh_forward(const torch::Tensor& x, const torch::Tensor& bias) {
  TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && x.size(1) == bias.size(0), "bias_tanh: x is [rows, cols], bias is [cols]");
  return torch::tanh(x + bias);
}

// d/dx tanh(x + b) = 1 - y^2; the bias gradient sums it over the rows.
std::vector<torch::Tensor> bias_tanh_backward(const torch::Tensor& grad_y, const torch::Tensor& y) {
  torch::Tensor grad_x = grad_y * (1 - y * y);
  return {grad_x, grad_x.sum(0)};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &bias_tanh_forward, "tanh(x + bias)");
  m.def("backward", &bias_tanh_backward, "gradients of tanh(x + bias) for x and bias");
}
