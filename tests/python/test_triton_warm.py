"""Warming Triton's kernels with no GPU (kiln/triton/warm.py, kiln/triton/record.py): a run records what it compiled,
`kiln warm --triton` (python -m kiln) compiles the records again for cuda:sm_XX targets on this
CPU-only machine with Triton's bundled ptxas, `kiln cache pack` carries the groups to a node, and
the node compiles nothing. Real Triton, real kiln store, real bundles, real processes.

A "node" here is a process on this machine whose Triton driver answers an sm_90 (or sm_80) GPU's
target (kiln.triton.warm.driver_target, what the warm itself compiles under): that is what a GPU
node's kernels and kiln's keys see. The test that runs the kernels on a real GPU skips here."""
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import run_python
from test_triton import ALL, blobs, kiln_cli, needs_triton, result_of, triton_env

HAVE_TORCH_CUDA = False
if importlib.util.find_spec("torch") is not None:
    try:
        import torch
        HAVE_TORCH_CUDA = torch.cuda.is_available()
    except Exception:
        pass


def kiln_python(cache, tmp_path, *args, path=None, **env_more):
    """`python -m kiln ARGS` (the command `kiln warm --triton` is) in a fresh process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env.update(triton_env(cache, tmp_path, **env_more))
    if path is not None:  # only these folders and kiln's: a kernel module elsewhere is not importable
        import kiln
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(kiln.__file__))] + path)
    return subprocess.run([sys.executable, "-m", "kiln"] + list(args), env=env, capture_output=True, text=True, timeout=600)


def warm(cache, tmp_path, *args, **kw):
    # The kernels' modules (triton_kernels) are in this folder: kiln imports only from --path.
    if "--path" not in args and kw.get("path") is None:
        args = ("--path", os.path.dirname(os.path.abspath(__file__))) + args
    done = kiln_python(cache, tmp_path, "warm", "--triton", "--json", *args, **kw)
    try:
        return done.returncode, json.loads(done.stdout), done.stderr
    except ValueError:
        raise AssertionError("no JSON (%d):\n--- stdout\n%s\n--- stderr\n%s" % (done.returncode, done.stdout, done.stderr))


def cache_cli(cache, *args):
    return subprocess.run([kiln_cli(), "cache"] + list(args), env=dict(os.environ, KILN_CACHE_DIR=str(cache)),
                          capture_output=True, text=True, check=True).stdout


# The tutorial kernels compiled as a node with a GPU of `arch` compiles them: Triton's driver
# answers that GPU's target (no launch: there is no GPU).
NODE = """
import json, triton, triton_kernels, kiln.triton.warm as warm, kiln.triton.record as rec
from triton.backends.compiler import GPUTarget
target = GPUTarget("cuda", %d, 32)
listener = triton_kernels.Listener()
cubins = {}
with warm.driver_target(target):
    for name, (src, options) in triton_kernels.sources().items():
        if name in %r:
            cubins[name] = __import__("hashlib").sha256(triton.compile(src, target=target, options=options).asm["cubin"]).hexdigest()
print("RESULT " + json.dumps({"compiles": listener.compiles, "hits": listener.hits, "cubins": cubins}))
"""


def node(cache, tmp_path, names, arch=90):
    return result_of(run_python(NODE % (arch, names), env=triton_env(cache, tmp_path)))


def compile_run(cache, tmp_path, names, **env):
    return result_of(run_python("""
        import json, triton_kernels
        print("RESULT " + json.dumps(triton_kernels.compile_kernels(%r)))
    """ % (names,), env=triton_env(cache, tmp_path, **env)))


def rows(cache, kind):
    with sqlite3.connect(str(cache / "index.sqlite")) as db:
        return sorted(db.execute("SELECT op, target FROM artifacts WHERE kind = ?", (kind,)).fetchall())


@needs_triton
def test_a_run_records_each_compile_beside_its_group_and_can_be_told_not_to(tmp_path):
    assert compile_run(tmp_path / "run", tmp_path, ["add", "matmul"])["compiles"] == 2
    assert rows(tmp_path / "run", "triton-record") == [("add_kernel", "cuda:sm_90"), ("matmul_kernel", "cuda:sm_90")]
    done = run_python("""
        import json, kiln.triton as kt, kiln.triton.warm as warm, kiln.triton.record as rec
        print("RESULT " + json.dumps(rec.records(kt._context()[0])))
    """, env=triton_env(tmp_path / "run", tmp_path))
    add, matmul = result_of(done)
    assert add["kernel"]["module"] == "triton_kernels" and add["kernel"]["qualname"] == "add_kernel"
    assert "tl.store(output_ptr + offsets, output, mask=mask)" in add["kernel"]["source"]
    assert add["signature"]["x_ptr"] == "*fp32" and add["constexprs"] == [[[4], 1024]]
    assert add["target"] == {"backend": "cuda", "arch": 90, "warp_size": 32} and add["driver_target"] == "none"
    assert "unrecordable" not in add and "unrecordable" not in matmul
    # The autotuner's config: its options as compiled, and those that are not the target's defaults.
    assert matmul["explicit_options"] == {"num_stages": 4}
    assert compile_run(tmp_path / "quiet", tmp_path, ["add"], KILN_TRITON_RECORD=0)["compiles"] == 1
    assert rows(tmp_path / "quiet", "triton-record") == []


@needs_triton
def test_a_record_of_the_jits_compile_comes_back_with_the_same_key(tmp_path):
    # What the JIT gives triton.compile on a GPU: attributes (pointer and integer divisibility,
    # lists as Triton's backend parses them) and options; Triton's key is made of their text, so
    # they must come back as the same values.
    cache = tmp_path / "cache"
    run_python("""
        import triton, triton.language as tl, triton_kernels as tk
        sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "output_ptr": "*fp32", "n_elements": "i32", "BLOCK_SIZE": "constexpr"}
        attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (2,): [["tt.divisibility", 16]],
                 (3,): [["tt.divisibility", 16]]}
        triton.compile(triton.compiler.ASTSource(tk.add_kernel, sig, {"BLOCK_SIZE": 512}, attrs), target=tk.TARGET,
                       options={"num_warps": 2})
    """, env=triton_env(cache, tmp_path))
    done = run_python("""
        import json, kiln.triton as kt, kiln.triton.warm as warm, kiln.triton.record as rec
        (record,) = rec.records(kt._context()[0])
        print("RESULT " + json.dumps({"attrs": record["attrs"], "options": record["explicit_options"]}))
    """, env=triton_env(cache, tmp_path))
    r = result_of(done)
    assert r["attrs"][0] == [[0], {"list": [{"list": ["tt.divisibility", 16]}]}] and r["options"] == {"num_warps": 2}
    status, (replayed,), _ = warm(cache, tmp_path, "--target", "cuda:sm_90")
    assert status == 0 and replayed["status"] == "compiled", replayed


@needs_triton
def test_warming_with_no_gpu_then_a_bundle_gives_nodes_that_compile_nothing(tmp_path):
    if not kiln_cli():
        pytest.skip("the kiln command is not built beside this kiln package (build/bin/kiln)")
    # A run (here, with no driver) compiles the four tutorial kernels and records them.
    run = compile_run(tmp_path / "run", tmp_path, ALL)
    assert run["compiles"] == 4
    # Its records go to a builder with no GPU (a bundle of the run's cache).
    cache_cli(tmp_path / "run", "pack", str(tmp_path / "records.bundle"))
    cache_cli(tmp_path / "builder", "unpack", str(tmp_path / "records.bundle"))
    status, first, _ = warm(tmp_path / "builder", tmp_path, "--target", "cuda:sm_90,sm_80")
    assert status == 0, first
    # The run had no driver: nodes with an sm_90 or sm_80 GPU key their groups by it, so all are compiled.
    assert sorted((r["kernel"], r["target"], r["status"]) for r in first) == sorted(
        (k, t, "compiled") for k in ("add_kernel", "softmax_kernel", "_layer_norm_fwd_fused", "matmul_kernel")
        for t in ("cuda:sm_90", "cuda:sm_80"))
    # Warming again compiles nothing.
    status, again, _ = warm(tmp_path / "builder", tmp_path, "--target", "cuda:sm_90,sm_80")
    assert status == 0 and {r["status"] for r in again} == {"hit"} and len(again) == 8
    # The builder's cache goes to the nodes: an sm_90 node and an sm_80 node compile nothing.
    cache_cli(tmp_path / "builder", "pack", str(tmp_path / "warm.bundle"))
    cache_cli(tmp_path / "node", "unpack", str(tmp_path / "warm.bundle"))
    h100 = node(tmp_path / "node", tmp_path, ALL, arch=90)
    assert h100["compiles"] == 0 and h100["hits"] == 4
    # The cubins are the ones Triton makes for that target (the run's: these kernels do not branch on it).
    assert h100["cubins"] == run["cubins"]
    a100 = node(tmp_path / "node", tmp_path, ["add", "layer_norm"], arch=80)
    assert a100["compiles"] == 0 and a100["hits"] == 2
    # Without the warm, a node compiles (the run's groups are keyed by its driver's answer, none).
    assert node(tmp_path / "run", tmp_path, ["add"], arch=90)["compiles"] == 1


KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0, mask=mask)


def source():
    return triton.compiler.ASTSource(scale_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                     {"BLOCK": 256})
'''

COMPILE_SCALE = """
import triton, warm_kernels
from triton.backends.compiler import GPUTarget
triton.compile(warm_kernels.source(), target=GPUTarget("cuda", 90, 32))
"""


@needs_triton
def test_warm_refuses_a_record_whose_key_comes_out_different_and_says_what_differs(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    module = folder / "warm_kernels.py"
    module.write_text(KERNELS)
    cache = tmp_path / "cache"
    done = run_python("import sys; sys.path.insert(0, %r)\n%s" % (str(folder), COMPILE_SCALE), env=triton_env(cache, tmp_path))
    assert rows(cache, "triton-record") == [("scale_kernel", "cuda:sm_90")]
    # A record names a module and a file, and may come from another node's cache: with no --path
    # folder holding it, nothing is imported (importing runs the module), and the record is refused.
    marker = tmp_path / "imported"
    module.write_text(KERNELS + "\nopen(%r, 'w').write('ran')\n" % str(marker))
    status, (r,), _ = warm(cache, tmp_path, path=[])
    assert status == 1 and "not under a folder named by --path" in r["reason"], r
    assert not marker.exists(), "kiln warm --triton imported a module outside its --path folders"
    module.write_text(KERNELS)
    # As recorded, from the folder named: it replays (compiled: the run's driver answered none, the
    # warm answers sm_90). The folder is not on sys.path: it is loaded from the file the run had it in.
    status, (r,), _ = warm(cache, tmp_path, "--path", str(folder), path=[])
    assert status == 0 and r["status"] == "compiled", r
    # The kernel's source changed since the run.
    module.write_text(KERNELS.replace("* 2.0", "* 3.0"))
    status, (r,), err = warm(cache, tmp_path, "--target", "cuda:sm_90", "--path", str(folder), path=[])
    assert status == 1 and r["status"] == "refused"
    assert "its key comes out different here: the kernel's source" in r["reason"] and str(module) in r["reason"], r
    assert "refused" in err and "the kernel's source" in err  # said on stderr too
    # The same source a line lower: Triton's key counts the line.
    module.write_text("\n" + KERNELS)
    status, (r,), _ = warm(cache, tmp_path, "--path", str(folder), path=[])
    assert status == 1 and "the kernel's line: it starts at line" in r["reason"], r
    # An environment variable that enters Triton's key, set otherwise than in the run.
    module.write_text(KERNELS)
    status, (r,), _ = warm(cache, tmp_path, "--path", str(folder), path=[], TRITON_DEFAULT_FP_FUSION=0)
    assert status == 1 and "environment: TRITON_DEFAULT_FP_FUSION recorded 'true', here" in r["reason"], r
    # The module cannot be imported here, and its file is not where the run had it.
    module.rename(tmp_path / "elsewhere.py")
    status, (r,), _ = warm(cache, tmp_path, "--path", str(folder), path=[])
    assert status == 1 and "the kernel's module warm_kernels cannot be imported here" in r["reason"], r
    assert "--path DIR" in r["reason"]


@needs_triton
def test_warm_refuses_a_record_of_another_triton_and_a_kernel_of_a_script(tmp_path):
    cache = tmp_path / "cache"
    compile_run(cache, tmp_path, ["add"])
    # A record of the same kernel made by another Triton (stored through kiln's store, as a run of
    # that Triton stores it: only its version and its part of the key differ).
    run_python("""
        import kiln.triton as kt, kiln.triton.warm as warm, kiln.triton.record as rec
        ctx = kt._context()[0]
        (record,) = rec.records(ctx)
        record["triton_version"] = "3.8.0"
        record["parts"]["triton"] = "3.8.0" + "0" * 64
        record["key"] = rec.key_of(record["parts"])
        rec.store_record(ctx, record, "triton 3.8.0")
    """, env=triton_env(cache, tmp_path))
    # A kernel defined in a script run as __main__.
    script = tmp_path / "train.py"
    script.write_text(KERNELS + '\nfrom triton.backends.compiler import GPUTarget\ntriton.compile(source(), target=GPUTarget("cuda", 90, 32))\n')
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
                            **triton_env(cache, tmp_path)))
    status, results, _ = warm(cache, tmp_path)
    by = {(r["kernel"], r["status"]): r["reason"] for r in results}
    assert status == 1 and len(results) == 3, results
    assert ("add_kernel", "compiled") in by
    assert "Triton: recorded with 3.8.0, this is %s" % kiln_triton_version() in by[("add_kernel", "refused")]
    assert "scale_kernel is defined in a script run as __main__" in by[("scale_kernel", "refused")]


def kiln_triton_version():
    import triton
    return triton.__version__


def test_the_kiln_program_sends_warm_triton_to_the_python_that_has_triton():
    cli = kiln_cli()
    if not cli:
        pytest.skip("the kiln command is not built beside this kiln package (build/bin/kiln)")
    done = subprocess.run([cli, "warm", "--triton"], capture_output=True, text=True)
    assert done.returncode == 2 and "python -m kiln warm --triton" in done.stderr


@needs_triton
def test_warm_says_what_targets_it_takes(tmp_path):
    done = kiln_python(tmp_path / "cache", tmp_path, "warm", "--triton", "--target", "cpu")
    assert done.returncode == 2 and "cuda:sm_XX" in done.stderr
    done = kiln_python(tmp_path / "cache", tmp_path, "--cache-dir", str(tmp_path / "other"), "warm", "--triton")
    assert done.returncode == 0 and "0 records" in done.stdout


@pytest.mark.skipif(not HAVE_TORCH_CUDA, reason="needs a CUDA GPU and torch with CUDA: this machine has none")
@needs_triton
def test_on_a_gpu_the_jits_kernels_warmed_elsewhere_run_with_no_compile(tmp_path):
    # A run on the GPU records what the JIT compiled; warming from the records alone (the groups
    # cleared) compiles them again with no driver in the way; a fresh process then launches them
    # through the JIT with no compile.
    run_kernels = """
        import json, torch, triton, triton_kernels
        listener = triton_kernels.Listener()
        x = torch.rand(98432, device="cuda"); y = torch.rand(98432, device="cuda"); out = torch.empty_like(x)
        triton_kernels.add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK_SIZE=1024)
        torch.cuda.synchronize()
        assert torch.equal(out, x + y)
        print("RESULT " + json.dumps({"compiles": listener.compiles, "hits": listener.hits}))
    """
    first = result_of(run_python(run_kernels, env=triton_env(tmp_path / "gpu", tmp_path)))
    assert first["compiles"] == 1
    records = run_python("""
        import kiln.triton as kt, kiln.triton.warm as warm, kiln.triton.record as rec, json
        print("RESULT " + json.dumps(rec.records(kt._context()[0])))
    """, env=triton_env(tmp_path / "gpu", tmp_path))
    (record,) = result_of(records)
    run_python("""
        import json, kiln.triton as kt, kiln.triton.warm as warm, kiln.triton.record as rec
        rec.store_record(kt._context()[0], json.loads(%r), "triton")
    """ % json.dumps(record), env=triton_env(tmp_path / "builder", tmp_path))
    status, (r,), _ = warm(tmp_path / "builder", tmp_path, "--target", record["target_text"])
    assert status == 0 and r["status"] == "compiled"
    cache_cli(tmp_path / "builder", "pack", str(tmp_path / "b"))
    cache_cli(tmp_path / "node", "unpack", str(tmp_path / "b"))
    again = result_of(run_python(run_kernels, env=triton_env(tmp_path / "node", tmp_path)))
    assert again["compiles"] == 0 and again["hits"] == 1


@needs_triton
def test_a_kernel_is_found_by_its_module_where_triton_keeps_no_registry():
    # Triton 3.9 keeps its JIT functions in a registry by "module:qualname"; 3.6 (the lent GPU
    # machines') has none, and the warm then walks the imported module, through @triton.autotune.
    import triton_kernels
    from kiln.triton import warm as triton_warm
    from triton.runtime.jit import JITFunction
    for name in ("add_kernel", "softmax_kernel", "matmul_kernel"):
        found = triton_warm._from_module("triton_kernels", name)
        assert isinstance(found, JITFunction) and found.fn.__name__ == name, name
    wrapped = triton_kernels.matmul_kernel
    assert not isinstance(wrapped, JITFunction) and triton_warm._from_module("triton_kernels", "matmul_kernel") is wrapped.fn
    assert triton_warm._from_module("triton_kernels", "no_such_kernel") is None
    assert triton_warm._from_module("no_such_module", "add_kernel") is None
