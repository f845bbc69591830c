"""Every ```python block of README.md and docs/ runs (tests/docs/docblocks.py says which blocks a
page runs and how one is marked not to), each in a fresh interpreter, from tests/python/extensions
(where the lltm.cpp they name is), against this build of kiln, under each torch the suite runs."""
import importlib.util
import os
import sys

import pytest

from conftest import EXTENSIONS, HERE, run_python

sys.path.insert(0, os.path.join(HERE, "..", "docs"))
import docblocks  # noqa: E402 (after the path it is found on)

BLOCKS = docblocks.all_blocks("python")


def test_the_pages_have_examples():
    assert len([b for b in BLOCKS if not b.not_run]) >= 10


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where() for b in BLOCKS])
def test_example_runs(block, tmp_path):
    if block.not_run:
        pytest.skip(block.not_run)
    code = block.code
    if "torch" in code:
        pytest.importorskip("torch")
    if ("kiln.torch" in code or "kiln.inductor" in code) and importlib.util.find_spec("torch._inductor") is None:
        pytest.skip("kiln.inductor needs torch 2.x's Inductor; this Python has torch without it")
    if "deepspeed" in code.replace("kiln.deepspeed", ""):
        pytest.importorskip("deepspeed")
    # Its own extension folder: examples load extensions by name, as users do.
    done = run_python("import os\nos.chdir(%r)\n" % EXTENSIONS + code,
                      env={"TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions")})
    assert done.returncode == 0
