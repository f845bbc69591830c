"""The sections of tools/bench/compare, one module each.

A section's module has a docstring, which is its entry in `compare --help`; `section(a, work)`,
which measures and adds its rows (harness.add, harness.goal; `a` is the parsed command line with
`a.quick` and `a.reps`, `work` a folder of its own that is removed after the run); optionally
`docs()`, the Markdown the docs page shows below the table when the section ran; and
`OPT_IN = True` when it is slow and runs only when named in --only. Adding a section is adding its
module and one line to SECTIONS.
"""
import importlib

# name in --only: module in this package. A run without --only takes them in this order.
SECTIONS = {
    "cpu-compile": "cpu_compile",
    "headers": "headers",
    "cuda-compile": "cuda_compile",
    "hit": "hit",
    "first-use": "first_use",
    "warm": "warm",
    "runtime": "runtime",
    "micro": "micro",
    "remote": "remote",
    "cluster": "cluster",
    "targets": "targets",
    "python": "python",
    "triton": "triton",
    "torch-compile": "torch_compile",
    "wheel": "wheel",
    "deepspeed-builders": "deepspeed_builders",
    "cuda-extensions": "cuda_extensions",
    "launcher": "launcher",
}


def modules():
    """{name: module} for every section, in SECTIONS' order."""
    return {name: importlib.import_module(f"{__name__}.{module}") for name, module in SECTIONS.items()}
