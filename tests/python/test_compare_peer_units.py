"""tools/bench/compare's peer compilers get the kernels kiln compiles: an op whose entries name
template instances (name_expression) reaches nvcc as a unit that instantiates them
(harness.nvcc_sources). Given the bare source, nvcc compiled no kernel and the warm and
cuda-compile rows compared kiln's work with nothing."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

from kiln_compare import harness  # noqa: E402 (after the path it is found on)


def test_the_instances_of_both_forms_are_read(tmp_path):
    # The bundled specs use the table form; the plain string names the instance for every backend.
    assert harness.spec_facts("gelu_bf16")["cuda_instances"] == ["gelu<__nv_bfloat16>"]
    assert harness.spec_facts("vector_add")["cuda_instances"] == []
    (tmp_path / "plain.toml").write_text('name = "plain"\n[[entry]]\nname = "k"\nname_expression = "block_sum<float, 128>"\n')
    assert harness.spec_facts("plain", str(tmp_path))["cuda_instances"] == ["block_sum<float, 128>"]
    (tmp_path / "cpu_only.toml").write_text('name = "c"\n[[entry]]\nname_expression = { cpu = "f<float>" }  # no CUDA one\n')
    assert harness.spec_facts("cpu_only", str(tmp_path))["cuda_instances"] == []


def test_a_form_the_benchmark_cannot_read_stops_it(tmp_path):
    (tmp_path / "dotted.toml").write_text('name = "d"\n[[entry]]\nname_expression.cuda = "f<float>"\n')
    with pytest.raises(SystemExit, match="dotted.toml: a name_expression written in a form compare does not read"):
        harness.spec_facts("dotted", str(tmp_path))


def test_an_op_without_instances_keeps_its_sources(tmp_path):
    assert harness.nvcc_sources("vector_add", str(tmp_path)) == [os.path.join(ROOT, "specs", "cuda", "vector_add.cu")]
    assert not (tmp_path / "peer-units").exists()


@pytest.mark.skipif(not harness.NVCC, reason="nvcc is not installed here (the CUDA toolkit is absent)")
def test_nvcc_compiles_the_named_kernel_from_the_peer_unit(tmp_path):
    def cubin_of(sources, name):
        out = tmp_path / name
        subprocess.run([harness.NVCC, "-cubin", "-arch=sm_90", "-I" + os.path.join(ROOT, "specs", "include")] + sources +
                       ["-o", str(out)], check=True, capture_output=True)
        return out.read_bytes()
    bare = cubin_of([os.path.join(ROOT, "specs", "cuda", "gelu.cu")], "bare.cubin")
    unit = harness.nvcc_sources("gelu_bf16", str(tmp_path))
    assert unit == [str(tmp_path / "peer-units" / "gelu_bf16.cu")]
    with_kernel = cubin_of(unit, "unit.cubin")
    # The mangled name of gelu<__nv_bfloat16> is in the unit's cubin, and no kernel is in the bare one.
    assert b"_Z4geluI13__nv_bfloat16E" in with_kernel
    assert b"_Z4gelu" not in bare
