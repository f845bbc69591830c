"""Every ```python example in docs/PYTHON.md runs, each in a fresh interpreter, from
tests/python/extensions (where the lltm.cpp they name is), against this build of kiln."""
import os
import re

import pytest

from conftest import EXTENSIONS, HERE, run_python

DOC = os.path.join(HERE, "..", "..", "docs", "PYTHON.md")


def examples():
    with open(DOC, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_page_has_examples():
    assert len(examples()) >= 5


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_runs(index, tmp_path):
    code = examples()[index]
    if "torch" in code:
        pytest.importorskip("torch")
    if "kiln.inductor" in code:
        import importlib.util

        if importlib.util.find_spec("torch._inductor") is None:
            pytest.skip("kiln.inductor needs torch 2.x's Inductor; this Python has torch without it")
    # Its own extension folder: examples load extensions by name, as users do.
    done = run_python("import os\nos.chdir(%r)\n" % EXTENSIONS + code,
                      env={"TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions")})
    assert done.returncode == 0
