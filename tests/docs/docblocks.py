"""The code blocks of kiln's documentation (README.md and docs/), as the doc tests run them.

A fenced block's language says who runs it:
  python  tests/python/test_docs.py, in a fresh interpreter under each torch the suite runs
  cpp     check_docs.py cpp: compiled against <kiln/kiln.h> and libkiln.so, then run
  sh      check_docs.py sh: run by bash with the built `kiln` first on PATH, in a scratch folder
  toml    check_docs.py toml: a configuration file, read by `kiln config --config FILE`
  text    output as printed: nothing runs it
A comment line right before a block changes that:
  <!-- file: PATH -->        the block is written to PATH in the page's scratch folder, where the
                             page's cpp and sh blocks then run (a spec, a kernel, a config)
  <!-- not run: REASON -->   the block is shown and not run; REASON says why (a GPU, a cluster's
                             hosts, a build of its own). check_docs.py prints each with its reason.
Any other language must carry one of the two. docs/history/ holds records of past runs, whose
blocks are their output as printed: they are not run.
"""
import os
import re
from dataclasses import dataclass
from typing import Optional

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUN = ("python", "cpp", "sh", "toml")  # languages a runner takes
OUTPUT = ("text",)


@dataclass
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence
    lang: str
    code: str
    file: Optional[str] = None  # <!-- file: PATH -->
    not_run: Optional[str] = None  # <!-- not run: REASON -->

    def where(self):
        return f"{self.page}:{self.line}"


def pages(include_history=False):
    """README.md and every page under docs/ (relative paths), history only when asked."""
    out = ["README.md"]
    for folder, dirs, files in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        rel = os.path.relpath(folder, ROOT)
        if not include_history and rel.split(os.sep)[:2] == ["docs", "history"]:
            continue
        out += [os.path.join(rel, f) for f in sorted(files) if f.endswith(".md")]
    return out


FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARK = re.compile(r"^<!-- (file|not run): (.+?) -->$")


def blocks(page):
    """Every fenced block of `page`, in order, with the marker on the line before it."""
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        mark = MARK.match(lines[start - 1].strip()) if start > 0 else None
        b = Block(page, start + 1, lang, "\n".join(body) + "\n")
        if mark:
            setattr(b, "file" if mark.group(1) == "file" else "not_run", mark.group(2))
        out.append(b)
        i += 1
    return out


def all_blocks(lang=None):
    return [b for p in pages() for b in blocks(p) if lang is None or b.lang == lang]
