"""the wheel scripts/wheel made (LLVM linked in) next to the build from source:
its size, the toolchain library's load (what a first miss adds), a whole
first-miss `kiln build`
"""
import os

from ..harness import add, BUILD, hyperfine, KILN, ROOT, rows, run, stats_ms, SYSTEM_PYTHON


def section(a, work):
    """The wheel (scripts/wheel, LLVM linked in) next to the build from source (the system's
    shared libLLVM and libclang-cpp): its size, the load of the toolchain library a first miss
    pays, and a whole first-miss `kiln build` from each."""
    wheels = sorted((w for w in os.listdir(os.path.join(ROOT, "dist")) if w.startswith("kiln-") and w.endswith(".whl")),
                    key=lambda w: os.path.getmtime(os.path.join(ROOT, "dist", w))) if os.path.isdir(os.path.join(ROOT, "dist")) else []
    mine = [w for w in wheels if f"-{SYSTEM_PYTHON_TAG}-" in w]
    if not mine:
        add("wheel", "the wheel", None, "", missing="no wheel for Debian's Python in dist/: run scripts/wheel first")
        return
    wheel = os.path.join(ROOT, "dist", mine[-1])
    site = os.path.join(work, "wheel-site")
    run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--quiet", "--target", site, wheel])
    toolchain = os.path.join(site, "kiln", "lib", "kiln", "libkiln_jit_clang.so")
    wheel_mb = os.path.getsize(wheel) / 1e6
    unpacked = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(site, "kiln")) for f in fs) / 1e6
    add("wheel", f"{mine[-1]}: {wheel_mb:.1f} MB ({unpacked:.0f} MB installed, toolchain library "
        f"{os.path.getsize(toolchain) / 1e6:.0f} MB)", None, "", note="goal: under 100 MB (PyPI's default limit)")
    rows[-1]["wheel_mb"] = wheel_mb
    rows[-1]["installed_mb"] = unpacked
    dev = os.path.join(BUILD, "lib", "libkiln_jit_clang.so")
    runs = 10 if a.quick else 30
    load = "import ctypes, sys, time; t = time.perf_counter(); ctypes.CDLL(sys.argv[1]); print(time.perf_counter() - t)"
    samples = {}
    for name, lib in (("wheel", toolchain), ("source", dev)):
        samples[name] = []
        for _ in range(runs):
            samples[name].append(float(run([SYSTEM_PYTHON, "-c", load, lib]).stdout) * 1000)
    add("wheel", "loading the toolchain library (what a first miss adds; in-process dlopen, fresh process each)",
        stats_ms(samples["wheel"]), f"dlopen {toolchain} (Clang, LLVM, lld inside)", stats_ms(samples["source"]),
        f"dlopen {dev} (+ the system's libLLVM.so.22.1, libclang-cpp.so.22.1)")
    spec = os.path.join(ROOT, "specs", "vector_add.toml")
    wheel_kiln = os.path.join(site, "kiln", "bin", "kiln")
    cache = os.path.join(work, "wheel-miss-cache")
    t = hyperfine([("wheel", f"{wheel_kiln} --cache-dir {cache}-w build {spec}"), ("source", f"{KILN} --cache-dir {cache}-s build {spec}")],
                  5 if a.quick else 15, 1, prepare=f"rm -rf {cache}-w {cache}-s")
    add("wheel", "a first-miss `kiln build` of vector_add (empty cache, whole process)", t["wheel"],
        f"{wheel_kiln} --cache-dir EMPTY build {spec}", t["source"], f"{KILN} --cache-dir EMPTY build {spec}")


SYSTEM_PYTHON_TAG = "cp311"  # Debian 12's Python, SYSTEM_PYTHON
