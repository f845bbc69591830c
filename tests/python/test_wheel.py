"""`pip install .` as the README gives it: scikit-build-core builds the CMake project into a wheel
with pybind11 from PyPI (found through CMake's config, as on a GPU machine whose Python has no
Debian packages), and the installed package, away from the source tree, runs kiln's ops and builds
a torch extension. Runs where the build backend is installed (the torch 2.x venv scripts/setup
makes); the wheel is a whole Release build of kiln, minutes on two cores."""
import glob
import os
import subprocess
import sys

import pytest

from conftest import run_python

pytest.importorskip("scikit_build_core", reason="scikit-build-core is not installed here (scripts/setup puts it in the torch 2.x venv)")
pytest.importorskip("pybind11", reason="pybind11 from PyPI is not installed here (scripts/setup puts it in the torch 2.x venv)")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def test_pip_builds_a_wheel_whose_package_runs_ops_and_torch_extensions(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    # No build isolation: the backend and pybind11 are the ones this environment has (no network
    # needed); ccache, where installed, for a second run of the suite, and with scripts/wheel's
    # settings so that its Release build (at the same depth under build/) reuses these compiles.
    env = dict(os.environ, CMAKE_C_COMPILER_LAUNCHER="ccache", CMAKE_CXX_COMPILER_LAUNCHER="ccache",
               CCACHE_BASEDIR=ROOT, CCACHE_NOHASHDIR="1")
    if not any(os.access(os.path.join(d, "ccache"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep)):
        env.pop("CMAKE_C_COMPILER_LAUNCHER"), env.pop("CMAKE_CXX_COMPILER_LAUNCHER")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
                            "-w", str(wheels), ROOT], env=env, capture_output=True, text=True, timeout=3600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = glob.glob(str(wheels / "kiln-*.whl"))
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--target",
                                str(site), wheel], capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    # Only the installed package on the path, and no build tree to fall back on.
    done = run_python("""
        import os, numpy as np, torch
        import kiln, kiln.torch
        assert kiln.__file__.startswith(%r), kiln.__file__
        n = 1000
        a, b = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
        out = np.zeros(n, dtype=np.float32)
        kiln.op("vector_add")(a, b, out, n, grid=kiln.cdiv(n, 256), block=256)
        assert np.array_equal(out, a + b)
        ext = kiln.torch.load_inline(name="wheel_inline", cpp_sources="torch::Tensor twice(torch::Tensor x) { return 2 * x; }",
                                     functions=["twice"])
        assert torch.equal(ext.twice(torch.arange(3.0)), torch.tensor([0.0, 2.0, 4.0]))
        print("installed package ok")
        """ % str(site), env={"PYTHONPATH": str(site), "KILN_CACHE_DIR": str(tmp_path / "cache"),
                              "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")})
    assert "installed package ok" in done.stdout
