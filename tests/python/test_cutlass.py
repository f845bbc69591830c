"""kiln.cutlass: the CuTe DSL's compiled modules (nvidia-cutlass-dsl) over kiln's store and tiers.
Compile-only: an elementwise add traced and lowered for sm_90a (CUTE_DSL_ARCH) on a machine with no
GPU; nothing is launched. Two nodes are two Python processes, each with its own kiln cache and
CuTe DSL cache folder, sharing a real redis-server; node 2 must run no MLIR pipeline and get node
1's bytes. The DSL comes into the torch 2.x venv with flashinfer-python (scripts/setup); where it
is not installed the tests skip saying so.

The kernels live in a file (the DSL reads a kernel's source, so `python -c` cannot hold them), at
one path for both nodes: the traced module carries its source's path, and so the DSL's key does.
"""
import json
import subprocess

import pytest

from conftest import run_python
from test_triton import kiln_cli as built_cli

KERNELS = r'''
"""A CuTe DSL elementwise add, compiled and never launched; run as a script, what this node saw."""
import hashlib, io, json, os, sys, time

START = time.perf_counter()  # before kiln and the DSL are imported: "ready" counts their imports
import kiln
import kiln.cutlass
import cutlass
import cutlass.cute as cute
from cutlass.base_dsl import compiler
from cutlass.base_dsl.dsl import BaseDSL
from cutlass.cute.runtime import make_fake_compact_tensor

PIPELINE_RUNS = [0]
_run_pipeline = compiler.Compiler.compile


def _counted(self, *args, **kwargs):
    # Every run of the DSL's MLIR pipeline (its pass manager: CuTe to NVVM, NVVM, ptxas) enters here.
    PIPELINE_RUNS[0] += 1
    return _run_pipeline(self, *args, **kwargs)


compiler.Compiler.compile = _counted


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    i = bidx * bdim + tidx
    m, n = gA.shape
    gC[i // n, i % n] = gA[i // n, i % n] + gB[i // n, i % n]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    m, n = mA.shape
    add_kernel(mA, mB, mC).launch(grid=((m * n) // 256, 1, 1), block=(256, 1, 1))


@cute.kernel
def mistyped_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    gC[tidx, 0] = gA[tidx, 0] + "one"  # a Float32 plus a str


@cute.jit
def mistyped(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    mistyped_kernel(mA, mB, mC).launch(grid=(1, 1, 1), block=(128, 1, 1))


def compile_(fn=add, **options):
    tensors = [make_fake_compact_tensor(cutlass.Float32, (128, 256)) for _ in range(3)]
    runs, t = PIPELINE_RUNS[0], time.perf_counter()
    compiled = cute.compile(fn, *tensors, **options)
    seconds = time.perf_counter() - t
    module = io.BytesIO()
    compiled.ir_module.operation.write_bytecode(module)
    return {"seconds": seconds, "pipeline_runs": PIPELINE_RUNS[0] - runs, "engine": compiled.engine is not None,
            "sha": hashlib.sha256(module.getvalue()).hexdigest()}


def node(more):
    dsl_own = BaseDSL._compile_or_jit_module
    assert kiln.cutlass.install() and kiln.cutlass.install()  # the second is a no-op
    report = {"first": compile_()}
    report["first"]["ready"] = time.perf_counter() - START
    report["stats"] = dict(kiln.cutlass.stats)
    if more:
        report["again"] = compile_()  # the same compile in the same process
        report["stats_again"] = dict(kiln.cutlass.stats)
        kiln.cutlass.uninstall()
        kiln.cutlass.uninstall()
        report["restored"] = BaseDSL._compile_or_jit_module is dsl_own
        report["dsl_warm"] = compile_()  # the DSL's own second compile in a warm process: the floor
        report["stats_uninstalled"] = dict(kiln.cutlass.stats)
    return report


def failures():
    keys = []  # every key the hook asks kiln for
    find_or_claim = kiln.Context.find_or_claim_files

    def recorded(self, kind, key):
        keys.append(key)
        return find_or_claim(self, kind, key)

    kiln.Context.find_or_claim_files = recorded
    kiln.cutlass.install()
    report = {}
    try:
        compile_(mistyped)
    except TypeError as e:  # the DSL's, raised while tracing: nothing reached kiln
        report["mistyped"] = {"error": str(e), "keys": len(keys)}
    try:
        compile_(add, options="--ptxas-options=--no-such-option")
    except compiler.CompilerDiagnosticError as e:  # the DSL's, raised by ptxas inside the pipeline
        report["ptxas"] = {"error": str(e), "keys": len(keys), "pipeline_runs": PIPELINE_RUNS[0]}
    ctx = kiln.context("none")
    # The failed compile's key, claimed again: a claim left held (a lock of this process, a lease
    # renewed by it) would make this wait KILN_LOCK_TIMEOUT / KILN_REMOTE_WAIT and come back unheld.
    group, claim = find_or_claim(ctx, kiln.cutlass.KIND, keys[-1])
    report["probe"] = {"found": group is not None, "held": claim is not None and claim.held}
    if claim is not None:
        claim.release()
    report["stored"] = len(ctx.list_files(kiln.cutlass.KIND))
    report["stats"] = dict(kiln.cutlass.stats)
    # A compile that writes its PTX must run whole: it is compiled, not kept, and its file written.
    report["keep_ptx"] = compile_(add, options="--keep-ptx")
    report["ptx_files"] = [f for f in os.listdir(os.environ["CUTE_DSL_DUMP_DIR"]) if f.endswith(".ptx")]
    report["stats_keep_ptx"] = dict(kiln.cutlass.stats)
    report["stored_keep_ptx"] = len(ctx.list_files(kiln.cutlass.KIND))
    return report


if __name__ == "__main__":
    report = failures() if sys.argv[1] == "failures" else node(sys.argv[1] == "node-more")
    print("RESULT " + json.dumps(report))
'''


@pytest.fixture
def kernels(tmp_path):
    try:
        import cutlass.cute  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to import is a reason to skip)
        pytest.skip("the CuTe DSL is not importable here (%s): nvidia-cutlass-dsl comes into the torch 2.x venv "
                    "with flashinfer-python" % e)
    path = tmp_path / "kernels" / "cute_add.py"
    path.parent.mkdir()
    path.write_text(KERNELS)
    return path


def run_node(kernels, mode, folder, env):
    (folder / "dsl-cache").mkdir(parents=True, exist_ok=True)
    full_env = {"CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_CACHE_DIR": str(folder / "dsl-cache"),
                "CUTE_DSL_DUMP_DIR": str(folder / "dsl-cache"), "KILN_CACHE_DIR": str(folder / "kiln-cache")}
    full_env.update(env)
    done = run_python("import runpy, sys; sys.argv = [%r, %r]; runpy.run_path(sys.argv[0], run_name='__main__')"
                      % (str(kernels), mode), env=full_env, timeout=300)
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    assert line, done.stdout + done.stderr
    return json.loads(line[-1][7:])


def test_a_module_compiled_on_node_1_is_node_2s_without_a_pipeline_run(kernels, tmp_path, redis_url):
    remote = {"KILN_REMOTE_CACHE": redis_url}
    one = run_node(kernels, "node-more", tmp_path / "node1", remote)
    two = run_node(kernels, "node", tmp_path / "node2", remote)

    assert one["first"]["pipeline_runs"] == 1 and one["first"]["engine"], one
    assert one["stats"] == {"hits": 0, "hits_remote": 0, "misses": 1, "stored": 1, "errors": 0, "not_cached": 0}, one
    assert two["first"]["pipeline_runs"] == 0, "node 2 ran the MLIR pipeline: %s" % two
    assert two["stats"] == {"hits": 0, "hits_remote": 1, "misses": 0, "stored": 0, "errors": 0, "not_cached": 0}, two
    assert two["first"]["sha"] == one["first"]["sha"], "node 2 loads node 1's module"
    assert two["first"]["engine"], "a hit builds the host engine as the DSL's own cache hits do"
    # The same compile again in node 1's process is served from its store.
    assert one["again"]["pipeline_runs"] == 0 and one["again"]["sha"] == one["first"]["sha"], one
    assert one["stats_again"]["hits"] == 1, one
    # uninstall() gives the DSL its own method back: the pipeline runs, kiln sees nothing.
    assert one["restored"] and one["dsl_warm"]["pipeline_runs"] == 1, one
    assert one["stats_uninstalled"] == one["stats_again"], one

    cli = built_cli()
    if cli:
        stats = json.loads(subprocess.run([cli, "--cache-dir", str(tmp_path / "node1" / "kiln-cache"), "cache", "stats", "--json"],
                                          capture_output=True, text=True, check=True).stdout)
        assert stats["compiles"] == 1, stats
    print("\nCuTe DSL add, sm_90a, no GPU (seconds; ready = from before importing kiln and the DSL to cute.compile's "
          "return): node 1 ready %.3f (compile %.3f, a miss); node 2 ready %.3f (compile %.3f, a Redis hit); node 1 "
          "again in-process through kiln %.3f; the DSL's own second compile in node 1's warm process %.3f"
          % (one["first"]["ready"], one["first"]["seconds"], two["first"]["ready"], two["first"]["seconds"],
             one["again"]["seconds"], one["dsl_warm"]["seconds"]))


def test_a_failed_compile_raises_the_dsls_error_and_keeps_nothing(kernels, tmp_path, redis_url):
    got = run_node(kernels, "failures", tmp_path / "node", {"KILN_REMOTE_CACHE": redis_url, "KILN_LOCK_TIMEOUT": "5",
                                                            "KILN_REMOTE_WAIT": "5"})
    # A type error is the DSL's own TypeError, raised while tracing, before any lookup.
    assert "unsupported operand" in got["mistyped"]["error"] and got["mistyped"]["keys"] == 0, got
    # A compile that fails in the pipeline claimed its key first; the DSL's error comes through.
    assert got["ptxas"]["keys"] == 1 and got["ptxas"]["pipeline_runs"] == 1, got
    assert "no-such-option" in got["ptxas"]["error"], got
    assert got["probe"] == {"found": False, "held": True}, "the failed compile's claim was not let go: %s" % got
    assert got["stored"] == 0, got
    assert got["stats"] == {"hits": 0, "hits_remote": 0, "misses": 1, "stored": 0, "errors": 0, "not_cached": 0}, got
    # What a hit could not do (write the PTX) runs uncached, counted.
    assert got["keep_ptx"]["pipeline_runs"] == 1 and got["ptx_files"], got
    assert got["stats_keep_ptx"]["not_cached"] == 1 and got["stored_keep_ptx"] == 0, got
