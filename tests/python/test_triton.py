"""kiln as Triton's cache (kiln.triton), with the real Triton from PyPI compiling real kernels on
this CPU-only machine: an explicit GPUTarget("cuda", 90, 32) makes Triton compile to a cubin with
its bundled ptxas, no driver needed. Every compile and every hit is counted by Triton's own
compilation listener in the process that ran it (tests/python/triton_kernels.py). Real SQLite,
real Redis, real processes; faults (a kill mid-compile, a damaged blob) are the only thing made up.

Under a Python without Triton (Debian's, with torch 1.13) the tests that compile skip, and the
ones that check what kiln says without Triton run."""
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import run_python

HAVE_TRITON = importlib.util.find_spec("triton") is not None
if HAVE_TRITON:
    import kiln.triton
    SUPPORTED, WHY = kiln.triton.supported()
else:
    SUPPORTED, WHY = False, "Triton is not installed in this Python (%s)" % sys.executable
needs_triton = pytest.mark.skipif(not SUPPORTED, reason=WHY)



def group_files(folder):
    """The files a group's folder hands out, without kiln's own (its stamp, .kiln-checked)."""
    return sorted(f for f in os.listdir(folder) if not f.startswith(".kiln-"))

def triton_env(cache_dir, tmp_path, **more):
    env = {
        "KILN_CACHE_DIR": str(cache_dir),
        "TRITON_CACHE_MANAGER": "kiln.triton:CacheManager",
        # Triton's own folder, for anything that does not go through kiln (never ~/.triton).
        "TRITON_CACHE_DIR": str(tmp_path / "triton-own"),
        "TRITON_DEFAULT_FP_FUSION": "1",  # Triton 3.9 warns while it is unset
        "KILN_REMOTE_CACHE": "",
    }
    env.update({k: str(v) for k, v in more.items()})
    return env


COMPILE = """
import json, triton_kernels
print("RESULT " + json.dumps(triton_kernels.compile_kernels({names!r})))
"""


def result_of(done):
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError("no result:\n--- stdout\n%s\n--- stderr\n%s" % (done.stdout, done.stderr))


def compile_in_child(env, names=None, **kw):
    return result_of(run_python(COMPILE.format(names=names), env=env, **kw))


def spawn(code, env):
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    full.update(env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=600):
    out, err = proc.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if proc.returncode != 0:
        raise AssertionError("child failed (%d):\n--- stdout\n%s\n--- stderr\n%s" % (proc.returncode, out, err))
    return done


def blobs(cache_dir, kind=None):
    """The cache's blob files: all, or those of artifacts of `kind` (a kernel's group has its
    record beside it, kind triton-record: tests/python/test_triton_warm.py)."""
    found = sorted(glob.glob(os.path.join(str(cache_dir), "blobs", "*", "*.blob")))
    if kind is None:
        return found
    import sqlite3
    with sqlite3.connect(os.path.join(str(cache_dir), "index.sqlite")) as db:
        keys = {k.hex() for (k,) in db.execute("SELECT key FROM artifacts WHERE kind = ?", (kind,))}
    return [b for b in found if os.path.basename(b)[:-len(".blob")] in keys]


GROUP = "triton-group"


def redis_cli_keys(url, pattern):
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(["redis-cli", "-p", port, "--scan", "--pattern", pattern], capture_output=True, text=True, check=True)
    return [k for k in out.stdout.split() if k]


ALL = ["add", "softmax", "layer_norm", "matmul"]


def kiln_cli():
    """The kiln command built beside this kiln package (build/bin/kiln), or None."""
    import kiln
    cli = os.path.normpath(os.path.join(os.path.dirname(kiln.__file__), "..", "..", "bin", "kiln"))
    return cli if os.path.exists(cli) else None


@pytest.fixture(autouse=True)
def no_manager_inherited(monkeypatch):
    # Children get TRITON_CACHE_MANAGER from triton_env only (Triton takes "" for a bad value).
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)


# ---- without Triton, or with one kiln cannot serve

def test_importing_kiln_triton_imports_no_triton():
    done = run_python("""
        import sys, kiln, kiln.triton
        assert "triton" not in sys.modules, "kiln.triton imported Triton"
        print("ok")
    """)
    assert done.stdout.strip() == "ok"


@pytest.mark.skipif(HAVE_TRITON, reason="this Python has Triton: the case of a Python without it is tested under Debian's")
def test_without_triton_install_says_so_once_and_changes_nothing():
    done = run_python("""
        import os, warnings, kiln.triton
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert kiln.triton.install() is False
            assert kiln.triton.install() is False
        assert "TRITON_CACHE_MANAGER" not in os.environ
        print(len(w), w[0].message)
    """)
    count, message = done.stdout.strip().split(" ", 1)
    assert count == "1" and "Triton is not installed" in message


def compile_with_kiln_refused(tmp_path, patch, installed):
    """add and softmax compiled in a child after `patch` made kiln.triton refuse this Triton:
    {compiles, hits, ..., said: kiln.triton's warnings}."""
    done = run_python("""
        import json, warnings, kiln.triton
        %s
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert kiln.triton.install() is %s
            import triton_kernels
            r = triton_kernels.compile_kernels(["add", "softmax"])
        said = [str(x.message) for x in w if "kiln.triton" in str(x.message)]
        print("RESULT " + json.dumps(dict(r, said=said)))
    """ % (patch, installed), env=triton_env(tmp_path / "kiln", tmp_path))
    return result_of(done)


@needs_triton
def test_a_triton_kiln_cannot_serve_is_said_once_and_triton_keeps_its_own_cache(tmp_path):
    # As if this Triton were newer than kiln speaks: kiln's manager is then Triton's own.
    r = compile_with_kiln_refused(tmp_path, "kiln.triton._LAST = (3, 0)", installed=False)
    assert r["compiles"] == 2
    assert len(r["said"]) == 1 and "newer than 3.0" in r["said"][0], r["said"]
    assert blobs(tmp_path / "kiln") == []
    assert glob.glob(str(tmp_path / "triton-own" / "*" / "add_kernel.cubin"))


@needs_triton
def test_install_sets_the_variable_that_inductors_workers_inherit(tmp_path):
    done = run_python("""
        import os, subprocess, sys, kiln.triton
        assert kiln.triton.install() is True
        assert "triton" not in sys.modules, "install() imported Triton"
        print(os.environ["TRITON_CACHE_MANAGER"])
        child = subprocess.run([sys.executable, "-c",
            "from triton.runtime.cache import get_cache_manager; print(type(get_cache_manager('00' * 32)).__module__)"],
            capture_output=True, text=True, check=True)
        print(child.stdout.strip())
        kiln.triton.uninstall()
        assert "TRITON_CACHE_MANAGER" not in os.environ
    """, env={k: v for k, v in triton_env(tmp_path / "kiln", tmp_path).items() if k != "TRITON_CACHE_MANAGER"})
    assert done.stdout.split() == ["kiln.triton:CacheManager", "kiln.triton"]


# ---- one node

@needs_triton
def test_tutorial_kernels_compile_once_then_a_second_process_compiles_nothing_and_gets_tritons_own_cubins(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    first = compile_in_child(env, ALL)
    assert first["compiles"] == 4 and first["hits"] == 0
    # One artifact per kernel, each a whole group in its own folder of the cache (and its record).
    assert len(blobs(tmp_path / "kiln", GROUP)) == 4 and len(blobs(tmp_path / "kiln")) == 8
    for name, path in first["paths"].items():
        assert path.startswith(str(tmp_path / "kiln" / "files")), path
        assert sorted(f.rsplit(".", 1)[1] for f in group_files(os.path.dirname(path))) == [
            "cubin", "json", "llir", "ptx", "source", "ttgir", "ttir"]
    second = compile_in_child(env, ALL)
    assert second["compiles"] == 0 and second["hits"] == 4
    assert second["cubins"] == first["cubins"]
    # Triton's own FileCacheManager, in a folder of its own, makes the same cubins.
    own_env = {k: v for k, v in env.items() if k != "TRITON_CACHE_MANAGER"}
    own_env["TRITON_CACHE_DIR"] = str(tmp_path / "filecache")
    own = compile_in_child(own_env, ALL)
    assert own["compiles"] == 4
    assert own["cubins"] == first["cubins"]
    # The cache lists them as Triton's, with their target.
    import sqlite3
    with sqlite3.connect(str(tmp_path / "kiln" / "index.sqlite")) as db:
        rows = sorted(db.execute("SELECT op, kind, target FROM artifacts WHERE kind = 'triton-group'").fetchall())
    assert rows == [("_layer_norm_fwd_fused", "triton-group", "cuda:sm_90"), ("add_kernel", "triton-group", "cuda:sm_90"),
                    ("matmul_kernel", "triton-group", "cuda:sm_90"), ("softmax_kernel", "triton-group", "cuda:sm_90")]


@needs_triton
def test_eight_processes_missing_at_once_give_one_compile(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    go = tmp_path / "go"
    code = """
        import json, os, sys, time
        import triton_kernels
        open(os.path.join(%r, "ready.%%d" %% os.getpid()), "w").close()
        while not os.path.exists(%r):
            time.sleep(0.005)
        print("RESULT " + json.dumps(triton_kernels.compile_kernels(["layer_norm"])))
    """ % (str(tmp_path), str(go))
    procs = [spawn(code, env) for _ in range(8)]
    deadline = time.time() + 300
    while len(glob.glob(str(tmp_path / "ready.*"))) < 8:
        assert time.time() < deadline and all(p.poll() is None for p in procs), "a child did not get ready"
        time.sleep(0.05)
    go.touch()
    results = [result_of(finish(p)) for p in procs]
    assert sum(r["compiles"] for r in results) == 1
    assert len({r["cubins"]["layer_norm"] for r in results}) == 1
    assert len(blobs(tmp_path / "kiln", GROUP)) == 1


@needs_triton
def test_a_damaged_artifact_is_a_miss_and_rebuilt_and_a_damaged_copy_of_its_files_is_replaced(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    first = compile_in_child(env, ["add"])
    # A file handed out to Triton, overwritten: the group is whole in the store, so it is put back.
    cubin = first["paths"]["add"]
    with open(cubin, "wb") as f:
        f.write(b"not a cubin")
    again = compile_in_child(env, ["add"])
    assert again["compiles"] == 0 and again["cubins"] == first["cubins"]
    with open(cubin, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == first["cubins"]["add"]
    # The artifact itself damaged: a miss (said once), compiled again, and stored whole again.
    (blob,) = blobs(tmp_path / "kiln", GROUP)
    data = bytearray(open(blob, "rb").read())
    data[len(data) // 2] ^= 0xFF
    with open(blob, "wb") as f:
        f.write(data)
    done = run_python(COMPILE.format(names=["add"]), env=env)
    rebuilt = result_of(done)
    assert rebuilt["compiles"] == 1 and rebuilt["cubins"] == first["cubins"]
    assert "damaged" in done.stderr
    assert compile_in_child(env, ["add"])["compiles"] == 0


@needs_triton
def test_a_compile_that_raises_frees_its_key_at_once(tmp_path):
    done = run_python("""
        import time, triton, triton_kernels
        src = triton_kernels.broken_source()
        for attempt in range(2):
            start = time.time()
            try:
                triton.compile(src, target=triton_kernels.TARGET)
            except Exception as e:
                print(type(e).__name__, round(time.time() - start, 1))
    """, env=triton_env(tmp_path / "kiln", tmp_path, KILN_LOCK_TIMEOUT=60))
    lines = done.stdout.split("\n")
    assert len([l for l in lines if l.startswith("CompilationError")]) == 2, done.stdout + done.stderr
    # The second attempt did not wait on the first one's key.
    assert float(lines[1].split()[1]) < 30, done.stdout
    # Another process is not kept waiting either, and nothing was stored.
    assert blobs(tmp_path / "kiln") == []


# ---- the autotuner's results: what every rank reads

AUTOTUNE = """
import json, os, sys, time
from triton.runtime.cache import get_cache_manager
cache = get_cache_manager("ab" * 32)        # as Autotuner.check_disk_cache asks for it
path = cache.get_file("matmul_kernel.autotune.json")
if path:
    print("READ " + json.load(open(path))["configs_timings"])
else:
    open(%r, "w").close()                    # benchmarking now
    time.sleep(%r)
    cache.put(json.dumps({"key": [512, 512, 512], "configs_timings": %r}), "matmul_kernel.autotune.json", binary=False)
    print("BENCHED")
"""


@needs_triton
def test_autotuning_results_are_timed_once_and_the_first_writer_wins(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    benching = tmp_path / "benching"
    first = spawn(AUTOTUNE % (str(benching), 3.0, "timings of rank 0"), env)
    deadline = time.time() + 120
    while not benching.exists():
        assert time.time() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.02)
    # Another rank asks while rank 0 benchmarks: it waits for rank 0's result, times nothing.
    second = spawn(AUTOTUNE % (str(tmp_path / "never"), 0.0, "timings of rank 1"), env)
    assert finish(first).stdout.strip() == "BENCHED"
    assert finish(second).stdout.strip() == "READ timings of rank 0"
    assert not (tmp_path / "never").exists()
    # A late writer does not replace what every rank already read.
    done = run_python("""
        import json
        from triton.runtime.cache import get_cache_manager
        path = get_cache_manager("ab" * 32).put(json.dumps({"configs_timings": "late"}), "matmul_kernel.autotune.json")
        print(json.load(open(path))["configs_timings"])
    """, env=env)
    assert done.stdout.strip() == "timings of rank 0"


# ---- nodes: their own cache folders, one Redis

@needs_triton
def test_a_second_node_through_redis_compiles_nothing_and_objects_are_signed(tmp_path, redis_url):
    secret = tmp_path / "secret"
    secret.write_text("a cluster secret of enough length\n")
    secret.chmod(0o600)
    common = {"KILN_REMOTE_CACHE": redis_url, "KILN_REMOTE_SECRET_FILE": str(secret)}
    first = compile_in_child(triton_env(tmp_path / "node1", tmp_path, **common), ALL)
    assert first["compiles"] == 4
    second = compile_in_child(triton_env(tmp_path / "node2", tmp_path, **common), ALL)
    assert second["compiles"] == 0 and second["cubins"] == first["cubins"]
    assert len(blobs(tmp_path / "node2")) == 4  # fetched, checked, kept
    # A node with another secret refuses the objects and compiles for itself.
    other = tmp_path / "other-secret"
    other.write_text("another secret, not the cluster's\n")
    other.chmod(0o600)
    third = compile_in_child(triton_env(tmp_path / "node3", tmp_path, KILN_REMOTE_CACHE=redis_url,
                                        KILN_REMOTE_SECRET_FILE=other), ["add"])
    assert third["compiles"] == 1


@needs_triton
def test_nodes_missing_at_once_give_one_compile_through_the_lease(tmp_path, redis_url):
    go = tmp_path / "go"
    code = """
        import json, os, time
        import triton_kernels
        open(os.path.join(%r, "ready.%%d" %% os.getpid()), "w").close()
        while not os.path.exists(%r):
            time.sleep(0.005)
        print("RESULT " + json.dumps(triton_kernels.compile_kernels(["matmul"])))
    """ % (str(tmp_path), str(go))
    procs = [spawn(code, triton_env(tmp_path / ("node%d" % i), tmp_path, KILN_REMOTE_CACHE=redis_url)) for i in range(4)]
    deadline = time.time() + 300
    while len(glob.glob(str(tmp_path / "ready.*"))) < 4:
        assert time.time() < deadline and all(p.poll() is None for p in procs), "a child did not get ready"
        time.sleep(0.05)
    go.touch()
    results = [result_of(finish(p)) for p in procs]
    assert sum(r["compiles"] for r in results) == 1
    assert len({r["cubins"]["matmul"] for r in results}) == 1
    assert redis_cli_keys(redis_url, "kiln:lease:*") == []


@needs_triton
def test_a_compile_killed_midway_leaves_no_group_and_its_lease_expires(tmp_path, redis_url):
    env = triton_env(tmp_path / "node1", tmp_path, KILN_REMOTE_CACHE=redis_url, KILN_REMOTE_LEASE=3)
    # The fault: the process dies (SIGKILL) once Triton has put three of the kernel's files.
    done = run_python("""
        import os, signal, kiln.triton
        from triton.runtime import cache
        manager = cache.get_cache_manager("00" * 32).__class__
        put = manager.put
        count = [0]
        def dying_put(self, data, filename, binary=True):
            path = put(self, data, filename, binary)
            count[0] += 1
            if count[0] == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return path
        manager.put = dying_put
        import triton_kernels
        triton_kernels.compile_kernels(["softmax"])
    """, env=env, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    killed_at = time.time()
    # Nothing visible: no artifact, no folder of files; its staged files are private.
    assert blobs(tmp_path / "node1") == []
    assert os.listdir(str(tmp_path / "node1" / "files")) == ["staging"]
    (left,) = glob.glob(str(tmp_path / "node1" / "files" / "staging" / "triton-*.tmp.*"))
    assert group_files(left) == ["softmax_kernel.source", "softmax_kernel.ttgir", "softmax_kernel.ttir"]
    assert len(redis_cli_keys(redis_url, "kiln:lease:*")) == 1  # held by the dead process, for now
    # Another node waits for the lease to expire (3 s, unrenewed), then compiles it itself.
    other = compile_in_child(triton_env(tmp_path / "node2", tmp_path, KILN_REMOTE_CACHE=redis_url), ["softmax"])
    assert other["compiles"] == 1
    assert time.time() - killed_at < 120
    assert redis_cli_keys(redis_url, "kiln:lease:*") == []
    # The dead process's node: its lock went with the process; the artifact is now on Redis.
    again = compile_in_child(triton_env(tmp_path / "node1", tmp_path, KILN_REMOTE_CACHE=redis_url), ["softmax"])
    assert again["compiles"] == 0 and again["cubins"] == other["cubins"]
    # What the dead process staged is removed by `kiln cache gc` once it is an hour old.
    cli = kiln_cli()
    if cli:
        old = time.time() - 7200
        os.utime(left, (old, old))
        subprocess.run([cli, "cache", "gc"], env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "node1")), check=True,
                       capture_output=True)
        assert not os.path.exists(left)


@needs_triton
def test_a_bundle_carries_tritons_kernels_to_a_node_that_compiles_nothing(tmp_path):
    cli = kiln_cli()
    if not cli:
        pytest.skip("the kiln command is not built beside this kiln package (build/bin/kiln)")
    first = compile_in_child(triton_env(tmp_path / "warm", tmp_path), ["add", "softmax"])
    assert first["compiles"] == 2
    bundle = str(tmp_path / "triton.bundle")
    run = lambda cache, *args: subprocess.run([cli, "cache"] + list(args), env=dict(os.environ, KILN_CACHE_DIR=str(cache)),
                                              capture_output=True, text=True, check=True)
    run(tmp_path / "warm", "pack", bundle)
    # The two groups and the records of their compiles (tests/python/test_triton_warm.py).
    assert "imported 4 artifacts" in run(tmp_path / "node", "unpack", bundle).stdout
    listed = run(tmp_path / "node", "ls").stdout
    assert "add_kernel" in listed and "triton-group" in listed and "cuda:sm_90" in listed
    loaded = compile_in_child(triton_env(tmp_path / "node", tmp_path), ["add", "softmax"])
    assert loaded["compiles"] == 0 and loaded["cubins"] == first["cubins"]
    # Clearing the cache takes the folders that handed the files out with it.
    run(tmp_path / "node", "clear")
    assert not os.path.exists(str(tmp_path / "node" / "files"))


@needs_triton
def test_an_ir_override_file_that_changes_is_compiled_again_where_tritons_key_sees_no_change(tmp_path):
    # Triton keys an autotune config's ir_override by its path: kiln adds the file's content.
    done = run_python("""
        import json, triton, triton_kernels
        src, _ = triton_kernels.sources()["add"]
        listener = triton_kernels.Listener()
        plain = triton.compile(src, target=triton_kernels.TARGET)
        override = %r
        with open(override, "w") as f:
            f.write(plain.asm["ttgir"])
        first = triton.compile(src, target=triton_kernels.TARGET, options={"ir_override": override})
        with open(override, "w") as f:
            f.write(plain.asm["ttgir"].replace("arith.addf", "arith.mulf"))
        second = triton.compile(src, target=triton_kernels.TARGET, options={"ir_override": override})
        again = triton.compile(src, target=triton_kernels.TARGET, options={"ir_override": override})
        print("RESULT " + json.dumps({"compiles": listener.compiles, "hash_same": first.hash == second.hash,
                                      "ptx_differs": first.asm["ptx"] != second.asm["ptx"],
                                      "mul": "mul.f32" in second.asm["ptx"], "again": again.asm["ptx"] == second.asm["ptx"]}))
    """ % str(tmp_path / "add_kernel.ttgir"), env=triton_env(tmp_path / "kiln", tmp_path))
    r = result_of(done)
    assert r["hash_same"], "Triton's key saw the change itself: this test no longer shows what kiln adds"
    assert r == {"compiles": 3, "hash_same": True, "ptx_differs": True, "mul": True, "again": True}, r


@needs_triton
def test_triton_told_to_always_compile_compiles_and_keeps_one_group_per_kernel(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path, TRITON_ALWAYS_COMPILE=1, TRITON_STORE_BINARY_ONLY=1)
    assert compile_in_child(env, ["add"])["compiles"] == 1
    again = compile_in_child(env, ["add"])
    assert again["compiles"] == 1
    # Its files went into the group again, never one artifact per file.
    import sqlite3
    with sqlite3.connect(str(tmp_path / "kiln" / "index.sqlite")) as db:
        assert sorted(db.execute("SELECT op, kind FROM artifacts").fetchall()) == [("add_kernel", "triton-group"),
                                                                                  ("add_kernel", "triton-record")]
    (folder,) = [f for f in glob.glob(str(tmp_path / "kiln" / "files" / "*" / "*")) if "record.json" not in os.listdir(f)]
    assert group_files(folder) == ["add_kernel.cubin", "add_kernel.json", "add_kernel.source"]


@needs_triton
def test_a_kiln_cache_that_cannot_be_opened_is_said_once_and_triton_keeps_its_own(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file where the cache folder should be")
    done = run_python(COMPILE.format(names=["add", "softmax"]), env=triton_env(not_a_folder, tmp_path))
    assert result_of(done)["compiles"] == 2
    assert done.stderr.count("kiln.triton: kiln's cache cannot be used") == 1, done.stderr
    assert glob.glob(str(tmp_path / "triton-own" / "*" / "softmax_kernel.cubin"))


@needs_triton
def test_a_triton_whose_cache_interface_differs_is_said_once_and_keeps_its_own_cache(tmp_path):
    # As if this Triton's CacheManager had another abstract method: found when Triton first asks.
    # install() is True: the version is one kiln speaks.
    r = compile_with_kiln_refused(tmp_path, 'kiln.triton._INTERFACE = kiln.triton._INTERFACE | {"evict"}', installed=True)
    assert r["compiles"] == 2
    assert len(r["said"]) == 1 and "interface is not the one kiln speaks" in r["said"][0], r["said"]
    assert blobs(tmp_path / "kiln") == []
