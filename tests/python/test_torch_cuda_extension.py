"""kiln.torch.load of CUDA extensions: .cu sources compiled by Clang's CUDA path in-process (device
code per architecture, cubins by nvJitLink, one fat binary that the host object registers with
the CUDA runtime), linked against torch's CUDA libraries and cudart, stored and imported.

Under a torch built with CUDA (the venv's) the extensions build and import; running a kernel
needs a GPU, and that test skips saying so where there is none. Under a CPU-only torch
(Debian's 1.13) a .cu source is refused, naming what is missing."""
import ctypes
import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.torch  # noqa: E402

from conftest import EXTENSIONS, run_python  # noqa: E402

SCALE = os.path.join(EXTENSIONS, "cuda_scale")
SOURCES = [os.path.join(SCALE, "scale.cpp"), os.path.join(SCALE, "scale_kernel.cu")]
ARCHS = "8.0;9.0+PTX"

TORCH_CUDA = getattr(torch.version, "cuda", None)
needs_cuda_torch = pytest.mark.skipif(not TORCH_CUDA, reason="torch %s has no CUDA (torch.version.cuda is None)" % torch.__version__)


def toolkit_or_skip():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    if not os.path.isfile(os.path.join(home, "include", "cuda.h")):
        pytest.skip("no CUDA toolkit at %s" % home)


def section(path, name):
    """The bytes of ELF section `name` of a 64-bit little-endian shared object."""
    with open(path, "rb") as f:
        data = f.read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    for h in headers:
        end = data.index(b"\0", names[4] + h[0])
        if data[names[4] + h[0]:end] == name.encode():
            return data[h[4]:h[4] + h[5]]
    raise AssertionError("no section %s in %s" % (name, path))


def zstd_decompress(frame, size):
    """One zstd frame of `size` bytes, through the system's libzstd (Debian's libzstd1)."""
    lib = ctypes.CDLL("libzstd.so.1")
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    lib.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    out = ctypes.create_string_buffer(size)
    n = lib.ZSTD_decompress(out, size, frame, len(frame))
    assert not lib.ZSTD_isError(n) and n == size, "a fat binary entry that does not decompress"
    return out.raw


def fatbin_images(blob):
    """(kind, sm, payload) of each entry of a CUDA fat binary: kind 1 PTX, 2 cubin. A compressed
    entry (zstd, flag 0x8000, as kiln writes for CUDA 13: support/cuda_fatbin.h) is decompressed."""
    magic, _, header, size = struct.unpack_from("<IHHQ", blob, 0)
    assert magic == 0xBA55ED50 and header == 16
    out, at = [], 16
    while at < 16 + size:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, at)
        compressed, = struct.unpack_from("<I", blob, at + 16)
        sm, = struct.unpack_from("<I", blob, at + 28)
        flags, = struct.unpack_from("<Q", blob, at + 40)
        data = blob[at + entry_header:at + entry_header + payload]
        if flags & 0x8000:
            data = zstd_decompress(data[:compressed], struct.unpack_from("<Q", blob, at + 56)[0])
        out.append((kind, sm, data))
        at += entry_header + payload
    return out


@needs_cuda_torch
def test_cuda_extension_builds_imports_and_holds_a_cubin_per_architecture(tmp_path, monkeypatch):
    toolkit_or_skip()
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", ARCHS)
    ext = kiln.torch.load(name="kiln_cuda_scale", sources=SOURCES, extra_cuda_cflags=["-O3"], build_directory=str(tmp_path))
    assert ext.__name__ == "kiln_cuda_scale" and ext.block_size == 256
    images = fatbin_images(section(str(tmp_path / "kiln_cuda_scale.so"), ".nv_fatbin"))
    assert [(kind, sm) for kind, sm, _ in images] == [(2, 80), (2, 90), (1, 90)]
    for kind, sm, payload in images:
        if kind == 2:
            assert payload[:4] == b"\x7fELF"
        else:
            assert b".target sm_90" in payload
        # Both kernels, the templated one for each dtype AT_DISPATCH_FLOATING_TYPES names.
        assert b"half_roundtrip_kernel" in payload
        assert b"16scale_add_kernelIfEEvPT_PKS1_S4_S1_l" in payload and b"16scale_add_kernelIdEEvPT_PKS1_S4_S1_l" in payload
    # The host side registers them with the CUDA runtime when the library loads.
    with open(str(tmp_path / "kiln_cuda_scale.so"), "rb") as f:
        binary = f.read()
    assert b"__cudaRegisterFatBinary" in binary and b"__cudaRegisterFunction" in binary


@needs_cuda_torch
def test_cuda_extension_loaded_again_in_a_fresh_process_is_a_cache_hit(tmp_path):
    toolkit_or_skip()
    code = """
        import kiln.torch
        ext = kiln.torch.load(name="kiln_cuda_scale", sources=%r, extra_cuda_cflags=["-O3"], verbose=True)
        print("block", ext.block_size)
    """ % (SOURCES,)
    env = {"TORCH_CUDA_ARCH_LIST": ARCHS}
    run_python(code, env=env)  # compiles, unless the test above stored it already
    again = run_python(code, env=env)
    assert "kiln: extension kiln_cuda_scale: disk (0 ms compiling" in again.stdout, again.stdout
    assert "block 256" in again.stdout


@needs_cuda_torch
def test_cuda_extension_runs_on_the_gpu(monkeypatch):
    toolkit_or_skip()
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here (torch.cuda.is_available() is False): built and imported only")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)  # the visible GPU's architecture
    ext = kiln.torch.load(name="kiln_cuda_scale_gpu", sources=SOURCES)
    for dtype in (torch.float32, torch.float64):
        x, y = torch.randn(1000, device="cuda", dtype=dtype), torch.randn(1000, device="cuda", dtype=dtype)
        assert torch.allclose(ext.scale_add(x, y, 2.5), 2.5 * x + y)
    x = torch.randn(4096, device="cuda")
    assert torch.equal(ext.half_roundtrip(x), x.half().float())


@needs_cuda_torch
def test_load_inline_cuda_sources_with_nvcc_flags(tmp_path):
    toolkit_or_skip()
    cpp = """
        #include <torch/extension.h>
        void twice_launch(float* p, int64_t n);
        torch::Tensor twice(torch::Tensor x) { twice_launch(x.data_ptr<float>(), x.numel()); return x; }
    """
    cu = """
        #include <cstdint>
        __global__ void twice_kernel(float* p, int64_t n) {
          int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
          if (i < n) p[i] = __expf(p[i]) * 2.0f;
        }
        // max in host code: nvcc's math_functions.hpp makes it __host__ __device__, Clang's headers
        // device-only (kiln's compatibility header gives the host ones).
        void twice_launch(float* p, int64_t n) { twice_kernel<<<max((n + 127) / 128, (int64_t)1), 128>>>(p, n); }
    """
    with pytest.warns(UserWarning, match="-Xptxas=-v dropped"):
        ext = kiln.torch.load_inline(name="kiln_cuda_inline", cpp_sources=cpp, cuda_sources=cu, functions=["twice"],
                                     no_implicit_headers=True, build_directory=str(tmp_path),
                                     extra_cuda_cflags=["--use_fast_math", "-gencode=arch=compute_90,code=sm_90", "-Xptxas -v",
                                                        "--expt-relaxed-constexpr"])
    assert hasattr(ext, "twice")
    images = fatbin_images(section(str(tmp_path / "kiln_cuda_inline.so"), ".nv_fatbin"))
    assert [(kind, sm) for kind, sm, _ in images] == [(2, 90)]  # the -gencode, not TORCH_CUDA_ARCH_LIST
    assert b"twice_kernel" in images[0][2]


@needs_cuda_torch
def test_each_pass_of_a_cuda_source_keeps_its_headers_precompiled(tmp_path):
    """A .cu source is parsed once per device architecture and once for the host, each time with
    torch's ATen headers: each pass gets a PCH of the source's include prefix, built beside the
    first compile and used by the next one whose source starts the same way. Its device code is
    the same bytes with the PCHs as without."""
    toolkit_or_skip()
    cli = os.path.normpath(os.path.join(os.path.dirname(kiln.__file__), "..", "..", "bin", "kiln"))
    if not os.path.exists(cli):
        pytest.skip("no kiln command beside this kiln package (%s)" % cli)
    second = tmp_path / "second"
    second.mkdir()
    with open(SOURCES[0]) as f:
        (second / "scale.cpp").write_text(f.read())
    with open(SOURCES[1]) as f:  # the same includes and kernels: another op, the same PCHs
        (second / "scale_kernel.cu").write_text(f.read() + "\n// another source, the same include prefix\n")
    code = """
        import sys, kiln.torch
        kiln.torch.load(name=sys.argv[1], sources=sys.argv[2:4], extra_cuda_cflags=["-O3"], build_directory=sys.argv[4])
    """
    env = {"KILN_CACHE_DIR": str(tmp_path / "cache"), "TORCH_CUDA_ARCH_LIST": "9.0", "KILN_LOG": "info"}
    out = {}
    for name, sources in (("kiln_pch_first", SOURCES), ("kiln_pch_second", [str(second / "scale.cpp"), str(second / "scale_kernel.cu")])):
        folder = tmp_path / name
        folder.mkdir()
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), name] + sources + [str(folder)], capture_output=True,
                              text=True, env=dict(os.environ, **env), timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        out[name] = (done.stderr, section(str(folder / (name + ".so")), ".nv_fatbin"))
        if name == "kiln_pch_first":
            # The first compile parsed the headers; its process stored the PCHs before it ended:
            # torch/extension.h for scale.cpp, and the .cu's device pass for sm_90 and host pass.
            listed = json.loads(subprocess.run([cli, "--cache-dir", env["KILN_CACHE_DIR"], "cache", "ls", "--json"], check=True,
                                               capture_output=True, text=True).stdout)
            assert len([e for e in listed if e["kind"] == "pch"]) == 3, listed
            assert "precompiled headers" not in done.stderr
    assert ": 2 sources" in out["kiln_pch_second"][0] and ", 3 precompiled headers" in out["kiln_pch_second"][0], out["kiln_pch_second"][0]
    first, second_images = fatbin_images(out["kiln_pch_first"][1]), fatbin_images(out["kiln_pch_second"][1])
    assert [(k, sm) for k, sm, _ in second_images] == [(2, 90)]
    assert first == second_images  # the cubin: the same bytes with the PCHs as without


def test_nvcc_flags_become_clangs_and_architectures(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    got = kiln.torch.cuda_build_options(["-O3 --use_fast_math", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
                                         "-arch=sm_90", "-U__CUDA_NO_HALF_OPERATORS__", "--expt-extended-lambda",
                                         "-Xcompiler -fno-strict-aliasing", "--maxrregcount=64", "-std=c++17"])
    assert got["archs"] == ["sm_80", "compute_80", "sm_90", "compute_90"]
    assert got["flags"] == ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                            "-D__CUDA_NO_HALF2_OPERATORS__", "-O3", "-fgpu-flush-denormals-to-zero", "-fgpu-approx-transcendentals",
                            "-ffp-contract=fast", "-U__CUDA_NO_HALF_OPERATORS__", "-fno-strict-aliasing", "-std=c++17"]
    assert got["notes"] == ["--maxrregcount=64 dropped (nvcc's own option, with no counterpart in Clang's CUDA path)"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "Ampere 9.0+PTX")
    assert kiln.torch.cuda_build_options([])["archs"] == ["sm_80", "sm_86", "compute_86", "sm_90", "compute_90"]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    with pytest.raises(kiln.KilnError, match="'9.0a'"):
        kiln.torch.cuda_build_options([])


@pytest.mark.skipif(bool(TORCH_CUDA), reason="torch %s has CUDA %s: nothing is refused" % (torch.__version__, TORCH_CUDA))
def test_cuda_sources_under_a_torch_without_cuda_are_refused_naming_what_is_missing():
    with pytest.raises(kiln.KilnError, match=r"torch %s has no CUDA \(torch.version.cuda is None\)" % torch.__version__.replace(".", r"\.")):
        kiln.torch.load(name="kiln_cuda_scale", sources=SOURCES)
    with pytest.raises(kiln.KilnError, match="with_cuda=True need a torch built with CUDA"):
        kiln.torch.load(name="kiln_cuda_lltm", sources=[os.path.join(EXTENSIONS, "lltm.cpp")], with_cuda=True)
