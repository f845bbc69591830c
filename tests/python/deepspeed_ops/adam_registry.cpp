// The optimizers by id and the tensor-facing entry points, as DeepSpeed's cpu_adam_impl.cpp
// keeps them: tensors arrive as torch::Tensor& and are checked before any pointer is taken.
#include <torch/extension.h>

#include <map>
#include <memory>
#include <mutex>

#include "adam_ops.h"
#include "kiln_adam.h"

namespace kiln_test {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::map<int, std::shared_ptr<CpuAdam>>& registry() {
  static std::map<int, std::shared_ptr<CpuAdam>> optimizers;
  return optimizers;
}

std::shared_ptr<CpuAdam> find(int optimizer_id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(optimizer_id);
  TORCH_CHECK(it != registry().end(), "no optimizer with id ", optimizer_id,
              " (create_adam it first)");
  return it->second;
}

void check_state(const torch::Tensor& t, const torch::Tensor& params, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), what, " must be on the CPU, is on ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat32, what, " must be float32, is ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
  TORCH_CHECK(t.numel() == params.numel(), what, " has ", t.numel(), " elements, params have ",
              params.numel());
}

}  // namespace

int registry_size() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  return static_cast<int>(registry().size());
}

int create_adam(int optimizer_id, float lr, float beta1, float beta2, float eps,
                float weight_decay, bool adamw_mode) {
  AdamHyper hyper;
  hyper.lr = lr;
  hyper.beta1 = beta1;
  hyper.beta2 = beta2;
  hyper.eps = eps;
  hyper.weight_decay = weight_decay;
  hyper.adamw = adamw_mode;
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[optimizer_id] = std::make_shared<CpuAdam>(hyper);
  return 0;
}

int destroy_adam(int optimizer_id) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(optimizer_id);
  return 0;
}

int adam_update(int optimizer_id, int64_t step, float lr, torch::Tensor& params,
                torch::Tensor& grads, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq) {
  std::shared_ptr<CpuAdam> adam = find(optimizer_id);
  check_state(params, params, "params");
  check_state(grads, params, "grads");
  check_state(exp_avg, params, "exp_avg");
  check_state(exp_avg_sq, params, "exp_avg_sq");
  TORCH_CHECK(step >= 1, "step counts from 1, got ", step);
  adam->set_lr(lr);
  adam->step(step, params.data_ptr<float>(), grads.data_ptr<float>(), exp_avg.data_ptr<float>(),
             exp_avg_sq.data_ptr<float>(), static_cast<std::size_t>(params.numel()));
  return 0;
}

}  // namespace kiln_test
