"""torch.compile on the CPU with its caches and kernels through kiln
(kiln.torch.compile_cache) next to torch as shipped, a 2-block transformer (d=256) and a Hugging
Face Llama (2 layers, hidden 256, a training step): a new node's first call with only the
cluster's Redis next to the floor (torch, its caches warm) and to torch's new node with torch's
own Redis caches; cold on node 1; 4 ranks at once, lowerings counted
(tools/bench/compare_inductor.py)
"""
import os
import sys

from ..harness import add, BENCH, BUILD, child_env, goal, log, stats_ms, VENV_PYTHON
from ..servers import start_redis


def section(a, work):
    """torch.compile's cold start through kiln next to torch as shipped (tools/bench/compare_inductor.py)."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import compare_inductor
    compare_inductor.run_section(a, work, add=add, stats_ms=stats_ms, goal=goal, log=log, child_env=child_env, python=VENV_PYTHON,
                                 build_python=os.path.join(BUILD, "python"), start_redis=start_redis)
