// The functions the bindings expose, declared once for adam_registry.cpp and bindings.cpp.
#pragma once

#include <torch/extension.h>

namespace kiln_test {

int create_adam(int optimizer_id, float lr, float beta1, float beta2, float eps,
                float weight_decay, bool adamw_mode);
int destroy_adam(int optimizer_id);
int adam_update(int optimizer_id, int64_t step, float lr, torch::Tensor& params,
                torch::Tensor& grads, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq);

}  // namespace kiln_test
