"""The store tells the truth, seen from Python's paths into it (docs/STORE.md): every folder kiln
makes is private whichever path makes it first (kiln.Context, Triton's staging, Inductor's builds);
Triton's compiles are counted once each, with their wall and CPU time, and none is lost when the
process is killed; a damaged kernel is named as the index knows it; an index removed under a Triton
cache is rebuilt and nothing valid is lost, even to gc once the blobs are hours old."""
import glob
import importlib.util
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from conftest import run_python
from test_triton import kiln_cli as built_cli
from test_triton import needs_triton, triton_env


def kiln_cli():
    cli = built_cli()
    if not cli:
        pytest.skip("the kiln command is not built beside this kiln package (build/bin/kiln)")
    return cli


def cache_json(cache_dir, *args):
    done = subprocess.run([kiln_cli(), "--cache-dir", str(cache_dir), "cache"] + list(args) + ["--json"], capture_output=True,
                          text=True)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), done


COMPILE = """
import json, triton_kernels
print("RESULT " + json.dumps(triton_kernels.compile_kernels({names!r})))
"""


def compile_in_child(env, names, check=True):
    done = run_python(COMPILE.format(names=names), env=env, check=check)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):]), done
    return None, done


def folders_not_private(top):
    """Every folder under `top` (itself included) whose mode is not 0700."""
    out = []
    for folder, dirs, _ in os.walk(top):
        mode = stat.S_IMODE(os.stat(folder).st_mode)
        if mode != 0o700:
            out.append("%s %o" % (folder, mode))
    return out


@pytest.fixture(autouse=True)
def no_manager_inherited(monkeypatch):
    monkeypatch.delenv("TRITON_CACHE_MANAGER", raising=False)


# ---- every folder kiln makes is private, whichever path makes it first

def test_a_context_makes_every_folder_of_a_new_cache_private(tmp_path):
    top = tmp_path / "new"  # kiln makes this and everything under it
    (tmp_path / "lib.cpp").write_text('extern "C" int f() { return 1; }\n')
    run_python("""
        import kiln
        kiln.op("vector_add").build()
        kiln.context("none").build_library("lib_private", [%r])
    """ % str(tmp_path / "lib.cpp"), env={"KILN_CACHE_DIR": str(top / "deeper" / "cache")})
    assert os.path.isdir(top / "deeper" / "cache" / "blobs")
    assert glob.glob(str(top / "deeper" / "cache" / "manifests" / "*"))
    assert folders_not_private(top) == []


@needs_triton
def test_tritons_staging_makes_the_files_folder_private_when_it_comes_first(tmp_path):
    top = tmp_path / "new"
    result, _ = compile_in_child(triton_env(top / "cache", tmp_path), ["add"])
    assert result["compiles"] == 1
    assert os.path.isdir(top / "cache" / "files" / "staging")
    assert folders_not_private(top) == []


def inductor_available():
    if importlib.util.find_spec("torch") is None:
        return False
    import torch
    return int(torch.__version__.split(".")[0]) >= 2


@pytest.mark.skipif(not inductor_available(), reason="no torch 2.x with Inductor in this Python")
def test_inductors_builds_make_every_folder_of_a_new_cache_private(tmp_path):
    top = tmp_path / "new"
    done = run_python("""
        import os, kiln.inductor
        from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions
        kiln.inductor.install()
        src = os.path.join(%r, "plain.cpp")
        open(src, "w").write('extern "C" int plain() { return 7; }\\n')
        CppBuilder(name="plain", sources=[src], BuildOption=CppTorchOptions(), output_dir=%r).build()
        print(kiln.inductor.stats()["kiln"])
    """ % (str(tmp_path), str(tmp_path)), env={"KILN_CACHE_DIR": str(top / "cache")})
    assert done.stdout.split()[-1] == "1", done.stderr
    assert folders_not_private(top) == []


# ---- counters count what happened

@needs_triton
def test_a_triton_compile_is_counted_once_with_its_wall_and_cpu_time_and_its_hits_with_what_they_saved(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    first, _ = compile_in_child(env, ["add", "softmax"])
    assert first["compiles"] == 2
    stats, _ = cache_json(tmp_path / "kiln", "stats")
    # Each kernel's group and its record are stored; the record is not a compile.
    assert stats["artifacts"] == 4
    assert stats["compiles"] == 2 and stats["misses"] == 2, stats
    assert stats["compile_wall_ms_spent"] > 0 and stats["compile_cpu_ms_spent"] > 0, stats
    second, _ = compile_in_child(env, ["add", "softmax"])
    assert second["compiles"] == 0
    again, _ = cache_json(tmp_path / "kiln", "stats")
    assert again["compiles"] == 2 and again["hits_disk"] == 2, again
    # What the hits saved is what the compiles they spared cost.
    assert again["compile_wall_ms_saved"] == pytest.approx(stats["compile_wall_ms_spent"], abs=0.01)
    assert again["compile_cpu_ms_saved"] == pytest.approx(stats["compile_cpu_ms_spent"], abs=0.01)


KILLED = """
import os, signal, sys, triton_kernels
r = triton_kernels.compile_kernels({names!r})
sys.stderr.write("compiled %d, hit %d\\n" % (r["compiles"], r["hits"]))
os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_triton
def test_a_killed_triton_process_loses_none_of_its_counts(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    names = ["add", "softmax", "layer_norm"]
    done = run_python(KILLED.format(names=names), env=env, check=False)
    assert done.returncode == -9 and "compiled 3, hit 0" in done.stderr, done.stderr
    stats, _ = cache_json(tmp_path / "kiln", "stats")
    assert stats["compiles"] == 3 and stats["misses"] == 3 and stats["compile_cpu_ms_spent"] > 0, stats
    done = run_python(KILLED.format(names=names), env=env, check=False)
    assert done.returncode == -9 and "compiled 0, hit 3" in done.stderr, done.stderr
    stats, _ = cache_json(tmp_path / "kiln", "stats")
    assert stats["compiles"] == 3 and stats["hits_disk"] == 3, stats


@needs_triton
def test_a_damaged_triton_kernel_is_named_by_its_kernel_and_target(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    compile_in_child(env, ["add"])
    import sqlite3
    with sqlite3.connect(str(tmp_path / "kiln" / "index.sqlite")) as db:
        (key,) = db.execute("SELECT key FROM artifacts WHERE kind = 'triton-group'").fetchone()
    blob = glob.glob(str(tmp_path / "kiln" / "blobs" / "*" / (key.hex() + ".blob")))[0]
    data = bytearray(open(blob, "rb").read())
    data[90] ^= 0x7F  # its metadata: the blob cannot say what it is
    open(blob, "wb").write(bytes(data))
    result, done = compile_in_child(env, ["add"])
    assert result["compiles"] == 1
    assert "(triton-group add_kernel, cuda:sm_90)" in done.stderr, done.stderr
    assert "unknown op" not in done.stderr


# ---- the index is a cache of the blobs

@needs_triton
def test_an_index_removed_under_a_triton_cache_loses_nothing_even_to_gc_hours_later(tmp_path):
    env = triton_env(tmp_path / "kiln", tmp_path)
    first, _ = compile_in_child(env, ["add", "softmax"])
    before, _ = cache_json(tmp_path / "kiln", "stats")
    for f in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm"):
        try:
            os.unlink(str(tmp_path / "kiln" / f))
        except FileNotFoundError:
            pass
    hits, _ = compile_in_child(env, ["add", "softmax"])
    assert hits["compiles"] == 0
    stats, done = cache_json(tmp_path / "kiln", "stats")
    assert stats["artifacts"] == before["artifacts"] == 4 and stats["bytes"] == before["bytes"], (stats, before)
    assert stats["adopted"] == 4
    verify, done = cache_json(tmp_path / "kiln", "verify")
    assert done.returncode == 0 and verify["unindexed"] == 0, verify
    # Hours later, gc removes nothing valid.
    old = time.time() - 3 * 3600
    for folder, _, files in os.walk(str(tmp_path / "kiln")):
        for f in files + ["."]:
            os.utime(os.path.join(folder, f), (old, old), follow_symlinks=False)
    gc, _ = cache_json(tmp_path / "kiln", "gc")
    assert gc["evicted"] == 0 and gc["orphans_removed"] == 0, gc
    again, _ = compile_in_child(env, ["add", "softmax"])
    assert again["compiles"] == 0 and again["cubins"] == first["cubins"]
