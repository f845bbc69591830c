"""The run's rows as a text table (printed) or a Markdown table, the machine they ran on, and the
docs page written from them (--docs)."""
import os
import platform
import re

from .harness import KILN, NVCC, ROOT, log, rows, run


def fmt_time(ms):
    if ms < 0.001:
        return f"{ms * 1e6:.0f} ns"
    if ms < 0.1:
        return f"{ms * 1000:.1f} us"
    return f"{ms:.2f} ms"


def fmt_ms(s):
    if not s:
        return "-"
    if s.get("sd_ms") is not None:
        return f"{fmt_time(s['median_ms'])} (sd {fmt_time(s['sd_ms'])})"
    if "min_ms" in s:
        return f"{fmt_time(s['median_ms'])} ({fmt_time(s['min_ms'])}..{fmt_time(s['max_ms'])})"
    return f"{fmt_time(s['median_ms'])} (one run)"


def table(markdown=False, section=None):
    """The rows as text (printed after a run), or as Markdown: with `section`, that section's
    rows without the section column (a block of the docs page)."""
    out = []
    if markdown and section:
        out.append("| what | kiln | peer | peer time | peer / kiln |")
        out.append("|---|---|---|---|---|")
    elif markdown:
        out.append("| section | what | kiln | peer | peer time | peer / kiln |")
        out.append("|---|---|---|---|---|---|")
    for r in rows:
        if section and r["section"] != section:
            continue
        if "summary_ratio" in r:
            cells = [r["section"], r["what"], "", "", "", f"**{r['summary_ratio']:.1f}x**" + (f" ({r['note']})" if r.get("note") else "")]
        elif "fraction" in r:
            sd = lambda v, f: f" (sd {f.format(v)})" if v is not None else ""
            cells = [r["section"], r["what"], f"{r['throughput_GBps']:.1f} GB/s" + sd(r.get("throughput_sd"), "{:.1f}"),
                     "threaded STREAM triad" + (f" (copy: {r['copy_GBps']:.1f} GB/s)" if r.get("copy_GBps") else ""),
                     f"{r['triad_GBps']:.1f} GB/s" + sd(r.get("triad_sd"), "{:.1f}"),
                     f"{r['fraction']:.0%}" + sd(r.get("fraction_sd") and r["fraction_sd"] * 100, "{:.0f}%") + " of it"
                     + (f"; goal {r['goal']['text']}: {'pass' if r['goal']['met'] else 'MISS'}" if r.get("goal") else "")]
        elif "throughput_GBps" in r:  # a throughput with no peer in its row
            cells = [r["section"], r["what"], f"{r['throughput_GBps']:.2f} GB/s", "", "", r.get("note") or ""]
        elif "kiln" not in r and "peer" not in r:  # a figure with only a note
            cells = [r["section"], r["what"], "", "", "", r.get("note") or r.get("peer_missing") or ""]
        else:
            peer = r.get("peer")
            ratio = f"{r['ratio']:.1f}x" if r.get("ratio") else ("-" if not r.get("peer_missing") else "")
            cells = [r["section"], r["what"], fmt_ms(r.get("kiln")), (peer or {}).get("command") or r.get("peer_missing") or "",
                     fmt_ms(peer), ratio + (f" ({r['note']})" if r.get("note") else "")]
        if markdown:
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in (cells[1:] if section else cells)) + " |")
        else:
            out.append("  ".join([cells[0].ljust(12), cells[1][:70].ljust(70), cells[2].rjust(24), cells[4].rjust(26), cells[5]]))
            if cells[3]:
                out.append(" " * 14 + "peer: " + cells[3][:160])
    return "\n".join(out)


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    llvm = run([KILN, "toolchains", "--json"], check=False).stdout
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(),
            "os": next((l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release") if l.startswith("PRETTY_NAME")), "?"),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "llvm": (re.search(r"llvm=([\d.]+)", llvm) or [None, "?"])[1],
            "nvcc": run([NVCC, "--version"], check=False).stdout.strip().splitlines()[-1] if NVCC else None}


def load_text(result):
    la = result.get("load_average")
    if not la:
        return "not recorded"
    f = lambda v: ", ".join(f"{x:.2f}" for x in v)
    return f"{f(la['start'])} at the start, {f(la['end'])} at the end"


PAGE = os.path.join(ROOT, "docs", "BENCHMARKS.md")
BLOCK = re.compile(r"<!-- compare:begin (\S+) -->\n(.*?)<!-- compare:end \1 -->\n", re.S)


def page_blocks(text):
    """{section: its block, markers included} of a docs page."""
    return {m.group(1): m.group(0) for m in BLOCK.finditer(text)}


def section_block(name, result, command, json_path, appendix=""):
    """One section's block: the run it comes from, its rows, what the section adds below them."""
    m = result["machine"]
    return f"""<!-- compare:begin {name} -->
## {name}

From `{command}` on {result['date']} at commit {result.get('commit', '?')}. Machine: {m['cpu']}, {m['cores']} cores,
{m['memory_gib']} GiB, {m['os']}, kernel {m['kernel']}, LLVM {m['llvm']}{', ' + m['nvcc'] if m['nvcc'] else ''}; load average
(1, 5, 15 min) {load_text(result)}. The run's JSON: `{os.path.relpath(json_path, ROOT) if json_path else 'build/bench/compare.json'}`.

{table(markdown=True, section=name)}
{appendix}<!-- compare:end {name} -->
"""


HEADER = """# Benchmarks: kiln next to what its users run today

Written by `tools/bench/compare --docs`: each section below holds the figures of the latest run of
that section, with the command, commit, machine and load it ran with; a run of some sections
(`--only`) replaces theirs and leaves the others. Older runs, and what was learnt from them, are
in [history/](history/README.md). Nothing here is typed by hand.

How to read a row: whole-process figures are hyperfine medians with (min..max), or, where a row
says "in rounds", medians of interleaved rounds (each command once per round, the order turned);
resident-process figures are Google Benchmark medians with (sd); "peer / kiln" is the peer's median over kiln's
(above 1, kiln is faster), and every row names the peer's exact command. A goal's pass or MISS is
computed from the row's figures. Figures move between runs of a shared machine: compare ratios
within one section. A row with a floor (its section's code, with the runs it was set from) fails
`compare --check` when it falls below it; CI runs `compare --ci`, those rows of hit, warm, micro
and runtime.

"""


def write_docs(result, order, ran, command, json_path=None, appendices=None, path=PAGE):
    """Rewrites the page: the sections in `ran` from this run's rows, every other section's block
    as the page had it; sections in `order` (the registry's), then any the registry no longer has."""
    old = page_blocks(open(path).read()) if os.path.exists(path) else {}
    blocks = dict(old)
    for name in ran:
        blocks[name] = section_block(name, result, command, json_path, (appendices or {}).get(name, ""))
    names = [n for n in order if n in blocks] + [n for n in blocks if n not in order]
    contents = "Sections: " + ", ".join(f"[{n}](#{n})" for n in names) + ".\n\n"
    missing = [n for n in order if n not in blocks]
    if missing:
        contents += ("No run of " + ", ".join(f"`{n}`" for n in missing) + " has written this page yet: their last figures are in "
                     "[history/](history/README.md).\n\n")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").write(HEADER + contents + "\n".join(blocks[n] for n in names))
    log(f"compare: wrote {path} ({', '.join(ran)} from this run)")
