"""One CUDA extension from a PyPI sdist built once, cold, timed, for tools/bench/compare's
cuda-extensions section: `python cuda_extensions.py kiln|torch ENTRY_JSON` prints one JSON line
{"entry", "how", "seconds", "load_before", "load_after", "library_bytes"}.

ENTRY_JSON is one entry of the section's corpus with its folder resolved: {"entry", "name",
"root", "sources", "include_dirs", "cflags", "cuda_cflags", "ldflags", "python_module", and
optionally "unresolved"}, the flags as the package's setup.py gives them to torch's
CUDAExtension. kiln: kiln.torch.load (KILN_CACHE_DIR as the caller sets it, the library written
into KILN_EXTENSION_OUT); torch: torch.utils.cpp_extension.load (ninja, nvcc and the host
compiler; TORCH_EXTENSIONS_DIR as the caller sets it). Both with TORCH_CUDA_ARCH_LIST from the
environment. "seconds" is load()'s wall time; the caller measures the process tree's CPU.

"unresolved", a regular expression: the entry builds some of a module's sources (mamba-ssm's
binding and one of its nine kernel files), so the library cannot be imported, and an import that
fails on an undefined symbol it matches ends the build as both loaders reach it."""
import json
import os
import re
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
# Where each loader leaves the library, to weigh it: kiln's written out as torch's is.
extra = {"build_directory": os.environ["KILN_EXTENSION_OUT"]} if how == "kiln" else {}
library = (os.path.join(extra["build_directory"], entry["name"] + ".so") if how == "kiln" else
           os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], entry["name"], entry["name"] + ".so"))
load_before = os.getloadavg()
start = time.perf_counter()
try:
    module = load(entry["name"], [os.path.join(root, s) for s in entry["sources"]], extra_cflags=entry["cflags"],
                  extra_cuda_cflags=entry["cuda_cflags"], extra_ldflags=entry["ldflags"],
                  extra_include_paths=[os.path.join(root, d) for d in entry["include_dirs"]], is_python_module=entry["python_module"],
                  verbose=False, **extra)
except (ImportError, OSError) as error:
    missing = re.search(r"undefined symbol: (\S+)", str(error))
    if not (entry.get("unresolved") and missing and re.search(entry["unresolved"], missing.group(1))):
        raise
    module = None
seconds = time.perf_counter() - start
if entry["python_module"] and module is not None:
    assert [n for n in dir(module) if not n.startswith("_")], "the module exposes nothing"
print(json.dumps({"entry": entry["entry"], "how": how, "seconds": seconds, "load_before": load_before, "load_after": os.getloadavg(),
                  "library_bytes": os.path.getsize(library)}),
      flush=True)
