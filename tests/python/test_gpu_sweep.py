"""tools/bench/gpu_sweep.py where there is no GPU: its arguments, its plan of sizes and bytes, the
clean skip, and its cases run on the CPU accelerator (--on-cpu), so the script a lent GPU machine
runs has run before it gets there."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "bench", "gpu_sweep.py")


def sweep(*args, timeout=600):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_the_plan_covers_4_kib_to_1_gib_for_every_op():
    done = sweep("--plan")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[1:]
    ops = {line.split()[0] for line in lines}
    assert ops == {"vector_add", "axpby", "gelu", "gelu_bf16", "adamw", "adamw_bf16", "quantize_int8", "dequantize_int8",
                   "layer_norm", "row_softmax", "softmax_online", "reduce_sum", "sum_reduce"}
    add = [line.split() for line in lines if line.startswith("vector_add ")]
    assert [" ".join(row[1:3]) for row in add] == ["4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB",
                                                   "256 MiB", "1 GiB"]
    assert add[-1][3:5] == ["268435456", "3221225472"]  # 2^28 floats, three tensors of them
    # reduce_sum's chunk is 4096 floats (16 KiB): nothing smaller.
    assert [line.split()[1:3] for line in lines if line.startswith("reduce_sum ")][0] == ["16", "KiB"]


def test_bad_arguments_say_what_is_wrong():
    for args, message in [(["--ops", "nope"], "unknown op nope"), (["--min", "1G", "--max", "4K"], "is above --max"),
                          (["--min", "4Q"], "'4Q' is not a size"), (["--factor", "1"], "--factor must be 2 or more")]:
        done = sweep(*args)
        assert done.returncode == 2, args
        assert message in done.stderr, (args, done.stderr)


def test_without_a_gpu_it_skips_saying_why():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the sweep would run")
    done = sweep("--ops", "vector_add")
    assert done.returncode == 0, done.stderr
    assert "gpu_sweep: skipped: torch" in done.stdout and "sees no GPU" in done.stdout


def test_every_case_runs_on_the_cpu_and_agrees_with_torch(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "sweep.json"
    done = sweep("--on-cpu", "--min", "16K", "--max", "64K", "--reps", "2", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())["rows"]
    assert not [r for r in rows if "error" in r], rows
    assert {r["op"] for r in rows} >= {"vector_add", "gelu", "adamw", "layer_norm", "softmax_online", "quantize_int8", "sum_reduce"}
    checks = {(r["op"], r["bytes"]): r["check"] for r in rows}
    assert checks[("vector_add", 16384)] == "max |diff| 0.0e+00"
    assert checks[("quantize_int8", 65536)] == "q differ 0, scales differ 0"
    assert checks[("dequantize_int8", 65536)] == "max |diff| 0.0e+00"
    assert all(r["gbs"] > 0 and r["copy_gbs"] > 0 for r in rows)
