"""One CUDA extension from a PyPI sdist built once, cold, timed, for tools/bench/compare's
cuda-extensions section: `python cuda_extensions.py kiln|torch ENTRY_JSON` prints one JSON line
{"entry", "how", "seconds", "load_before", "load_after"}.

ENTRY_JSON is one entry of the section's corpus with its folder resolved: {"entry", "name",
"root", "sources", "include_dirs", "cflags", "cuda_cflags", "ldflags", "python_module"}, the
flags as the package's setup.py gives them to torch's CUDAExtension. kiln: kiln.torch.load
(KILN_CACHE_DIR as the caller sets it); torch: torch.utils.cpp_extension.load (ninja, nvcc and the
host compiler; TORCH_EXTENSIONS_DIR as the caller sets it). Both with TORCH_CUDA_ARCH_LIST from
the environment. "seconds" is load()'s wall time; the caller measures the process tree's CPU."""
import json
import os
import sys
import time

how, entry = sys.argv[1], json.loads(sys.argv[2])
import torch  # noqa: E402,F401

if how == "kiln":
    import kiln.torch

    load = kiln.torch.load
elif how == "torch":
    import torch.utils.cpp_extension

    load = torch.utils.cpp_extension.load
else:
    raise SystemExit("usage: cuda_extensions.py kiln|torch ENTRY_JSON")
root = entry["root"]
load_before = os.getloadavg()
start = time.perf_counter()
module = load(entry["name"], [os.path.join(root, s) for s in entry["sources"]], extra_cflags=entry["cflags"],
              extra_cuda_cflags=entry["cuda_cflags"], extra_ldflags=entry["ldflags"],
              extra_include_paths=[os.path.join(root, d) for d in entry["include_dirs"]], is_python_module=entry["python_module"],
              verbose=False)
seconds = time.perf_counter() - start
if entry["python_module"]:
    assert [n for n in dir(module) if not n.startswith("_")], "the module exposes nothing"
print(json.dumps({"entry": entry["entry"], "how": how, "seconds": seconds, "load_before": load_before, "load_after": os.getloadavg()}),
      flush=True)
