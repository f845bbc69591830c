"""torch.compile's own caches through kiln (kiln.torch.compile_cache), with the real torch 2.x
from PyPI, real Hugging Face models (small configs, random weights), real kiln stores, a real
Redis as the cluster tier and real processes as nodes (tests/python/compile_cache_node.py). A
damaged blob, a stranger's secret, a dead tier and a kill are the faults made up.

Under Debian's torch 1.13 there is no torch.compile: every test skips, saying so."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import free_port, sqlite_rows, start_redis

try:
    import torch

    HAVE_INDUCTOR = hasattr(torch, "compile") and int(torch.__version__.split(".")[0]) >= 2
except ImportError:
    HAVE_INDUCTOR = False
pytestmark = pytest.mark.skipif(not HAVE_INDUCTOR, reason="torch.compile's caches need torch 2.x; this Python has torch %s" % (
    getattr(sys.modules.get("torch"), "__version__", "none")))

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(HERE, "compile_cache_node.py")
JOB = "kiln-test-job"


def node_env(tmp, name, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
                KILN_CACHE_DIR=os.path.join(tmp, name + "-kiln"), TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, name + "-inductor"),
                KILN_REMOTE_CACHE="", TORCH_COMPILE_JOB_ID=JOB,
                # Patient with the tier: these tests are about what nodes share, and a machine
                # running the suite beside other work can take longer than kiln's defaults.
                KILN_REMOTE_CONNECT_TIMEOUT="5", KILN_REMOTE_TIMEOUT="30")
    full.update({k: str(v) for k, v in env.items()})
    return full


def result_of(stdout, stderr=""):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError("no result:\n--- stdout\n%s\n--- stderr\n%s" % (stdout[-4000:], stderr[-8000:]))


def run_node(tmp, name, models, prefix=(), **env):
    """One node's run in a fresh process: (outputs, report with stderr)."""
    out = os.path.join(tmp, name + ".pt")
    done = subprocess.run(list(prefix) + [sys.executable, NODE, out], env=node_env(tmp, name, MODELS=models, **env),
                          capture_output=True, text=True, timeout=900)
    report = result_of(done.stdout, done.stderr)
    report["stderr"] = done.stderr
    return torch.load(out), report


def kind(report, name):
    return report["caches"].get("torch-" + name, {})


def assert_same(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=0, rtol=0, msg=lambda m: key + ": " + m)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Node 1 of a cluster: a Llama training step and a function called at two lengths, compiled
    cold and published to the cluster's Redis (signed with the cluster's secret)."""
    tmp = str(tmp_path_factory.mktemp("compile-cache"))
    secret = os.path.join(tmp, "secret")
    with open(secret, "w") as f:
        f.write("the cluster's secret\n")
    os.chmod(secret, 0o600)
    with start_redis(tmp) as url:
        out, report = run_node(tmp, "node1", "llama,dynamic", KILN_REMOTE_CACHE=url, KILN_REMOTE_SECRET_FILE=secret)
        yield {"tmp": tmp, "url": url, "secret": secret, "out": out, "report": report}


def test_node_one_lowers_each_graph_and_stores_every_entry(cluster):
    report = cluster["report"]
    fx, aot = kind(report, "fx-graph"), kind(report, "aot-autograd")
    # Llama's forward and backward, the function static then dynamic: four FX graphs lowered, each
    # claimed (no other process asked), each stored; three AOTAutograd entries.
    assert report["inductor"]["fxgraph_cache_miss"] == 4 and fx["claimed"] == 4 and fx["stored"] == 4, report
    assert aot["stored"] == 3 and report["graphs"] == 3, report
    assert kind(report, "dynamo-pgo")["stored"] >= 1, report
    rows = dict(sqlite_rows(os.path.join(cluster["tmp"], "node1-kiln"), "SELECT kind, COUNT(*) FROM artifacts GROUP BY kind"))
    assert rows["torch-fx-graph"] == 4 and rows["torch-aot-autograd"] == 3 and rows["torch-dynamo-pgo"] >= 1, rows
    assert rows["cxx-facts"] == 2, rows  # this compiler's answers, and the name's for nodes without one
    assert "remote" not in report["stderr"].lower(), report["stderr"][-3000:]  # every entry reached the tier


def test_a_new_node_with_only_the_cluster_tier_lowers_nothing_runs_no_compiler_and_computes_the_same(cluster, tmp_path):
    # A runtime image without g++: PATH names no compiler at all. strace records every program run.
    trace = tmp_path / "exec.trace"
    strace = shutil.which("strace")
    prefix = [strace, "-f", "-qq", "-e", "trace=execve", "-o", str(trace)] if strace else []
    out, report = run_node(str(tmp_path), "node2", "llama,dynamic", prefix=prefix, PATH="/nonexistent",
                           KILN_REMOTE_CACHE=cluster["url"], KILN_REMOTE_SECRET_FILE=cluster["secret"])
    assert_same(cluster["out"], out)
    assert report["inductor"].get("fxgraph_cache_miss", 0) == 0 and report["inductor"]["fxgraph_cache_hit"] == 3, report["caches"]
    assert report["aot_autograd"].get("autograd_cache_miss", 0) == 0, report
    assert kind(report, "fx-graph")["hits_remote"] == 3 and kind(report, "aot-autograd")["hits_remote"] == 2, report
    # Dynamo's profile from node 1 says the length is dynamic: one graph for both lengths, not two.
    assert report["graphs"] == 2 and kind(report, "dynamo-pgo")["hits_remote"] >= 1, report
    assert report["kiln"]["hits"] == report["kiln"]["kiln"] > 0, report["kiln"]
    if strace:
        programs = [line for line in trace.read_text().splitlines() if "execve(" in line and "ENOENT" not in line]
        ran = [line.split('execve("', 1)[1].split('"', 1)[0] for line in programs]
        assert set(ran) <= {sys.executable, "/sbin/ldconfig", os.path.realpath(sys.executable)}, sorted(ran)
        # Not even Inductor's ISA probes' child Pythons: their verdicts came with the probes.
        assert len([p for p in ran if "python" in p]) == 1, programs
    assert report["isa_probes"]["verdicts_reused"] >= 1 and report["isa_probes"]["probes_loaded"] == 0, report["isa_probes"]


def test_a_damaged_entry_is_a_miss_never_a_wrong_graph(cluster, tmp_path):
    store = tmp_path / "node3-kiln"
    shutil.copytree(os.path.join(cluster["tmp"], "node1-kiln"), store)
    (key,) = sqlite_rows(str(store), "SELECT hex(key) FROM artifacts WHERE kind = 'torch-aot-autograd' "
                                     "ORDER BY size DESC LIMIT 1")[0]
    blob = store / "blobs" / key.lower()[:2] / (key.lower() + ".blob")
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    out, report = run_node(str(tmp_path), "node3", "llama,dynamic")
    assert_same(cluster["out"], out)
    assert kind(report, "aot-autograd")["misses"] >= 1 and kind(report, "aot-autograd")["stored"] >= 1, report
    assert "damaged" in report["stderr"] or "does not match" in report["stderr"], report["stderr"][-3000:]


def test_a_bundle_carries_the_entries_to_a_machine_with_no_tier(cluster, tmp_path):
    bundle = tmp_path / "job.kiln"
    env = node_env(str(tmp_path), "packer", KILN_CACHE_DIR=os.path.join(cluster["tmp"], "node1-kiln"))
    packed = subprocess.run([sys.executable, "-m", "kiln", "cache", "pack", str(bundle)], env=env, capture_output=True, text=True)
    assert packed.returncode == 0, packed.stderr
    env = node_env(str(tmp_path), "node6")
    unpacked = subprocess.run([sys.executable, "-m", "kiln", "cache", "unpack", str(bundle)], env=env, capture_output=True, text=True)
    assert unpacked.returncode == 0, unpacked.stderr
    out, report = run_node(str(tmp_path), "node6", "dynamic")
    assert_same({k: v for k, v in cluster["out"].items() if k.startswith("dynamic")}, out)
    assert report["inductor"].get("fxgraph_cache_miss", 0) == 0 and kind(report, "fx-graph")["hits"] >= 1, report
    assert report["kiln"]["hits"] == report["kiln"]["kiln"], report["kiln"]


def test_entries_signed_by_another_cluster_are_refused(cluster, tmp_path):
    stranger = tmp_path / "secret"
    stranger.write_text("another cluster's secret\n")
    stranger.chmod(0o600)
    out, report = run_node(str(tmp_path), "node4", "dynamic", KILN_REMOTE_CACHE=cluster["url"], KILN_REMOTE_SECRET_FILE=stranger)
    assert_same({k: v for k, v in cluster["out"].items() if k.startswith("dynamic")}, out)
    fx = kind(report, "fx-graph")
    assert fx.get("hits_remote", 0) == 0 and fx["stored"] >= 1, report


def _key(tmp, name):
    """`kiln key generate NAME --out FILE`: the public key it printed."""
    out = subprocess.run([sys.executable, "-m", "kiln", "key", "generate", name, "--out", os.path.join(tmp, name + ".key")],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_entries_an_untrusted_key_published_never_load(tmp_path):
    """An attacker with write access to the cluster's Redis and a key pair of its own publishes
    torch.compile entries under torch's real keys: pickles whose __reduce__ writes a marker. A node
    trusting only the cluster's key compiles, loads none of them, and says why; one trusting the
    attacker's key would run them (the marker shows the test can fail)."""
    tmp = str(tmp_path)
    ours, theirs = _key(tmp, "cluster-1"), _key(tmp, "attacker")
    marker = tmp_path / "marker"
    with start_redis(tmp) as url:
        run_node(tmp, "attacker", "small", KILN_REMOTE_CACHE=url, KILN_SIGNING_KEY_FILE=os.path.join(tmp, "attacker.key"),
                 POISON=str(marker))
        assert not marker.exists()
        out, report = run_node(tmp, "victim", "small", KILN_REMOTE_CACHE=url, KILN_TRUSTED_KEYS=ours)
        assert not marker.exists(), "an entry signed by an untrusted key ran"
        torch.testing.assert_close(out["small"], (torch.arange(24.0).reshape(4, 6) * 2).sin().sum(-1))
        fx = kind(report, "fx-graph")
        assert fx.get("hits_remote", 0) == 0 and fx["stored"] == 1, report
        assert "attacker" in report["stderr"] and "does not trust" in report["stderr"], report["stderr"][-3000:]
        # The same entries on a node that trusts the attacker's key: they load, and run.
        env = node_env(tmp, "gullible", MODELS="small", KILN_REMOTE_CACHE=url, KILN_TRUSTED_KEYS=ours + "," + theirs)
        subprocess.run([sys.executable, NODE, str(tmp_path / "gullible.pt")], env=env, capture_output=True, text=True, timeout=900)
        assert marker.exists(), "the poisoned entries never reached a node that trusts their key: this test proves nothing"


def test_a_dead_tier_is_a_local_run_with_one_warning(tmp_path):
    out, report = run_node(str(tmp_path), "node5", "small", KILN_REMOTE_CACHE="redis://127.0.0.1:%d" % free_port())
    torch.testing.assert_close(out["small"], (torch.arange(24.0).reshape(4, 6) * 2).sin().sum(-1))
    assert kind(report, "fx-graph")["stored"] == 1 and kind(report, "fx-graph")["errors"] == 0, report
    warnings = [line for line in report["stderr"].splitlines() if "127.0.0.1" in line and "warn" in line.lower()]
    assert 1 <= len(warnings) <= 2, report["stderr"][-3000:]  # one for the tier (and its recovery, if it says one)


def test_ranks_starting_together_lower_each_graph_once(tmp_path):
    # Three ranks on two nodes (two share a store), one Redis: one lowers, the others wait and load.
    with start_redis(str(tmp_path)) as url:
        procs = []
        for rank, store in enumerate(("a", "a", "b")):
            env = node_env(str(tmp_path), "rank%d" % rank, MODELS="transformer", KILN_REMOTE_CACHE=url,
                           KILN_CACHE_DIR=str(tmp_path / ("store-" + store)))
            procs.append(subprocess.Popen([sys.executable, NODE, str(tmp_path / ("rank%d.pt" % rank))], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        reports = []
        for p in procs:
            stdout, stderr = p.communicate(timeout=900)
            reports.append(result_of(stdout, stderr))
    lowered = sum(r["inductor"].get("fxgraph_cache_miss", 0) for r in reports)
    claimed = sum(kind(r, "fx-graph").get("claimed", 0) for r in reports)
    loaded = sum(r["inductor"].get("fxgraph_cache_hit", 0) for r in reports)
    assert lowered == 1 and claimed == 1 and loaded == 2, reports
    outs = [torch.load(tmp_path / ("rank%d.pt" % r)) for r in range(3)]
    assert_same(outs[0], outs[1])
    assert_same(outs[0], outs[2])


def test_a_rank_killed_while_lowering_does_not_hold_the_others(tmp_path):
    with start_redis(str(tmp_path)) as url:
        env = dict(MODELS="small", KILN_REMOTE_CACHE=url, KILN_REMOTE_LEASE=3, LOWERING_HOOK=1)
        first = subprocess.Popen([sys.executable, NODE, str(tmp_path / "a.pt")], env=node_env(str(tmp_path), "a", **env),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in first.stdout:
            if line.startswith("LOWERING"):
                break
        start = time.monotonic()
        second = subprocess.Popen([sys.executable, NODE, str(tmp_path / "b.pt")], env=node_env(str(tmp_path), "b", **env),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        first.send_signal(signal.SIGKILL)
        first.wait()
        stdout, stderr = second.communicate(timeout=600)
        waited = time.monotonic() - start
    report = result_of(stdout, stderr)
    # The killed rank stored nothing; the second made the graph itself once the lease lapsed.
    assert kind(report, "fx-graph")["stored"] == 1 and report["inductor"]["fxgraph_cache_miss"] == 1, report
    assert not sqlite_rows(str(tmp_path / "a-kiln"), "SELECT key FROM artifacts WHERE kind = 'torch-fx-graph'")
    assert waited < 120, waited


def test_the_key_is_torchs_plus_torchs_version_and_the_cpus_vector_isa():
    from kiln.torch import compile_cache

    text = compile_cache.key_text("torch-fx-graph", "pt2:fx-graph-v1::fabc:c1")
    assert "torch " + torch.__version__ in text and "vec-isa " in text and text.endswith("pt2:fx-graph-v1::fabc:c1")
    # Dynamo's profiles hold no generated code: no vector ISA in their key.
    assert "vec-isa" not in compile_cache.key_text("torch-dynamo-pgo", "k")


def test_the_old_module_names_still_work_and_warn():
    done = subprocess.run([sys.executable, "-W", "always", "-c", "import kiln.inductor, kiln.torch.inductor, kiln.triton_warm; "
                           "print(kiln.inductor is kiln.torch.inductor, callable(kiln.triton_warm.main))"],
                          env=node_env("/tmp", "alias"), capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True True", done.stderr
    assert "kiln.inductor is now kiln.torch.inductor" in done.stderr and "kiln.triton_warm is now" in done.stderr
