"""kiln.torch.load under PyTorch Lightning (PyPI's, in the venv scripts/setup makes): a model whose
custom op is a kiln-built torch extension trains through Lightning's Trainer exactly as the same
model written with torch's own ops does, and a fresh process's Trainer finds the op in kiln's cache."""
import os

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch", reason="Lightning is not installed here (scripts/setup puts it in the torch 2.x venv)")
import kiln  # noqa: E402
import kiln.torch  # noqa: E402

from conftest import EXTENSIONS, run_python  # noqa: E402

BIAS_TANH = os.path.join(EXTENSIONS, "bias_tanh.cpp")

# The model, written once for the test and for the fresh process: `op` is the kiln-built extension,
# or None for the same model with torch's own ops.
MODEL = '''
import torch
import lightning.pytorch as pl


class BiasTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, op):
        y = op.forward(x, bias)
        ctx.save_for_backward(y)
        ctx.op = op
        return y

    @staticmethod
    def backward(ctx, grad_y):
        (y,) = ctx.saved_tensors
        grad_x, grad_bias = ctx.op.backward(grad_y.contiguous(), y)
        return grad_x, grad_bias, None


class Regressor(pl.LightningModule):
    def __init__(self, op):
        super().__init__()
        self.op = op
        self.hidden = torch.nn.Linear(6, 12, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(12))
        self.out = torch.nn.Linear(12, 1)

    def forward(self, x):
        h = self.hidden(x)
        h = BiasTanh.apply(h, self.bias, self.op) if self.op is not None else torch.tanh(h + self.bias)
        return self.out(h)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def train(op, steps=12):
    torch.manual_seed(0)
    x = torch.randn(64, 6)
    y = (x[:, :1] * 0.5 - x[:, 1:2]).tanh()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
    torch.manual_seed(1)
    model = Regressor(op)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader)
    return model, trainer
'''


def model_namespace():
    namespace = {}
    exec(compile(MODEL, "lightning_model", "exec"), namespace)
    return namespace


def test_a_model_with_a_kiln_built_op_trains_under_lightning_as_with_torch_ops():
    op = kiln.torch.load(name="kiln_bias_tanh", sources=[BIAS_TANH], extra_cflags=["-O2"])
    models = model_namespace()
    with_kiln, trainer = models["train"](op)
    with_torch, _ = models["train"](None)
    assert trainer.global_step == 12
    for (name, a), (_, b) in zip(with_kiln.named_parameters(), with_torch.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert not torch.equal(with_kiln.bias.detach(), torch.zeros(12))  # the op's bias gradient reached SGD


def test_a_fresh_process_trains_with_the_op_from_kilns_cache():
    # Built by the test above (or here, the first time); the second process compiles nothing.
    code = MODEL + '''
import kiln.torch
op = kiln.torch.load(name="kiln_bias_tanh", sources=[%r], extra_cflags=["-O2"], verbose=True)
model, trainer = train(op, steps=4)
print("trained", trainer.global_step)
''' % BIAS_TANH
    run_python(code)
    again = run_python(code)
    assert "kiln: extension kiln_bias_tanh: disk (0 ms compiling" in again.stdout, again.stdout
    assert "trained 4" in again.stdout
