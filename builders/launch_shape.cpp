#include "builders/launch_shape.h"

#include "builders/expr.h"

namespace kiln::builders {

Result<LaunchShape> spec_launch(const OpSpec& spec, std::string_view backend, int sm_count, const std::map<std::string, int64_t>& sizes,
                                uint32_t block) {
  if (!spec.check)
    return invalid_argument("op " + spec.name + "'s spec gives no launch (it has no [check] with a grid): pass the grid and block");
  const CheckSpec& check = *spec.check;
  const bool cuda_like = backend == "cuda" || backend == "hip";
  LaunchShape out;
  out.names = check.dims;
  for (auto& [name, value] : sizes) out.names[name] = value;
  if (!block) {
    block = check.block;
    if (cuda_like && spec.cuda && spec.cuda->block) block = spec.cuda->block;
    if (backend == "opencl" && spec.opencl && spec.opencl->block) block = spec.opencl->block;
  }
  out.names[std::string(k_block_name)] = block;
  out.names[std::string(k_sm_count_name)] = sm_count < 1 ? 1 : sm_count;
  const std::string& grid_expr = cuda_like && spec.cuda && !spec.cuda->grid.empty() ? spec.cuda->grid : check.grid;
  auto grid = eval_expr(grid_expr, out.names);
  if (!grid.ok()) return invalid_argument("op " + spec.name + ": grid '" + grid_expr + "': " + grid.status().message());
  if (*grid < 1 || *grid > UINT32_MAX)
    return invalid_argument("op " + spec.name + ": grid '" + grid_expr + "' is " + std::to_string(*grid) + " blocks");
  out.config.grid = {static_cast<uint32_t>(*grid), 1, 1};
  out.config.block = {block, 1, 1};
  if (!check.shared_bytes.empty()) {
    auto shared = eval_expr(check.shared_bytes, out.names);
    if (!shared.ok()) return invalid_argument("op " + spec.name + ": shared_bytes '" + check.shared_bytes + "': " + shared.status().message());
    if (*shared < 0 || *shared > UINT32_MAX)
      return invalid_argument("op " + spec.name + ": shared_bytes '" + check.shared_bytes + "' is " + std::to_string(*shared));
    out.config.shared_bytes = static_cast<uint32_t>(*shared);
  }
  return out;
}

}  // namespace kiln::builders
