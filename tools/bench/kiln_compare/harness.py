"""What every section of tools/bench/compare shares: where kiln is, running commands, timing them
(hyperfine for whole processes, Google Benchmark for resident ones), medians and spreads, the
rows the table, the JSON and the docs page are made of, goals, and the bundled specs' facts."""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
BUILD = os.environ.get("KILN_BUILD_DIR", os.path.join(ROOT, "build"))
KILN = os.path.join(BUILD, "bin", "kiln")
BENCH = os.path.join(ROOT, "tools", "bench")  # the helper scripts sections run or import
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's PyTorch lives there, not in other pythons on PATH
VENV_PYTHON = os.path.join(os.path.expanduser("~"), ".local/share/kiln-dev/venv/bin/python")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None)

rows = []  # everything the table and the JSON show


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, env=None, check=True, cwd=None):
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r


def stats_ms(samples_ms):
    s = sorted(samples_ms)
    return {"median_ms": statistics.median(s), "min_ms": s[0], "max_ms": s[-1], "n": len(s)}


def spread(samples, digits=2, scale=1):
    """"median (min..max)" of samples divided by scale, for a row's note."""
    m, lo, hi = statistics.median(samples) / scale, min(samples) / scale, max(samples) / scale
    return f"{m:.{digits}f} ({lo:.{digits}f}..{hi:.{digits}f})"


def hyperfine(commands, runs, warmup, prepare=None):
    """commands: [(name, command string)] -> {name: stats}. Whole processes, no shell."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "h.json")
        cmd = ["hyperfine", "-N", "--warmup", str(warmup), "--runs", str(runs), "--export-json", out]
        if prepare:
            cmd += ["--prepare", prepare]
        for name, c in commands:
            cmd += ["-n", name, c]
        run(cmd)
        data = json.load(open(out))
    return {r["command"]: stats_ms([t * 1000 for t in r["times"]]) for r in data["results"]}


def interleaved(commands, rounds, warmup=5, prepare=None, samples_out=None):
    """commands: [(name, command string)] -> {name: stats}, each command run once per round in an
    order that turns each round (posix_spawn, stdout to /dev/null, no shell), so that the drift
    of a shared machine falls on every command alike, and each process starts among the others'
    (as the compiles of a build do), not after a hundred of its own. `prepare`, a shell command,
    runs untimed before each; `samples_out`, a dict, gets each command's times in round order
    (for paired_ratio)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    errors = tempfile.TemporaryFile()  # each run's stderr, shown when it fails
    argvs = [c.split() for _, c in commands]
    # Resolved once, outside the timing: a PATH search costs a bare name (ccache) ~40 us a run
    # that an absolute path does not.
    paths = [shutil.which(a[0]) or a[0] for a in argvs]
    env = dict(os.environ)
    samples = [[] for _ in commands]
    try:
        for r in range(-warmup, rounds):
            for i in range(len(argvs)):
                j = (i + r) % len(argvs)
                if prepare:
                    subprocess.run(["sh", "-c", prepare], check=True)
                errors.seek(0)
                errors.truncate()
                t = time.perf_counter()
                pid = os.posix_spawn(paths[j], argvs[j], env,
                                     file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, errors.fileno(), 2)])
                _, status = os.waitpid(pid, 0)
                if status != 0:
                    errors.seek(0)
                    raise RuntimeError(f"{commands[j][1]} failed (wait status {status}):\n{errors.read()[-2000:].decode(errors='replace')}")
                if r >= 0:
                    samples[j].append((time.perf_counter() - t) * 1000)
    finally:
        os.close(devnull)
        errors.close()
    if samples_out is not None:
        samples_out.update({name: s for (name, _), s in zip(commands, samples)})
    return {name: stats_ms(s) for (name, _), s in zip(commands, samples)}


def paired_ratio(kiln_samples, peer_samples):
    """kiln's time over the peer's in the same round: median and quartiles (for interleaved rows
    and op_peers.py's; compare --check takes the median where a row has one)."""
    r = sorted(k / p for k, p in zip(kiln_samples, peer_samples))
    return {"median": statistics.median(r), "q1": r[len(r) // 4], "q3": r[(3 * len(r)) // 4]}


def gbench(binary, pattern, repetitions):
    """Google Benchmark medians and stddevs by run name (without its /min_time... suffix); a
    single run (repetitions 1) counts as its own median."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "b.json")
        cmd = [os.path.join(BUILD, "bin", binary), f"--benchmark_filter={pattern}", f"--benchmark_out={out}",
               "--benchmark_out_format=json"]
        if repetitions > 1:
            cmd += [f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true"]
        run(cmd)
        data = json.load(open(out))
    res = {}
    for b in data["benchmarks"]:
        name = re.sub(r"/(min_time|real_time|repeats|iterations).*$", "", b["run_name"])
        if b.get("error_occurred") or b.get("skipped"):  # no figure: a row that expects one says so
            log(f"compare: {binary} {name}: {b.get('error_message') or 'skipped'}")
            continue
        agg = b.get("aggregate_name") or ("median" if repetitions <= 1 else None)
        if agg not in ("median", "stddev"):
            continue
        scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        entry = res.setdefault(name, {"counters": {}, "counters_sd": {}})
        entry[agg + "_ms"] = b["real_time"] * scale
        for k, v in b.items():
            if k.endswith("GBps") or k in ("fraction", "p50_us", "p99_us"):
                entry["counters" if agg == "median" else "counters_sd"][k] = v
    for e in res.values():
        e["n"] = repetitions
    return res


def add(section, what, kiln, kiln_how, peer=None, peer_cmd=None, missing=None, note=None):
    row = {"section": section, "what": what, "kiln": dict(kiln, how=kiln_how) if kiln else None,
           "peer": dict(peer, command=peer_cmd) if peer else None, "peer_missing": missing, "note": note}
    if kiln and peer:
        row["ratio"] = peer["median_ms"] / kiln["median_ms"]
    rows.append(row)
    return row


def goal(row, text, met, floor=None):
    """A goal of the brief, stated in the row and computed from its figures. `floor`, a Floor,
    is the least this row may fall to before `compare --check` fails the run (below the goal,
    by what noise on a quiet 2-core machine moves it, so that only a real fall trips it)."""
    row["goal"] = {"text": text, "met": bool(met)}
    row["note"] = (row["note"] + "; " if row.get("note") else "") + f"goal {text}: {'pass' if met else 'MISS'}"
    return floor.on(row) if floor else row


class Floor:
    """What `compare --check` holds a row to: a least ratio (peer / kiln, the row's "ratio", or
    the peer's time over kiln's in the same round where a section pairs them) or a most
    milliseconds (kiln's median, for a row with no peer), and the runs it was set from (command,
    machine, date and the figures seen), so whoever moves it knows what it rests on."""

    def __init__(self, min_ratio=None, max_ms=None, source=""):
        assert (min_ratio is None) != (max_ms is None), "a floor is a least ratio or a most time"
        self.min_ratio, self.max_ms, self.source = min_ratio, max_ms, source

    def as_dict(self):
        return {"min_ratio": self.min_ratio, "max_ms": self.max_ms, "source": self.source}

    def on(self, row):
        """The row, held to this floor (as the JSON keeps it)."""
        row["floor"] = self.as_dict()
        return row


def ceiling(row, max_ms, source):
    """A row with no peer held by `compare --check` to at most `max_ms` (kiln's median)."""
    return Floor(max_ms=max_ms, source=source).on(row)


def checked_value(row):
    """(what a floored row is checked on, its value): the paired ratio when the row has one (the
    drift of a shared machine between rounds cancels in it), else the ratio of medians; kiln's
    median for a most-time floor. None as value when the row has no such figure."""
    f = row["floor"]
    if f["max_ms"] is not None:
        return "kiln's median ms", (row.get("kiln") or {}).get("median_ms")
    pr = row.get("paired_ratio")
    if pr and pr.get("median"):
        return "peer / kiln in the same round (median)", 1.0 / pr["median"]
    return "peer / kiln (medians)", row.get("ratio")


def check_floors(sections, floored_sections=None):
    """The failures of this run's rows against their floors, as lines to print: a row below its
    floor, a floored row with no figure, a section asked for that could not run, or one of
    `floored_sections` (those whose code sets floors; all of `sections` when None) that measured
    no floored row. Empty when every floor holds."""
    failures = []
    for s in sections:
        mine = [r for r in rows if r["section"] == s]
        broken = [r for r in mine if r.get("what") == "could not run"]
        failures += [f"{s}: could not run: {r.get('peer_missing')}" for r in broken]
        floored = [r for r in mine if r.get("floor")]
        expected = floored_sections is None or s in floored_sections
        if expected and not floored and not broken:
            failures.append(f"{s}: no row with a floor was measured (a peer missing? {'; '.join(str(r.get('peer_missing')) for r in mine if r.get('peer_missing')) or 'none said why'})")
        for r in floored:
            f = r["floor"]
            what, value = checked_value(r)
            if value is None:
                failures.append(f"{s}: {r['what']}: no figure to check ({r.get('peer_missing') or 'the peer did not run'})")
            elif f["min_ratio"] is not None and value < f["min_ratio"]:
                failures.append(f"{s}: {r['what']}: {what} {value:.2f}x, below its floor {f['min_ratio']:.2f}x (set from {f['source']})")
            elif f["max_ms"] is not None and value > f["max_ms"]:
                failures.append(f"{s}: {r['what']}: {what} {value:.3f}, above its ceiling {f['max_ms']:.3f} ms (set from {f['source']})")
    return failures


def section_took(section, started, load_before):
    """The row that closes a long section: how long it took (since `started`, a time.monotonic())
    and the machine's load average at its start (`load_before`) and at its end."""
    took = time.monotonic() - started
    rows.append({"section": section, "what": "this section's run",
                 "note": f"took {took / 60:.1f} min; load average (1, 5, 15 min) "
                         f"{' '.join(f'{x:.2f}' for x in load_before)} at its start, "
                         f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at its end, on {os.cpu_count()} cores",
                 "took_s": took})


def child_env():
    """The environment of a measured Python: this one's, less what would change what it measures."""
    env = dict(os.environ)
    for var in ("KILN_CACHE_DIR", "KILN_REMOTE_CACHE", "KILN_PCH", "TORCH_EXTENSIONS_DIR", "PYTHONPATH", "MAX_JOBS", "CCACHE_DIR",
                "CCACHE_DISABLE", "TORCH_NO_COMPILER_WRAPPER"):
        env.pop(var, None)
    return env


def hyperfine_env(commands, runs, warmup, env):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return hyperfine(commands, runs, warmup)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def cache_kinds(cache_dir):
    import sqlite3
    with sqlite3.connect(os.path.join(cache_dir, "index.sqlite")) as db:
        return sorted(r[0] for r in db.execute("select kind from artifacts"))


def bundled_specs():
    specs = sorted(f for f in os.listdir(os.path.join(ROOT, "specs")) if f.endswith(".toml"))
    return [f[:-5] for f in specs]


def spec_facts(op, spec_dir=None):
    """Sources, include folders, flags and CUDA sources of a spec, read with a tiny TOML subset."""
    spec_dir = spec_dir or os.path.join(ROOT, "specs")
    text = open(os.path.join(spec_dir, op + ".toml")).read()
    main, _, cuda = text.partition("\n[cuda]")
    main = main.split("\n[[entry]]")[0]

    def strings(section, key):
        m = re.search(r"^" + key + r"\s*=\s*\[([^\]]*)\]", section, re.M)
        return re.findall(r'"([^"]*)"', m.group(1)) if m else []
    # The CUDA template instances the entries name (name_expression = "..." or { cuda = "..." }),
    # one pass over the lines that name the key. Another form (a dotted key, a table of its own)
    # would give the peers the bare source again, with no kernel in it: stop instead.
    instances = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not re.search(r"\bname_expression\b", line):
            continue
        m = re.match(r'^name_expression\s*=\s*(?:"([^"]*)"|\{([^}\n]*)\})\s*(#.*)?$', line)
        if not m:
            raise SystemExit(f"compare: {op}.toml: a name_expression written in a form compare does not read: {line.strip()}")
        plain, table = m.group(1), m.group(2)
        cuda_key = re.search(r'\bcuda\s*=\s*"([^"]*)"', table) if table is not None else None
        instance = plain if table is None else cuda_key.group(1) if cuda_key else ""  # a table without cuda: CPU only
        if instance:
            instances.append(instance)
    return {"dir": spec_dir, "sources": strings(main, "sources"), "include_dirs": strings(main, "include_dirs"),
            "flags": strings(main, "flags"), "defines": strings(main, "defines"), "cuda_sources": strings(cuda, "sources"),
            "cuda_instances": instances}


def nvcc_sources(op, work):
    """The CUDA sources a peer compiler (nvcc, clang -x hip) is given for op, so that it compiles
    the kernels kiln compiles: the spec's sources, or, where the entries name template instances
    (kiln gives NVRTC these as name expressions, and Clang an instantiating entry), one unit in
    `work` that includes the source and takes each instance's address. Given the bare source, nvcc
    instantiates nothing and makes an empty 1.7 KB cubin (adamw, gelu and their bf16 twins)."""
    f = spec_facts(op)
    srcs = [os.path.join(ROOT, "specs", s) for s in f["cuda_sources"]]
    if not f["cuda_instances"]:
        return srcs
    if len(srcs) != 1:
        raise SystemExit(f"compare: {op}: template instances over {len(srcs)} CUDA sources: the peer's unit takes one")
    unit = os.path.join(work, "peer-units", op + ".cu")
    os.makedirs(os.path.dirname(unit), exist_ok=True)
    lines = [f"// {op} for a peer compiler: its source and the kernels its entries name", f'#include "{srcs[0]}"']
    lines += [f"[[maybe_unused]] static auto* const kiln_instance_{i} = &{e};" for i, e in enumerate(f["cuda_instances"])]
    with open(unit, "w") as out:
        out.write("\n".join(lines) + "\n")
    return [unit]


# The headers whose kernels kiln compiles through Clang by default (builders/op_builder.cpp,
# is_heavy_cuda_header): CCCL's and cooperative groups'.
HEAVY_CUDA_HEADERS = ("cub/", "thrust/", "cuda/", "nv/", "cooperative_groups")


def cuda_route(op):
    """"clang" for an op whose CUDA sources include a CCCL or cooperative-groups header (kiln's
    default route when it has Clang), else "nvrtc"."""
    for s in spec_facts(op)["cuda_sources"]:
        for h in re.findall(r"^\s*#\s*include\s*<([^>]+)>", open(os.path.join(ROOT, "specs", s)).read(), re.M):
            if h.startswith(HEAVY_CUDA_HEADERS):
                return "clang"
    return "nvrtc"


def sibling_specs(dst):
    """A copy of the bundled specs whose CUDA sources end with one more comment line: every op a
    key of its own, the same include prefix. Warming it leaves the header artifacts (PCHs) the
    bundled ops use in a cache, and none of their own artifacts."""
    shutil.copytree(os.path.join(ROOT, "specs"), dst)
    for f in os.listdir(os.path.join(dst, "cuda")):
        with open(os.path.join(dst, "cuda", f), "a") as out:
            out.write("// a sibling of the bundled op, for the benchmark\n")
    return dst


def cpu_level():
    out = run([KILN, "doctor", "--json"]).stdout
    m = re.search(r"cpu:(x86-64(-v\d)?)", out)
    return m.group(1) if m else "x86-64-v3"


def compiler_command(compiler, op, out_path, level, spec_dir=None):
    f = spec_facts(op, spec_dir)
    cmd = [compiler, "-std=c++20", "-O3", f"-march={level}", "-fPIC", "-shared"] + f["flags"]
    cmd += ["-D" + d for d in f["defines"]]
    cmd += ["-I" + os.path.join(f["dir"], d) for d in f["include_dirs"]] + ["-I" + os.path.join(ROOT, "backends/cpu/include")]
    cmd += [os.path.join(f["dir"], s) for s in f["sources"]] + ["-o", out_path]
    return cmd

