"""kiln.torch.load / load_inline: torch C++ extensions compiled in-process by Clang, linked by
lld against the running torch, stored in kiln's cache and imported; results checked against
torch's own computation."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402
import kiln.torch  # noqa: E402

from conftest import EXTENSIONS, run_python, sqlite_rows  # noqa: E402

LLTM = os.path.join(EXTENSIONS, "lltm.cpp")
FUSED = os.path.join(EXTENSIONS, "fused")


def fused_sources():
    return [os.path.join(FUSED, "fused_ops.cpp"), os.path.join(FUSED, "bindings.cpp")]


def lltm_reference(x, w, b, h, c):
    X = torch.cat([h, x], dim=1)
    gates = torch.addmm(b, X, w.t()).chunk(3, dim=1)
    i, o, cand = torch.sigmoid(gates[0]), torch.sigmoid(gates[1]), torch.nn.functional.elu(gates[2])
    new_c = c + cand * i
    return torch.tanh(new_c) * o, new_c


def test_load_builds_imports_and_matches_torch():
    ext = kiln.torch.load(name="kiln_lltm", sources=[LLTM])
    assert ext.__name__ == "kiln_lltm"
    torch.manual_seed(0)
    x, h, c = torch.randn(4, 8), torch.randn(4, 16), torch.randn(4, 16)
    w, b = torch.randn(3 * 16, 24), torch.randn(3 * 16)
    new_h, new_c = ext.forward(x, w, b, h, c)[:2]
    ref_h, ref_c = lltm_reference(x, w, b, h, c)
    assert torch.allclose(new_h, ref_h, atol=1e-6) and torch.allclose(new_c, ref_c, atol=1e-6)
    z = torch.randn(5, 5)
    assert torch.allclose(ext.d_sigmoid(z), (1 - torch.sigmoid(z)) * torch.sigmoid(z))
    # Loading it again in this process with the same inputs gives the same module object.
    assert kiln.torch.load(name="kiln_lltm", sources=[LLTM]) is ext


def test_several_sources_an_include_folder_and_split_flags():
    ext = kiln.torch.load(name="kiln_fused", sources=fused_sources(), extra_include_paths=[os.path.join(FUSED, "include")],
                          # One entry with two flags, as users write them for ninja's shell.
                          extra_cflags=["-O2 -DFUSED_SCALE_DEFAULT=3"])
    x, bias = torch.randn(6, 10, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    got = ext.bias_gelu(x, bias, 2.0)
    assert torch.allclose(got, 2.0 * torch.nn.functional.gelu(x + bias), atol=1e-12)
    assert ext.scale_default == 3
    with pytest.raises(RuntimeError, match="bias is \\[cols\\]"):
        ext.bias_gelu(x, torch.randn(3, dtype=torch.float64))


def test_a_fresh_process_loads_from_the_cache_without_compiling():
    code = """
        import kiln.torch
        ext = kiln.torch.load(name="kiln_lltm", sources=[%r], verbose=True)
        import torch
        z = torch.randn(3, 3)
        assert torch.allclose(ext.d_sigmoid(z), (1 - torch.sigmoid(z)) * torch.sigmoid(z))
    """ % LLTM
    run_python(code)  # compiles, unless an earlier test of this session did
    again = run_python(code)
    assert "kiln: extension kiln_lltm: disk (0 ms compiling" in again.stdout, again.stdout


def test_one_precompiled_torch_header_serves_every_extension_name(tmp_path):
    cache = str(tmp_path / "cache")
    code = """
        import kiln.torch, torch
        for name in ("first_ext", "second_ext"):
            ext = kiln.torch.load(name=name, sources=[%r], verbose=True)
            assert ext.__name__ == name
            z = torch.randn(2, 2)
            assert torch.allclose(ext.d_sigmoid(z), (1 - torch.sigmoid(z)) * torch.sigmoid(z))
    """ % LLTM
    run_python(code, env={"KILN_CACHE_DIR": cache})
    kinds = sorted(row[0] for row in sqlite_rows(cache, "select kind from artifacts"))
    # Two extensions (their names differ, so their binaries do), one torch header artifact.
    assert kinds == ["host-so", "host-so", "pch"], kinds
    ops = sorted(row[0] for row in sqlite_rows(cache, "select op from artifacts where kind = 'host-so'"))
    assert ops == ["first_ext", "second_ext"]


def test_a_compile_error_raises_with_the_diagnostics(tmp_path):
    source = tmp_path / "broken.cpp"
    source.write_text("#include <torch/extension.h>\n\ntorch::Tensor f(torch::Tensor x) {\n  return x + undeclared_name;\n}\n")
    with pytest.raises(RuntimeError) as raised:
        kiln.torch.load(name="kiln_broken", sources=[str(source)])
    error = raised.value
    assert isinstance(error, kiln.KilnError)
    assert "Error building extension 'kiln_broken'" in str(error)
    assert "undeclared_name" in str(error)
    located = [d for d in error.diagnostics if d["severity"] == "error"]
    assert located and located[0]["file"] == str(source) and located[0]["line"] == 4, error.diagnostics


def test_a_torch_without_its_cpp_headers_is_refused_saying_how_to_get_them(tmp_path):
    # Debian's python3-torch without libtorch-dev: include/torch is a link to a folder that is not
    # there. Shown with a torch include folder made that way, in a child process (the facts are
    # computed once per process).
    include = tmp_path / "include"
    include.mkdir()
    os.symlink(str(tmp_path / "missing" / "torch"), str(include / "torch"))
    done = run_python("""
        import kiln, kiln.torch
        facts = dict(kiln.torch.torch_facts())
        facts["system_include_dirs"] = [%r] + facts["system_include_dirs"][1:]
        kiln.torch._facts = facts
        try:
            kiln.torch.load(name="kiln_no_headers", sources=[%r])
        except kiln.KilnError as e:
            print("refused:", e)
        """ % (str(include), LLTM))
    assert "refused: extension 'kiln_no_headers': torch" in done.stdout, done.stdout
    assert "has no C++ headers: %s is a dangling link" % (include / "torch" / "extension.h") in done.stdout
    assert "apt install libtorch-dev" in done.stdout


def test_load_inline_writes_bindings_for_functions():
    source = "torch::Tensor twice(torch::Tensor x) { return 2 * x; }\ntorch::Tensor plus_one(torch::Tensor x) { return x + 1; }\n"
    ext = kiln.torch.load_inline(name="kiln_inline", cpp_sources=source, functions={"twice": "doubles", "plus_one": ""})
    x = torch.arange(4.0)
    assert torch.equal(ext.twice(x), 2 * x) and torch.equal(ext.plus_one(x), x + 1)
    assert ext.twice.__doc__.strip().endswith("doubles")
    main = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "kiln_inline", "main.cpp")
    assert open(main).read().startswith("#include <torch/extension.h>")
    with pytest.raises(ValueError, match="list or dict"):
        kiln.torch.load_inline(name="kiln_inline_bad", cpp_sources=source, functions=42)


def test_every_parameter_of_the_running_torchs_loaders_is_taken_in_its_place():
    # A drop-in: whatever this torch's load/load_inline take by name, kiln's take, in the same order
    # (kiln's follow the newest torch; an older torch lacks some, e.g. 1.13 has no SYCL arguments).
    import inspect
    import torch.utils.cpp_extension as cpp_extension
    for name in ("load", "load_inline"):
        theirs = list(inspect.signature(getattr(cpp_extension, name)).parameters)
        ours = list(inspect.signature(getattr(kiln.torch, name)).parameters)
        assert set(theirs) <= set(ours), (name, set(theirs) - set(ours))
        assert [p for p in ours if p in theirs] == theirs, (name, theirs, ours)


def test_load_inline_gil_not_used_declares_it_in_the_bindings():
    import inspect
    import torch.utils.cpp_extension as cpp_extension
    if "gil_not_used" not in inspect.signature(cpp_extension.load_inline).parameters:
        pytest.skip("torch %s's load_inline has no gil_not_used (torch >= 2.6 has)" % torch.__version__)
    source = "torch::Tensor negate(torch::Tensor x) { return -x; }\n"
    ext = kiln.torch.load_inline(name="kiln_inline_nogil", cpp_sources=source, functions=["negate"], gil_not_used=True)
    assert torch.equal(ext.negate(torch.arange(3.0)), -torch.arange(3.0))
    main = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "kiln_inline_nogil", "main.cpp")
    assert "pybind11::mod_gil_not_used()" in open(main).read()


def test_changed_sources_under_a_loaded_name_load_as_name_v1(tmp_path):
    source = tmp_path / "versioned.cpp"
    source.write_text("#include <torch/extension.h>\nint value() { return 1; }\n"
                      "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"value\", &value); }\n")
    first = kiln.torch.load(name="kiln_versioned", sources=[str(source)])
    source.write_text(source.read_text().replace("return 1", "return 2"))
    second = kiln.torch.load(name="kiln_versioned", sources=[str(source)])
    assert (first.value(), second.value()) == (1, 2)
    assert second.__name__ == "kiln_versioned_v1"
    # The same changed inputs again: the module just loaded, not a _v2.
    assert kiln.torch.load(name="kiln_versioned", sources=[str(source)]) is second


def test_is_python_module_false_registers_torch_ops():
    assert kiln.torch.load(name="kiln_torch_library", sources=[os.path.join(EXTENSIONS, "torch_library.cpp")],
                           is_python_module=False) is None
    x, y = torch.randn(5), torch.randn(5)
    assert torch.allclose(torch.ops.kiln_test.axpby(x, y, 2.0, -1.0), 2 * x - y)


def test_build_directory_receives_the_library(tmp_path):
    ext = kiln.torch.load(name="kiln_lltm_dir", sources=[LLTM], build_directory=str(tmp_path))
    assert ext.__file__ == str(tmp_path / "kiln_lltm_dir.so") and os.path.getsize(ext.__file__) > 0


def test_cuda_sources_without_what_they_need_are_refused_with_the_reason(tmp_path, monkeypatch):
    # A torch without CUDA, or (test_torch_cuda_extension.py builds them) no toolkit where CUDA_HOME says.
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k() {}\n")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    with pytest.raises(kiln.KilnError, match="CUDA sources \\(k.cu\\) need (a torch built with CUDA; torch .* has no CUDA "
                                             "\\(torch.version.cuda is None\\)|the CUDA toolkit's headers; there is no .*cuda.h)"):
        kiln.torch.load(name="kiln_cuda", sources=[str(source)])


def test_a_killed_build_leaves_nothing_that_blocks_the_next(tmp_path):
    cache = str(tmp_path / "cache")
    source = tmp_path / "slow.cpp"
    source.write_text(open(LLTM).read())
    env = dict(os.environ, KILN_CACHE_DIR=cache, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
    child = subprocess.Popen([sys.executable, "-c", "import kiln.torch; kiln.torch.load(name='kiln_killed', sources=[%r])" % str(source)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)  # inside the compile (a cold torch extension takes several seconds)
    child.send_signal(signal.SIGKILL)
    child.wait()
    started = time.time()
    done = run_python("""
        import kiln.torch, torch
        ext = kiln.torch.load(name='kiln_killed', sources=[%r], verbose=True)
        z = torch.randn(2)
        assert torch.allclose(ext.d_sigmoid(z), (1 - torch.sigmoid(z)) * torch.sigmoid(z))
    """ % str(source), env={"KILN_CACHE_DIR": cache})
    assert "kiln: extension kiln_killed: compiled" in done.stdout
    # It did not wait out a lock left by the killed process (kiln's locks die with their holder).
    assert time.time() - started < 120


def test_a_second_node_gets_the_extension_from_redis_and_compiles_nothing(tmp_path, redis_url):
    code = """
        import kiln.torch, torch
        ext = kiln.torch.load(name="kiln_cluster", sources=[%r], verbose=True)
        z = torch.randn(3)
        assert torch.allclose(ext.d_sigmoid(z), (1 - torch.sigmoid(z)) * torch.sigmoid(z))
    """ % LLTM
    first = run_python(code, env={"KILN_CACHE_DIR": str(tmp_path / "node1"), "KILN_REMOTE_CACHE": redis_url})
    assert "kiln_cluster: compiled" in first.stdout
    second = run_python(code, env={"KILN_CACHE_DIR": str(tmp_path / "node2"), "KILN_REMOTE_CACHE": redis_url})
    assert "kiln_cluster: remote (0 ms compiling" in second.stdout, second.stdout + second.stderr
    # The second node has the extension locally now, and compiled nothing: no header artifact either.
    assert [r[0] for r in sqlite_rows(str(tmp_path / "node2"), "select kind from artifacts")] == ["host-so"]


def test_a_fresh_nodes_first_extension_fetches_torchs_precompiled_headers_from_redis(tmp_path, redis_url):
    # Node 1 builds one extension and, beside it, torch/extension.h's precompiled header, which it
    # publishes. Node 2 builds another extension with the same flags: it fetches the header
    # artifact instead of parsing torch's headers.
    first = run_python("""
        import kiln.torch
        kiln.torch.load(name="kiln_pch_one", sources=[%r])
    """ % LLTM, env={"KILN_CACHE_DIR": str(tmp_path / "node1"), "KILN_REMOTE_CACHE": redis_url})
    assert "pch" in [r[0] for r in sqlite_rows(str(tmp_path / "node1"), "select kind from artifacts")], first.stderr
    second = run_python("""
        import kiln.torch, torch
        ext = kiln.torch.load(name="kiln_pch_two", sources=[%r])
        print(ext.forward(torch.zeros(2, 3), torch.ones(3)).tolist())
    """ % os.path.join(EXTENSIONS, "bias_tanh.cpp"),
        env={"KILN_CACHE_DIR": str(tmp_path / "node2"), "KILN_REMOTE_CACHE": redis_url, "KILN_LOG": "info"})
    assert "precompiled header for kiln_pch_two from a remote tier" in second.stderr, second.stderr[-3000:]
    kinds = sorted(r[0] for r in sqlite_rows(str(tmp_path / "node2"), "select kind from artifacts"))
    assert kinds == ["host-so", "pch"], kinds


def test_kiln_warm_torch_stores_the_header_artifacts_a_first_extension_and_model_need(tmp_path):
    cache = tmp_path / "kiln"
    done = subprocess.run([sys.executable, "-m", "kiln", "warm", "--torch"], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, KILN_CACHE_DIR=str(cache), KILN_REMOTE_CACHE="",
                                   PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "torch/extension.h's precompiled header is stored" in done.stdout
    ops = [r[0] for r in sqlite_rows(str(cache), "select op from artifacts where kind = 'pch'")]
    assert "(pch) kiln_warm_torch" in ops, ops
    import torch
    if int(torch.__version__.split(".")[0]) >= 2:
        assert "Inductor's precompiled headers for this CPU are stored" in done.stdout
        assert len(ops) >= 2, ops  # Inductor's prelude too, with this machine's flags
    else:
        assert "has no Inductor" in done.stdout
    # A first extension then uses the stored header: it builds none.
    first = run_python("""
        import kiln.torch
        kiln.torch.load(name="kiln_after_warm", sources=[%r])
    """ % LLTM, env={"KILN_CACHE_DIR": str(cache), "KILN_LOG": "debug", "KILN_REMOTE_CACHE": ""})
    assert "pch: found" in first.stderr, first.stderr[-3000:]
