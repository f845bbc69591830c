// A fused bias + GELU + scale written the way extensions write theirs: a header shared by
// several sources, a templated kernel over raw pointers, and ATen for the rest.
#pragma once
#include <torch/extension.h>

namespace fused {

torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias, double scale);

template <typename T>
void bias_gelu_kernel(const T* x, const T* bias, T* out, int64_t rows, int64_t cols, T scale);

}  // namespace fused
