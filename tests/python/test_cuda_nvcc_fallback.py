"""The last resort for a torch .cu source that Clang's CUDA path refuses and nvcc accepts (issue 28,
item 1): kiln compiles that source with the CUDA toolkit's nvcc as a subprocess, links nvcc's
object with the Clang-built ones, and stores the library under a key naming nvcc; that Clang
refused the source is remembered, so a later build (a new process) is a cache hit that runs no
compiler at all. Real compilers throughout; no GPU is needed to compile for sm_90.

nvcc is observed through a toolkit folder (CUDA_HOME) made of links to the real one whose
bin/nvcc is a script that notes each call and then runs the real nvcc."""
import os

import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

from conftest import EXTENSIONS, run_python  # noqa: E402

REAL_TOOLKIT = "/usr/local/cuda"
LENIENT = os.path.join(EXTENSIONS, "cuda_lenient")
SOURCES = [os.path.join(LENIENT, "lenient.cpp"), os.path.join(LENIENT, "lenient_kernel.cu")]
needs_nvcc = pytest.mark.skipif(not os.access(os.path.join(REAL_TOOLKIT, "bin", "nvcc"), os.X_OK),
                                reason="no nvcc at %s/bin/nvcc" % REAL_TOOLKIT)
needs_cuda_torch = pytest.mark.skipif(not getattr(torch.version, "cuda", None),
                                      reason="torch %s has no CUDA (torch.version.cuda is None)" % torch.__version__)


def toolkit(tmp_path, nvcc):
    """A CUDA_HOME of links to the real toolkit; bin/nvcc: absent (nvcc=False) or a script that
    appends its arguments to calls.log and runs the real nvcc."""
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    for entry in os.listdir(REAL_TOOLKIT):
        if entry != "bin":
            os.symlink(os.path.join(REAL_TOOLKIT, entry), str(home / entry))
    for entry in os.listdir(os.path.join(REAL_TOOLKIT, "bin")):
        if entry != "nvcc":
            os.symlink(os.path.join(REAL_TOOLKIT, "bin", entry), str(home / "bin" / entry))
    log = tmp_path / "calls.log"
    if nvcc:
        script = home / "bin" / "nvcc"
        script.write_text('#!/bin/sh\necho "$@" >> %s\nexec %s/bin/nvcc "$@"\n' % (log, REAL_TOOLKIT))
        script.chmod(0o755)
    return str(home), log


@needs_nvcc
@needs_cuda_torch
def test_a_cu_source_clang_refuses_is_compiled_by_nvcc_and_hits_in_a_new_process(tmp_path):
    home, calls = toolkit(tmp_path, nvcc=True)
    code = """
        import kiln.torch
        ext = kiln.torch.load(name="kiln_cuda_lenient", sources=%r, verbose=True)
        print("block", ext.block_size)
    """ % (SOURCES,)
    env = {"CUDA_HOME": home, "TORCH_CUDA_ARCH_LIST": "9.0", "KILN_CACHE_DIR": str(tmp_path / "cache"),
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "KILN_LOG": "debug"}
    first = run_python(code, env=env)
    assert "kiln: extension kiln_cuda_lenient: compiled (" in first.stdout, first.stdout
    assert "kiln: extension kiln_cuda_lenient: compiled by nvcc: " + SOURCES[1] in first.stdout, first.stdout
    assert "block 128" in first.stdout
    # Why, at debug level: Clang's error on the narrowing.
    assert "Clang's CUDA path failed" in first.stderr and "cannot be narrowed" in first.stderr, first.stderr[-3000:]
    ran = calls.read_text().splitlines()
    assert len(ran) == 1 and SOURCES[1] in ran[0], ran
    # The flags torch's loader gives nvcc, from kiln's CUDA options.
    assert "-gencode=arch=compute_90,code=sm_90" in ran[0] and "-Xcompiler -fPIC" in ran[0] and "-DTORCH_EXTENSION_NAME=" in ran[0]

    again = run_python(code, env=env)
    assert "kiln: extension kiln_cuda_lenient: disk (0 ms compiling" in again.stdout, again.stdout
    assert "compiled by nvcc: " + SOURCES[1] in again.stdout
    assert "block 128" in again.stdout
    assert len(calls.read_text().splitlines()) == 1  # no nvcc run for a hit


@needs_nvcc
def test_without_nvcc_the_clang_error_stands_and_says_nvcc_was_not_found(tmp_path):
    home, calls = toolkit(tmp_path, nvcc=False)
    source = tmp_path / "narrow.cu"
    source.write_text("__global__ void k(int* out, int n) { short s[1] = {n}; out[0] = s[0]; }\n"
                      "void launch(int* out, int n) { k<<<1, 1>>>(out, n); }\n")
    code = """
        import kiln
        try:
            kiln.context("none").build_library("kiln_narrow", [%r], cuda_archs=["sm_90"], flags=["-std=c++17"],
                                               cuda_flags=["-std=c++17"])
        except kiln.KilnError as e:
            print(e)
    """ % (str(source),)
    out = run_python(code, env={"CUDA_HOME": home, "KILN_CACHE_DIR": str(tmp_path / "cache")}).stdout
    assert "cannot be narrowed" in out and "nvcc was not found (%s/bin/nvcc" % home in out, out
    assert not calls.exists()
