"""Shared fixtures for kiln's Python tests: real compiles, real cache folders, real servers.

scripts/test runs this suite under Debian's torch 1.13 (/usr/bin/python3) and under the newest
torch 2.x (the venv scripts/setup makes), each with a private KILN_CACHE_DIR and
TORCH_EXTENSIONS_DIR. Tests that need a fresh cache or a second node run a child Python with a
cache folder of their own.
"""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# The tests' tiers are their own, on 127.0.0.1: the once-per-process warning that a tier is
# unsigned (docs/SECURITY.md) is not what they test. tests/security asks for it with 0.
os.environ.setdefault("KILN_REMOTE_UNSIGNED_OK", "1")
EXTENSIONS = os.path.join(HERE, "extensions")


@pytest.fixture(scope="session", autouse=True)
def private_cache():
    """Every test process gets a cache of its own unless scripts/test gave it one."""
    made = []
    for var in ("KILN_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        if not os.environ.get(var):
            os.environ[var] = tempfile.mkdtemp(prefix="kiln-pytest-")
            made.append(os.environ[var])
    yield
    for d in made:
        shutil.rmtree(d, ignore_errors=True)


def run_python(code, env=None, timeout=600, check=True):
    """Runs `code` in a fresh interpreter (this one's), the build tree's kiln on its path;
    returns the CompletedProcess (stdout and stderr as text)."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    full_env.update(env or {})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError("child python failed (%d):\n--- stdout\n%s\n--- stderr\n%s" % (done.returncode, done.stdout, done.stderr))
    return done


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def start_redis(folder):
    """A real redis-server on 127.0.0.1 for the block's length; yields its URL."""
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server is not installed (scripts/setup installs it)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start on port %d" % port)
    try:
        yield "redis://127.0.0.1:%d" % port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server on 127.0.0.1, stopped after the test."""
    with start_redis(tmp_path) as url:
        yield url


def sqlite_rows(cache_dir, query):
    import sqlite3
    with sqlite3.connect(os.path.join(cache_dir, "index.sqlite")) as db:
        return db.execute(query).fetchall()
