#!/usr/bin/env python3
"""Keeps README.md and docs/ true (docblocks.py says which block each runner takes).

  check_docs.py blocks                          every block is run by a runner, is output, or is
                                                marked `not run` with its reason
  check_docs.py links                           every relative link resolves (CONTRIBUTING.md's too):
                                                the file, and the heading a `#anchor` names
  check_docs.py cpp --include DIR --libdir DIR  every cpp program compiles against <kiln/kiln.h>
                                                and libkiln.so, and runs
  check_docs.py sh --bin DIR                    every sh block runs (DIR, with `kiln`, first on
                                                PATH; a scratch folder and cache per page)
  check_docs.py toml --bin DIR                  every configuration block is read by `kiln config`
                                                (the files it names need not exist here)

Each runner prints what it ran, and each `not run` block with its reason, and fails naming the
page and line of the first block that does not do what the page says.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docblocks as db  # noqa: E402 (after the path it is found on)
from docblocks import OUTPUT, ROOT, RUN, blocks  # noqa: E402


def fail(block, what, detail=""):
    sys.exit(f"FAIL: {block.where()}: {what}\n{detail}".rstrip())


def skipped(runner, lang):
    for b in db.all_blocks(lang):
        if b.not_run:
            print(f"{runner}: not run: {b.where()}: {b.not_run}")


# ---- blocks: nothing unrun by accident

def check_blocks():
    count = 0
    for b in db.all_blocks():
        count += 1
        if b.file or b.not_run or b.lang in RUN + OUTPUT:
            if b.lang == "" and not b.not_run:
                fail(b, "a block with no language: say what it is (```text for output)")
            if b.lang == "toml" and "[[entry]]" in b.code and not (b.file or b.not_run):
                fail(b, "a spec block: write it to a file (<!-- file: PATH -->) that a cpp or sh block uses, or mark it")
            continue
        fail(b, f"a ```{b.lang} block that no runner takes: mark it <!-- not run: REASON --> or <!-- file: PATH -->")
    print(f"blocks: {count} blocks in {len(db.pages())} pages, each run, output or marked")


# ---- links

LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]*`")


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        out.update(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", line))
    return out


def links_of(page):
    """(line number, target) of every Markdown link outside code."""
    out, in_code = [], False
    for number, line in enumerate(open(os.path.join(ROOT, page), encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            out.append((number, m.group(1)))
    return out


def check_links():
    count, bad = 0, []
    for page in db.pages(include_history=True) + ["CONTRIBUTING.md"]:
        for number, target in links_of(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            count += 1
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else os.path.join(ROOT, page)
            if not os.path.exists(full):
                bad.append(f"{page}:{number}: {target}: no such file ({os.path.relpath(full, ROOT)})")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                bad.append(f"{page}:{number}: {target}: {os.path.relpath(full, ROOT)} has no heading whose anchor is #{anchor}")
    if bad:
        sys.exit("FAIL: links that do not resolve:\n" + "\n".join(bad))
    print(f"links: {count} relative links resolve")


# ---- runners

def scratch_for(page, work):
    """The page's scratch folder, its file: blocks written there."""
    d = os.path.join(work, page.replace(os.sep, "_"))
    os.makedirs(d, exist_ok=True)
    for b in blocks(page):
        if b.file:
            path = os.path.join(d, b.file)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(b.code)
    return d


def env_for(scratch, bin_dir=None):
    env = dict(os.environ)
    env.update({"KILN_CACHE_DIR": os.path.join(scratch, "cache"), "KILN_CONFIG": "/dev/null", "KILN_REMOTE_CACHE": ""})
    if bin_dir:
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return env


def run_block(b, cmd, cwd, env, timeout=600):
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if r.returncode != 0:
        fail(b, f"exits {r.returncode}", b.code + "--- output\n" + r.stdout[-4000:])
    return r.stdout


def each_block(lang, work, run_one, done):
    """Runs `run_one(block, index, scratch)` on every block of `lang` a runner takes, page by page
    in order, each page in a scratch folder of its own; then lists the blocks marked not run."""
    count = 0
    for page in db.pages():
        chosen = [b for b in blocks(page) if b.lang == lang and not b.file and not b.not_run]
        if chosen:
            d = scratch_for(page, work)
            for i, b in enumerate(chosen):
                print(f"{lang}: {b.where()}: {run_one(b, i, d)}")
                count += 1
    skipped(lang, lang)
    print(f"{lang}: {count} {done}")


def check_cpp(include, libdir, work):
    def one(b, i, d):
        src, exe = os.path.join(d, f"prog{i}.cpp"), os.path.join(d, f"prog{i}")
        open(src, "w").write(b.code)
        r = subprocess.run(["c++", "-std=c++17", "-Wall", "-Werror", "-I" + include, src, "-L" + libdir, "-Wl,-rpath," + libdir,
                            "-lkiln", "-o", exe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            fail(b, "does not compile", r.stdout[-4000:])
        out = run_block(b, [exe], d, env_for(d)).strip()
        return "ran: " + (out.splitlines()[-1] if out else "(no output)")
    each_block("cpp", work, one, "programs compiled and ran")


def check_sh(bin_dir, work):
    def one(b, i, d):
        # Paths the pages use as from a clone's root: the bundled specs, the build's programs.
        for name, target in (("specs", os.path.join(ROOT, "specs")), ("build", os.path.dirname(bin_dir))):
            if not os.path.exists(os.path.join(d, name)):
                os.symlink(target, os.path.join(d, name))
        run_block(b, ["bash", "-euo", "pipefail", "-c", b.code], d, env_for(d, bin_dir))
        return "ran"
    each_block("sh", work, one, "shell blocks ran")


def check_toml(bin_dir, work):
    def one(b, i, d):
        path = os.path.join(d, f"config{i}.toml")
        open(path, "w").write(b.code)
        # A file it names (a secret, a CA bundle) need not exist here: kiln config then says so
        # and exits 1. A mistake in the file itself is `kiln: error: FILE:LINE:COL: ...`.
        r = subprocess.run([os.path.join(bin_dir, "kiln"), "--config", path, "config"], cwd=d, env=env_for(d, bin_dir),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if r.returncode not in (0, 1) or "kiln: error" in r.stdout or "config files" not in r.stdout:
            fail(b, f"kiln config does not take it (exit {r.returncode})", r.stdout[-3000:])
        return "read by kiln config"
    each_block("toml", work, one, "configuration blocks read")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("blocks", "links", "cpp", "sh", "toml"))
    p.add_argument("--include")
    p.add_argument("--libdir")
    p.add_argument("--bin")
    p.add_argument("page", nargs="*", help="only these pages (paths from the repository's root)")
    a = p.parse_intermixed_args()
    if a.page:
        chosen = [os.path.normpath(x) for x in a.page]
        db.pages = lambda include_history=False: chosen  # noqa: E731 (this run's narrower set)
    if a.what == "blocks":
        return check_blocks()
    if a.what == "links":
        return check_links()
    work = tempfile.mkdtemp(prefix="kiln-docs-")
    try:
        if a.what == "cpp":
            check_cpp(os.path.abspath(a.include), os.path.abspath(a.libdir), work)
        elif a.what == "sh":
            check_sh(os.path.abspath(a.bin), work)
        else:
            check_toml(os.path.abspath(a.bin), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
