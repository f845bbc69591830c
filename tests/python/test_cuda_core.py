"""kiln.cuda_core: cuda.core's Program.compile(cache=...) over kiln's store and tiers. Compile-only
here (NVRTC from the cuda-core wheels' NVRTC, sm_90, no GPU): two nodes, each with its own kiln
cache, sharing a real redis-server; node 2 must not compile and must get node 1's bytes.
cuda.core comes into the torch 2.x venv with flashinfer-python (scripts/setup); under torch 1.13
it is not installed and the tests skip saying so.
"""
import json
import subprocess

import pytest

from conftest import run_python
from test_triton import kiln_cli as built_cli

NODE = r"""
import hashlib, json
from cuda.core import Program, ProgramOptions
from kiln.cuda_core import ProgramCache

source = r'''
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
'''
with ProgramCache() as cache:
    code = Program(source, "c++", ProgramOptions(arch="sm_90")).compile("cubin", cache=cache)
    data = bytes(code.code)
    stats = dict(cache.stats)
    entries = len(cache)
print("RESULT " + json.dumps({"sha": hashlib.sha256(data).hexdigest(), "elf": data[:4] == b"\x7fELF", "stats": stats,
                              "entries": entries}))
"""


def needs_cuda_core():
    try:
        import cuda.core.utils  # noqa: F401
    except Exception as e:  # noqa: BLE001 (any failure to import is a reason to skip)
        pytest.skip("cuda.core is not importable here (%s): flashinfer-python brings it into the torch 2.x venv" % e)


def node(env):
    done = run_python(NODE, env=env, timeout=300)
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    assert line, done.stdout + done.stderr
    return json.loads(line[-1][7:])


def test_a_program_compiled_on_node_1_is_node_2s_without_a_compile(tmp_path, redis_url):
    needs_cuda_core()
    one = node({"KILN_CACHE_DIR": str(tmp_path / "cache-node1"), "KILN_REMOTE_CACHE": redis_url})
    two = node({"KILN_CACHE_DIR": str(tmp_path / "cache-node2"), "KILN_REMOTE_CACHE": redis_url})
    again = node({"KILN_CACHE_DIR": str(tmp_path / "cache-node2"), "KILN_REMOTE_CACHE": redis_url})
    assert one["elf"] and one["stats"]["misses"] == 1 and one["stats"]["stored"] == 1, one
    assert two["stats"] == {"hits": 0, "hits_remote": 1, "misses": 0, "stored": 0, "errors": 0}, two
    assert two["sha"] == one["sha"], "node 2 loads node 1's cubin"
    assert again["stats"]["hits"] == 1 and again["entries"] == 1, again
    cli = built_cli()
    if cli:
        stats = json.loads(subprocess.run([cli, "--cache-dir", str(tmp_path / "cache-node1"), "cache", "stats", "--json"],
                                          capture_output=True, text=True, check=True).stdout)
        assert stats["compiles"] == 1, stats


def test_what_the_interface_cannot_do_on_a_shared_store_says_why(tmp_path):
    needs_cuda_core()
    done = run_python(r"""
from kiln.cuda_core import ProgramCache
cache = ProgramCache()
assert cache.get(b"no such key") is None
try:
    del cache[b"no such key"]
except KeyError:
    print("absent: KeyError")
cache[b"k"] = b"\x7fELF not really a cubin"
assert cache[b"k"] == b"\x7fELF not really a cubin" and cache["k"] == cache[b"k"]
for what in (lambda: cache.__delitem__(b"k"), cache.clear):
    try:
        what()
    except NotImplementedError as e:
        print("refused:", e)
try:
    cache[3] = b"x"
except TypeError as e:
    print("typed:", e)
""", env={"KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_REMOTE_CACHE": ""})
    assert "absent: KeyError" in done.stdout
    assert done.stdout.count("refused:") == 2 and "kiln cache clear" in done.stdout, done.stdout
    assert "typed:" in done.stdout
