"""torch.compile of a small model on CUDA, with or without kiln's Triton cache manager, for a GPU
machine (tools/gpu-triton-check runs it three times in fresh processes). Prints one JSON line:
how many Triton compiles and cache hits the process saw (Triton's compilation listener) and
where its output went.

    python tools/gpu_triton_check.py plain|kiln OUT.pt

With TORCHINDUCTOR_COMPILE_THREADS=1 Inductor compiles in this process, so the listener sees
every compile; a fresh TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR per run leave kiln's store
(KILN_CACHE_DIR) the only thing two runs share."""
import json
import sys

mode, out_path = sys.argv[1], sys.argv[2]
if mode == "kiln":
    import kiln.triton

    kiln.triton.install()

import torch  # noqa: E402
import triton  # noqa: E402

counts = {"compiles": 0, "hits": 0}


def listener(*, src, metadata, metadata_group, times, cache_hit):
    counts["hits" if cache_hit else "compiles"] += 1


triton.knobs.compilation.listener = listener
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.LayerNorm(512), torch.nn.Linear(512, 256),
                            torch.nn.Softmax(dim=-1)).cuda()
x = torch.randn(64, 256, device="cuda")
with torch.no_grad():
    y = torch.compile(model)(x)
torch.save(y.cpu(), out_path)
print(json.dumps(dict(counts, mode=mode, triton=triton.__version__, torch=torch.__version__, out=out_path)), flush=True)
