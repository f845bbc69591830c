"""tools/bench/compare's command line: parse it, build what is needed, run the sections asked
for, print the table, write the JSON (and with --docs the docs page)."""
import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile

from . import sections as registry
from .harness import BUILD, ROOT, check_floors, log, rows, run
from .report import machine, table, write_docs

HEAD = """kiln next to what its users run today, measured in one run on this machine.

usage: tools/bench/compare [--quick] [--only SECTION[,SECTION...]] [--json FILE] [--docs]
       tools/bench/compare --check [--only ...]     fail when a row falls below its floor
       tools/bench/compare --ci                     what CI runs: the floored rows of the quick sections
"""

TAIL = """
It builds what it needs (scripts/setup --bench installs the peers, then the release build),
runs each comparison with warm-up and repetitions, prints one table (medians with min..max or
sd), and writes the same figures as JSON (--json, default build/bench/compare.json). --docs
also puts them in docs/BENCHMARKS.md, each section's in place of its last run's. Nothing in the
table is typed by hand; every row names the exact peer command; a peer that is missing here is a
row that says so.

--check exits 1 when a row falls below its floor, naming each: a floor sits in the section's
code beside the row's goal, with the runs it was set from, below the goal by what noise on a
quiet 2-core machine moves the row. A section that cannot run, or measures no floored row, fails
--check too (a section whose code sets floors, FLOORED, must measure them). --ci is --check over
hit, warm, micro and runtime, each cut to what its floored rows need (a.ci), with the
repetitions those floors were set with.
"""

# The quick sections CI checks (.ci/run), each cut to its floored rows under --ci: a hit in a
# fresh process, the CUDA warm for sm_90 with header artifacts stored, a hit in a resident
# process, CPU AdamW next to DeepSpeed's cpu_adam.
CI_SECTIONS = ["hit", "warm", "micro", "runtime"]


def entry(name, doc):
    """A section's --help entry: its name, then its docstring, indented."""
    text = doc.strip().splitlines()
    first = f"  {name:<13} " if len(name) <= 13 else f"  {name}  "
    return "\n".join([first + text[0]] + [" " * 16 + line.strip() for line in text[1:]])


def description(modules):
    default = [entry(n, m.__doc__) for n, m in modules.items() if not getattr(m, "OPT_IN", False)]
    opt_in = [entry(n, m.__doc__) for n, m in modules.items() if getattr(m, "OPT_IN", False)]
    text = HEAD + "\nSections (all by default):\n" + "\n".join(default) + "\n"
    if opt_in:
        text += "\nOpt-in sections (slow; only with --only):\n" + "\n".join(opt_in) + "\n"
    return text + "\n" + TAIL


def main():
    modules = registry.modules()
    p = argparse.ArgumentParser(description=description(modules), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer runs (a smoke run, not figures to quote)")
    p.add_argument("--only", help="comma-separated sections: " + ", ".join(modules))
    p.add_argument("--json", default=os.path.join(BUILD, "bench", "compare.json"))
    p.add_argument("--docs", action="store_true", help="put this run's sections in docs/BENCHMARKS.md, in place of theirs")
    p.add_argument("--no-setup", action="store_true", help="do not run scripts/setup --bench and the build first")
    p.add_argument("--check", action="store_true", help="exit 1 when a row falls below its floor")
    p.add_argument("--ci", action="store_true", help="--check over " + ",".join(CI_SECTIONS) + ", cut to what their floored rows need")
    a = p.parse_args()
    if a.ci:
        a.check = True
        a.only = a.only or ",".join(CI_SECTIONS)
    a.reps = 3 if a.quick else 5
    sections = a.only.split(",") if a.only else [n for n, m in modules.items() if not getattr(m, "OPT_IN", False)]
    for s in sections:
        if s not in modules:
            p.error(f"unknown section {s}")
    if not a.no_setup:
        log("compare: scripts/setup --bench, then the build")
        run([os.path.join(ROOT, "scripts/setup"), "--bench"])
        run([os.path.join(ROOT, "scripts/build")])
    # The load of this shared machine, beside the figures it moved: at the start and at the end.
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kiln-compare-") as work:
        for s in sections:
            log(f"compare: {s}")
            try:
                modules[s].section(a, os.path.join(work, s) if os.makedirs(os.path.join(work, s)) is None else work)
            except Exception as e:  # a section that cannot run is a row that says why
                rows.append({"section": s, "what": "could not run", "peer_missing": str(e)[:500]})
                log(f"compare: {s} failed: {e}")
    commit = run(["git", "-C", ROOT, "describe", "--always", "--dirty"], check=False).stdout.strip() or "?"
    result = {"date": datetime.date.today().isoformat(), "commit": commit, "machine": machine(), "rows": rows,
              "load_average": {"start": list(load_start), "end": list(os.getloadavg())}}
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    json.dump(result, open(a.json, "w"), indent=1)
    print(table())
    log(f"compare: figures in {a.json}")
    if a.docs and not a.ci:  # a --ci run measures only some rows: not a section's figures
        appendices = {n: m.docs() for n, m in modules.items() if hasattr(m, "docs") and any(r["section"] == n for r in rows)}
        write_docs(result, list(modules), sections, shlex.join(["tools/bench/compare"] + sys.argv[1:]), a.json, appendices)
    if a.check:
        failures = check_floors(sections, [s for s in sections if getattr(modules[s], "FLOORED", False)])
        checked = sum(1 for r in rows if r.get("floor"))
        if failures:
            log(f"compare --check: {len(failures)} of the floors failed:\n  " + "\n  ".join(failures))
            sys.exit(1)
        log(f"compare --check: all {checked} floored rows hold")

