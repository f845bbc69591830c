"""an op's first use from a warm cache in a fresh process, next to PyTorch's
torch.utils.cpp_extension.load of the same kernel, its build folder built;
and the first build of each
"""
import datetime
import os
import re

from ..harness import add, BUILD, hyperfine, KILN, ROOT, run, stats_ms, SYSTEM_PYTHON


TORCH_LOAD = r'''
import sys, time
t0 = time.time()
import torch
from torch.utils.cpp_extension import load
t1 = time.time()
m = load(name="kiln_vector_add", sources=[sys.argv[1]], build_directory=sys.argv[2],
         extra_include_paths=sys.argv[3:], extra_cflags=["-O3", "-march=native"], verbose=False)
a = torch.rand(4096); b = torch.rand(4096)
m.vector_add(a, b)
t2 = time.time()
print(f"import {(t1 - t0) * 1000:.3f} load {(t2 - t1) * 1000:.3f}")
'''

TORCH_EXTENSION = r'''// The kernel of kiln's bundled vector_add, as a PyTorch C++ extension: what an op builder
// that calls torch.utils.cpp_extension.load would build. The blocks are walked as kiln does.
#include <torch/extension.h>
#include <kiln/cpu_kernel.h>
#include "kernels/vector_add.cpp"

torch::Tensor vector_add_op(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  int64_t n = a.numel();
  kiln::cpu::Block blk{{uint32_t((n + 4095) / 4096), 1, 1}, {4096, 1, 1}, {0, 0, 0}, nullptr, 0};
  for (blk.block_idx.x = 0; blk.block_idx.x < blk.grid_dim.x; ++blk.block_idx.x)
    vector_add(blk, a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("vector_add", &vector_add_op); }
'''


def section(a, work):
    probe = run([SYSTEM_PYTHON, "-c", "import torch, torch.utils.cpp_extension"], check=False)
    if probe.returncode != 0:
        add("first-use", "an op's first use", None, "", missing="PyTorch is not installed under /usr/bin/python3 (scripts/setup --bench)")
        return
    ext_dir = os.path.join(work, "torch-ext")
    os.makedirs(ext_dir)
    src = os.path.join(ext_dir, "vector_add_ext.cpp")
    open(src, "w").write(TORCH_EXTENSION)
    loader = os.path.join(ext_dir, "load.py")
    open(loader, "w").write(TORCH_LOAD)
    includes = [os.path.join(ROOT, "specs"), os.path.join(ROOT, "specs/include"), os.path.join(ROOT, "backends/cpu/include")]

    def torch_run(build_dir):
        r = run([SYSTEM_PYTHON, loader, src, build_dir] + includes)
        m = re.search(r"import ([\d.]+) load ([\d.]+)", r.stdout)
        return float(m.group(1)), float(m.group(2))

    # Cold first builds: each a fresh build folder / cache.
    cold_runs = 2 if a.quick else 3
    torch_cold = []
    for i in range(cold_runs):
        b = os.path.join(work, f"torch-build-{i}")
        os.makedirs(b)
        torch_cold.append(torch_run(b)[1])
    t = hyperfine([("kiln first use, cold", f"{BUILD}/bin/kiln_first_use vector_add {work}/first-cold n=4096")],
                  cold_runs, 0, prepare=f"rm -rf {work}/first-cold")
    peer_cold_cmd = f"{SYSTEM_PYTHON} load.py  # torch.utils.cpp_extension.load(sources=[vector_add_ext.cpp]), empty build folder"
    add("first-use", "vector_add: first build and first use (empty cache / build folder)", t["kiln first use, cold"],
        f"{BUILD}/bin/kiln_first_use vector_add DIR n=4096 (whole process)", stats_ms(torch_cold), peer_cold_cmd,
        note="PyTorch's figure is load() alone (without `import torch`)")
    # Warm: the build folder built, the cache warm.
    warm_build = os.path.join(work, "torch-build-0")
    runs = 5 if a.quick else 20
    loads, whole = [], []
    for _ in range(runs):
        start = datetime.datetime.now()
        imp, ld = torch_run(warm_build)
        whole.append((datetime.datetime.now() - start).total_seconds() * 1000)
        loads.append(ld)
    run([KILN, "--cache-dir", os.path.join(work, "first-warm"), "build", os.path.join(ROOT, "specs/vector_add.toml")])
    t = hyperfine([("kiln first use, warm", f"{BUILD}/bin/kiln_first_use vector_add {work}/first-warm n=4096")], runs, 3)
    add("first-use", "vector_add: first use from a warm cache / built folder, whole process", t["kiln first use, warm"],
        f"{BUILD}/bin/kiln_first_use vector_add DIR n=4096", stats_ms(whole),
        f"{SYSTEM_PYTHON} load.py  # import torch, then load() of the built extension, one call")
    add("first-use", "the same, load() alone against kiln's whole process", t["kiln first use, warm"],
        f"{BUILD}/bin/kiln_first_use vector_add DIR n=4096", stats_ms(loads),
        "torch.utils.cpp_extension.load(...) timed inside Python, after `import torch`")
