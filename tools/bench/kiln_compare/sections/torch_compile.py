"""torch.compile on the CPU (a 2-block transformer, d=256) with Inductor's C++ built
by kiln.torch.inductor next to Inductor as shipped (g++ per kernel module): cold on
one node, a second node with the FX-graph entries and kiln's Redis tier, and
4 ranks at once (tools/bench/compare_inductor.py)
"""
import os
import sys

from ..harness import add, BENCH, BUILD, child_env, goal, log, stats_ms, VENV_PYTHON
from ..servers import start_redis


def section(a, work):
    """torch.compile's CPU kernels through kiln.torch.inductor next to g++ (tools/bench/compare_inductor.py)."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    import compare_inductor
    compare_inductor.run_section(a, work, add=add, stats_ms=stats_ms, goal=goal, log=log, child_env=child_env, python=VENV_PYTHON,
                                 build_python=os.path.join(BUILD, "python"), start_redis=start_redis)
