"""What the python section builds and runs, as text it writes into its work folder: two torch C++
extensions (PyTorch's LLTM tutorial and a fused-normalisation one, the same for kiln.torch.load and
torch.utils.cpp_extension.load), the per-process script that loads one and checks it, and the
script that times kiln.op's launch from Python. The docs page prints both scripts."""

# PyTorch's LLTM tutorial extension, forward and backward: ~90 lines of ATen calls and a
# PYBIND11_MODULE, the size of what people write first. C++14, as torch 1.13's loader compiles.
LLTM_SOURCE = r'''// PyTorch's LLTM C++ extension tutorial (forward and backward), as tools/bench/compare
// builds it with kiln.torch.load and torch.utils.cpp_extension.load.
#include <torch/extension.h>

#include <vector>

namespace {

void check_input(const torch::Tensor& t, const char* what) {
  TORCH_CHECK(t.dim() == 2, what, " must be 2-D, got ", t.dim(), " dimensions");
  TORCH_CHECK(t.is_contiguous(), what, " must be contiguous");
}

}  // namespace

// s'(z) = (1 - s(z)) * s(z)
torch::Tensor d_sigmoid(torch::Tensor z) {
  auto s = torch::sigmoid(z);
  return (1 - s) * s;
}

// tanh'(z) = 1 - tanh^2(z)
torch::Tensor d_tanh(torch::Tensor z) {
  return 1 - z.tanh().pow(2);
}

// elu'(z) = 1 for z > 0, alpha * exp(z) otherwise
torch::Tensor d_elu(torch::Tensor z, double alpha = 1.0) {
  auto e = z.exp();
  auto mask = (alpha * (e - 1)) < 0;
  return (z > 0).type_as(z) + mask.type_as(z) * (alpha * e);
}

std::vector<torch::Tensor> lltm_forward(torch::Tensor input, torch::Tensor weights, torch::Tensor bias,
                                        torch::Tensor old_h, torch::Tensor old_cell) {
  check_input(input, "input");
  check_input(old_h, "old_h");
  check_input(old_cell, "old_cell");
  auto X = torch::cat({old_h, input}, /*dim=*/1);
  auto gate_weights = torch::addmm(bias, X, weights.transpose(0, 1));
  auto gates = gate_weights.chunk(3, /*dim=*/1);

  auto input_gate = torch::sigmoid(gates[0]);
  auto output_gate = torch::sigmoid(gates[1]);
  auto candidate_cell = torch::elu(gates[2], /*alpha=*/1.0);

  auto new_cell = old_cell + candidate_cell * input_gate;
  auto new_h = torch::tanh(new_cell) * output_gate;
  return {new_h, new_cell, input_gate, output_gate, candidate_cell, X, gate_weights};
}

std::vector<torch::Tensor> lltm_backward(torch::Tensor grad_h, torch::Tensor grad_cell, torch::Tensor new_cell,
                                         torch::Tensor input_gate, torch::Tensor output_gate,
                                         torch::Tensor candidate_cell, torch::Tensor X, torch::Tensor gate_weights,
                                         torch::Tensor weights) {
  auto d_output_gate = torch::tanh(new_cell) * grad_h;
  auto d_tanh_new_cell = output_gate * grad_h;
  auto d_new_cell = d_tanh(new_cell) * d_tanh_new_cell + grad_cell;

  auto d_old_cell = d_new_cell;
  auto d_candidate_cell = input_gate * d_new_cell;
  auto d_input_gate = candidate_cell * d_new_cell;

  auto gates = gate_weights.chunk(3, /*dim=*/1);
  d_input_gate *= d_sigmoid(gates[0]);
  d_output_gate *= d_sigmoid(gates[1]);
  d_candidate_cell *= d_elu(gates[2]);

  auto d_gates = torch::cat({d_input_gate, d_output_gate, d_candidate_cell}, /*dim=*/1);

  auto d_weights = d_gates.t().mm(X);
  auto d_bias = d_gates.sum(/*dim=*/0, /*keepdim=*/true);

  auto d_X = d_gates.mm(weights);
  const auto state_size = grad_h.size(1);
  auto d_old_h = d_X.slice(/*dim=*/1, 0, state_size);
  auto d_input = d_X.slice(/*dim=*/1, state_size);

  return {d_old_h, d_input, d_weights, d_bias, d_old_cell};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &lltm_forward, "LLTM forward");
  m.def("backward", &lltm_backward, "LLTM backward");
  m.def("d_sigmoid", &d_sigmoid, "sigmoid's derivative");
}
'''

# A different extension of the same size: fused bias+GELU, LayerNorm and RMSNorm with their
# backward passes, and a softmax cross-entropy, written with ATen calls.
NORM_SOURCE = r'''// Fused normalisation ops with ATen calls, as tools/bench/compare builds them with
// kiln.torch.load and torch.utils.cpp_extension.load (a second extension, other sources).
#include <torch/extension.h>

#include <cmath>
#include <vector>

namespace {

const double k_inv_sqrt2 = 0.70710678118654752440;
const double k_inv_sqrt_2pi = 0.39894228040143267794;

void check_rows(const torch::Tensor& x, const torch::Tensor& w, const char* what) {
  TORCH_CHECK(x.dim() == 2, what, ": x must be [rows, cols]");
  TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(1), what, ": the weight is [cols]");
}

}  // namespace

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
  check_rows(x, bias, "bias_gelu");
  auto y = x + bias;
  return 0.5 * y * (1 + torch::erf(y * k_inv_sqrt2));
}

std::vector<torch::Tensor> bias_gelu_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor bias) {
  auto y = x + bias;
  auto cdf = 0.5 * (1 + torch::erf(y * k_inv_sqrt2));
  auto pdf = torch::exp(-0.5 * y * y) * k_inv_sqrt_2pi;
  auto d_y = grad * (cdf + y * pdf);
  return {d_y, d_y.sum(0)};
}

std::vector<torch::Tensor> layer_norm_forward(torch::Tensor x, torch::Tensor gamma, torch::Tensor beta, double eps) {
  check_rows(x, gamma, "layer_norm");
  auto mean = x.mean(/*dim=*/1, /*keepdim=*/true);
  auto centered = x - mean;
  auto var = (centered * centered).mean(/*dim=*/1, /*keepdim=*/true);
  auto rstd = torch::rsqrt(var + eps);
  auto x_hat = centered * rstd;
  return {x_hat * gamma + beta, mean, rstd};
}

std::vector<torch::Tensor> layer_norm_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor mean,
                                               torch::Tensor rstd, torch::Tensor gamma) {
  const double n = static_cast<double>(x.size(1));
  auto x_hat = (x - mean) * rstd;
  auto d_gamma = (grad * x_hat).sum(0);
  auto d_beta = grad.sum(0);
  auto d_xhat = grad * gamma;
  auto d_x = rstd / n * (n * d_xhat - d_xhat.sum(1, true) - x_hat * (d_xhat * x_hat).sum(1, true));
  return {d_x, d_gamma, d_beta};
}

torch::Tensor rms_norm(torch::Tensor x, torch::Tensor weight, double eps) {
  check_rows(x, weight, "rms_norm");
  auto ms = (x * x).mean(/*dim=*/1, /*keepdim=*/true);
  return x * torch::rsqrt(ms + eps) * weight;
}

std::vector<torch::Tensor> rms_norm_backward(torch::Tensor grad, torch::Tensor x, torch::Tensor weight, double eps) {
  const double n = static_cast<double>(x.size(1));
  auto rstd = torch::rsqrt((x * x).mean(1, true) + eps);
  auto gw = grad * weight;
  auto d_x = rstd * gw - x * rstd.pow(3) * (gw * x).sum(1, true) / n;
  auto d_weight = (grad * x * rstd).sum(0);
  return {d_x, d_weight};
}

// Mean softmax cross-entropy of logits [rows, classes] against class indices [rows].
torch::Tensor softmax_xent(torch::Tensor logits, torch::Tensor target) {
  TORCH_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
              "softmax_xent: logits [rows, classes], target [rows]");
  auto logp = torch::log_softmax(logits, /*dim=*/1);
  return -logp.gather(1, target.unsqueeze(1)).mean();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("bias_gelu", &bias_gelu, "GELU(x + bias), exact (erf)");
  m.def("bias_gelu_backward", &bias_gelu_backward, "gradients of bias_gelu for x and bias");
  m.def("layer_norm_forward", &layer_norm_forward, "LayerNorm over the last dimension: y, mean, rstd");
  m.def("layer_norm_backward", &layer_norm_backward, "LayerNorm's gradients: x, gamma, beta");
  m.def("rms_norm", &rms_norm, "RMSNorm over the last dimension");
  m.def("rms_norm_backward", &rms_norm_backward, "RMSNorm's gradients: x, weight");
  m.def("softmax_xent", &softmax_xent, "mean softmax cross-entropy");
}
'''

# One fresh process: import torch (and kiln.torch or cpp_extension), load the extension, check
# what it computes against torch, print the times as JSON. Both sides run this same script.
EXT_DRIVER = r'''
import json, os, sys, time
spec = json.load(open(sys.argv[1]))
os.environ.update(spec["env"])
t0 = time.perf_counter()
import torch
if spec["side"] == "kiln":
    sys.path.insert(0, spec["kiln_python"])
    import kiln.torch
    load = kiln.torch.load
else:
    from torch.utils.cpp_extension import load
t1 = time.perf_counter()
ext = load(name=spec["name"], sources=spec["sources"], extra_cflags=spec["flags"],
           extra_include_paths=spec["includes"], verbose=spec["side"] == "kiln")
t2 = time.perf_counter()
torch.manual_seed(0)
check = spec["check"]
if check == "lltm":
    x, h, c = torch.randn(4, 8), torch.randn(4, 16), torch.randn(4, 16)
    w, b = torch.randn(48, 24, requires_grad=True), torch.randn(48, requires_grad=True)
    out = ext.forward(x, w, b, h, c)
    X = torch.cat([h, x], 1)
    g = torch.addmm(b, X, w.t()).chunk(3, 1)
    ref_c = c + torch.nn.functional.elu(g[2]) * torch.sigmoid(g[0])
    ref_h = torch.tanh(ref_c) * torch.sigmoid(g[1])
    assert torch.allclose(out[0], ref_h, atol=1e-5) and torch.allclose(out[1], ref_c, atol=1e-5)
    gh = torch.randn(4, 16)
    grads = ext.backward(gh.contiguous(), torch.zeros(4, 16), *[t.detach() for t in out[1:]], w.detach())
    ref_h.backward(gh)
    assert torch.allclose(grads[2], w.grad, atol=1e-4) and torch.allclose(grads[3].flatten(), b.grad, atol=1e-4)
elif check == "norm":
    x, g, b = torch.randn(8, 32), torch.randn(32), torch.randn(32)
    assert torch.allclose(ext.bias_gelu(x, b), torch.nn.functional.gelu(x + b), atol=1e-5)
    y = ext.layer_norm_forward(x, g, b, 1e-5)[0]
    assert torch.allclose(y, torch.nn.functional.layer_norm(x, (32,), g, b, 1e-5), atol=1e-4)
    t = torch.randint(0, 32, (8,))
    assert torch.allclose(ext.softmax_xent(x, t), torch.nn.functional.cross_entropy(x, t), atol=1e-5)
elif check == "adam":
    n = 4099
    p, grad = torch.randn(n), torch.randn(n)
    ref = p.clone().requires_grad_(True)
    opt = torch.optim.AdamW([ref], lr=1e-2, weight_decay=0.05)
    ref.grad = grad.clone()
    opt.step()
    m, v = torch.zeros(n), torch.zeros(n)
    ext.create_adam(1, 1e-2, 0.9, 0.999, 1e-8, 0.05, True)
    ext.adam_update(1, 1, 1e-2, p, grad, m, v)
    ext.destroy_adam(1)
    assert torch.allclose(p, ref.detach(), rtol=1e-5, atol=1e-6)
print(json.dumps({"import_ms": (t1 - t0) * 1000, "load_ms": (t2 - t1) * 1000, "torch": torch.__version__}), flush=True)
'''

# kiln.op("vector_add") launched from Python on 256-element arrays: timeit per call, the median
# of the repeats, each repeat after a warm-up; synchronous (as a torch op returns) and queued.
LAUNCH_DRIVER = r'''
import json, os, statistics, sys, timeit
spec = json.load(open(sys.argv[1]))
os.environ.update(spec["env"])
sys.path.insert(0, spec["kiln_python"])
import numpy as np
import torch
import kiln
add = kiln.op("vector_add")
ctx = kiln.context()
n = 256
grid = kiln.cdiv(n, 256)
number, repeat = spec["number"], spec["repeat"]


def figure(fn, number, calls_per_run):
    t = timeit.Timer(fn)
    t.timeit(number)  # warm-up
    xs = [s / (number * calls_per_run) * 1000 for s in t.repeat(repeat, number)]
    return {"median_ms": statistics.median(xs), "min_ms": min(xs), "max_ms": max(xs), "n": repeat}


out = {"torch": torch.__version__, "numpy": np.__version__}
arrays = {"numpy": (np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32), np.zeros(n, dtype=np.float32)),
          "torch": (torch.rand(n), torch.rand(n), torch.zeros(n))}
for kind, (a, b, o) in arrays.items():
    add(a, b, o, n, grid=grid, block=256)  # compiled (or found in the cache) and loaded here
    assert np.allclose(np.asarray(o), np.asarray(a) + np.asarray(b))
    out[kind + "_sync"] = figure(lambda: add(a, b, o, n, grid=grid, block=256), number, 1)

    def queued():
        for _ in range(1000):
            add(a, b, o, n, grid=grid, block=256, sync=False)
        ctx.synchronize()
    out[kind + "_queued"] = figure(queued, 1, 1000)
out["synchronize_idle"] = figure(ctx.synchronize, number, 1)
print(json.dumps(out), flush=True)
'''
