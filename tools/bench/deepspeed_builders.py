"""One DeepSpeed CUDA op builder built once, timed, for tools/bench/compare's deepspeed-builders
section: `python deepspeed_builders.py kiln|deepspeed BuilderClass` prints one JSON line
{"builder", "how", "seconds"}.

kiln: kiln.deepspeed.load_builder (kiln's pipeline, KILN_CACHE_DIR as the caller sets it).
deepspeed: DeepSpeed's own jit_load (torch.utils.cpp_extension.load: ninja, nvcc and g++;
TORCH_EXTENSIONS_DIR as the caller sets it). Both with the flags DeepSpeed passes on a GPU machine
(torch.cuda.is_available() answers True; nothing is launched) and TORCH_CUDA_ARCH_LIST from the
environment, as tests/python/test_deepspeed_cuda.py builds them."""
import json
import sys
import time

import torch

torch.cuda.is_available = lambda: True  # DeepSpeed's GPU-machine flags; nothing is launched
import torch.utils.cpp_extension  # noqa: E402,F401  (DeepSpeed's own build step imports it first)
from deepspeed.accelerator.cuda_accelerator import CUDA_Accelerator  # noqa: E402

how, cls = sys.argv[1], sys.argv[2]
builder = CUDA_Accelerator().create_op_builder(cls)
start = time.perf_counter()
if how == "kiln":
    import kiln.deepspeed as kds
    module = kds.load_builder(builder)
elif how == "deepspeed":
    module = builder.jit_load(verbose=False)
else:
    raise SystemExit("usage: deepspeed_builders.py kiln|deepspeed BuilderClass")
seconds = time.perf_counter() - start
assert [n for n in dir(module) if not n.startswith("_")], "the module exposes nothing"
print(json.dumps({"builder": cls, "how": how, "seconds": seconds}), flush=True)
