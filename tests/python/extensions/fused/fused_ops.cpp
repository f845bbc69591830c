#include "fused.h"

#include <cmath>

namespace fused {

template <typename T>
void bias_gelu_kernel(const T* x, const T* bias, T* out, int64_t rows, int64_t cols, T scale) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      T v = x[r * cols + c] + bias[c];
      out[r * cols + c] = scale * T(0.5) * v * (T(1) + std::erf(v / std::sqrt(T(2))));
    }
}

template void bias_gelu_kernel<float>(const float*, const float*, float*, int64_t, int64_t, float);
template void bias_gelu_kernel<double>(const double*, const double*, double*, int64_t, int64_t, double);

torch::Tensor bias_gelu(const torch::Tensor& x, const torch::Tensor& bias, double scale) {
  TORCH_CHECK(x.dim() == 2 && bias.dim() == 1 && bias.size(0) == x.size(1), "bias_gelu: x is [rows, cols], bias is [cols]");
  auto xc = x.contiguous();
  auto bc = bias.contiguous();
  auto out = torch::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "bias_gelu", [&] {
    bias_gelu_kernel<scalar_t>(xc.data_ptr<scalar_t>(), bc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), xc.size(0), xc.size(1),
                               static_cast<scalar_t>(scale));
  });
  return out;
}

}  // namespace fused
