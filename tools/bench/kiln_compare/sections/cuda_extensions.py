"""CUDA extensions from PyPI sdists that nobody here wrote (causal-conv1d, torch-scatter,
torchsort, mamba-ssm, torch-cluster, torch-spline-conv, ...), each built cold for sm_90 with the
flags its setup.py gives torch, through kiln.torch.load (empty KILN_CACHE_DIR) and through
torch.utils.cpp_extension.load (ninja, nvcc, g++; empty TORCH_EXTENSIONS_DIR, CCACHE_DISABLE=1),
interleaved in one run, each build a fresh process (tools/bench/cuda_extensions.py): load()'s wall
time, the CPU seconds of the build's process tree, the load average around it, and the size of
the library each loader made. Goals: none slower than torch's loader, the median at least 2x, no
library more than 1.1x torch's. The sdists are fetched at run time (pip download --no-binary
:all:) into $KILN_COMPARE_CACHE/sdists (default ~/.cache/kiln-compare/sdists);
KILN_COMPARE_CUDA_EXT=name,... picks entries, KILN_COMPARE_CUDA_EXT_REPS the runs of each
(default: the entry's "runs", 3 for the fastest few and 1 for the rest; --quick 1)
"""
import json
import os
import resource
import shutil
import statistics
import subprocess
import tarfile
import time

from ..harness import BENCH, BUILD, child_env, goal, log, rows, run, section_took, stats_ms, VENV_PYTHON, add

OPT_IN = True  # slow (each build takes minutes): run only when named in --only

# nvcc's flags of causal-conv1d's setup.py (its -gencode list left out: TORCH_CUDA_ARCH_LIST=9.0).
_CAUSAL_CONV1D_NVCC = ["-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
                       "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__",
                       "-U__CUDA_NO_BFLOAT162_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
                       "--use_fast_math", "--ptxas-options=-v", "-lineinfo", "--threads", "4"]
# torch-scatter's setup.py on Linux with CUDA (WITH_PYTHON, WITH_CUDA as macros); torch-cluster's
# has -O2 for both compilers, torch-spline-conv's -O2 and no WITH_PYTHON.
_PYG_CXX = ["-O3", "-Wno-sign-compare", "-DAT_PARALLEL_OPENMP", "-fopenmp", "-DWITH_PYTHON", "-DWITH_CUDA"]
_PYG_NVCC = ["-O3", "--expt-relaxed-constexpr", "-DWITH_PYTHON", "-DWITH_CUDA"]

# mamba-ssm's setup.py (CUDA, not HIP): nvcc's flags less its -gencode list and -std=c++17
# (torch 2.15's headers need C++20).
_MAMBA_NVCC = ["-O3", "-std=c++20", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
               "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
               "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math", "--ptxas-options=-v", "-lineinfo", "--threads", "4"]

# One extension module each, as its package's setup.py builds it: sdist, sources (relative to the
# unpacked sdist), include folders, host flags, nvcc flags, linker flags, and whether it is a
# Python module (PyG's are libraries of torch ops, loaded with is_python_module=False). Optional:
# "runs" (how many builds each side, for a spread), "unresolved" (a regular expression of the
# undefined symbols an import may fail on, where only some of a module's sources are built:
# tools/bench/cuda_extensions.py).
CORPUS = [
    {"entry": "causal-conv1d 1.7.0", "package": "causal-conv1d", "version": "1.7.0", "name": "causal_conv1d_cuda",
     "sources": ["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu", "csrc/causal_conv1d_bwd.cu", "csrc/causal_conv1d_update.cu"],
     "include_dirs": ["csrc"], "cflags": ["-O3"], "cuda_cflags": _CAUSAL_CONV1D_NVCC, "ldflags": [], "python_module": True},
    {"entry": "torch-scatter 2.1.2 (_segment_coo)", "package": "torch-scatter", "version": "2.1.2", "name": "_segment_coo_cuda",
     "sources": ["csrc/segment_coo.cpp", "csrc/cpu/segment_coo_cpu.cpp", "csrc/cuda/segment_coo_cuda.cu"],
     "include_dirs": ["csrc"], "cflags": _PYG_CXX, "cuda_cflags": _PYG_NVCC, "ldflags": ["-s"], "python_module": False},
    {"entry": "torchsort 0.1.10 (isotonic_cuda)", "package": "torchsort", "version": "0.1.10", "name": "isotonic_cuda",
     "sources": ["torchsort/isotonic_cuda.cu"], "include_dirs": [], "cflags": [], "cuda_cflags": [], "ldflags": [],
     "python_module": True, "runs": 3},
    {"entry": "torch-scatter 2.1.2 (_scatter)", "package": "torch-scatter", "version": "2.1.2", "name": "_scatter_cuda",
     "sources": ["csrc/scatter.cpp", "csrc/cpu/scatter_cpu.cpp", "csrc/cuda/scatter_cuda.cu"],
     "include_dirs": ["csrc"], "cflags": _PYG_CXX, "cuda_cflags": _PYG_NVCC, "ldflags": ["-s"], "python_module": False},
    # Its binding and one of its nine kernel sources (as issue 48 measured it): the module does
    # not import, as the binding refers to the other eight (`unresolved`); both loaders build
    # and link it whole first.
    {"entry": "mamba-ssm 2.3.2.post1 (selective_scan_cuda: binding and fwd_fp32)", "package": "mamba-ssm", "version": "2.3.2.post1",
     "name": "selective_scan_cuda", "sources": ["csrc/selective_scan/selective_scan.cpp", "csrc/selective_scan/selective_scan_fwd_fp32.cu"],
     "include_dirs": ["csrc/selective_scan"], "cflags": ["-O3", "-std=c++20"], "cuda_cflags": _MAMBA_NVCC, "ldflags": [],
     "python_module": True, "unresolved": r"selective_scan_(fwd|bwd)_cuda", "runs": 3},
    # Five more, none measured before issue 48; their setup.py's flags for Linux with CUDA.
    {"entry": "torch-sparse 0.6.18 (_spmm)", "package": "torch-sparse", "version": "0.6.18", "name": "_spmm_cuda",
     "sources": ["csrc/spmm.cpp", "csrc/cpu/spmm_cpu.cpp", "csrc/cuda/spmm_cuda.cu"], "include_dirs": ["csrc", "third_party/parallel-hashmap"],
     "cflags": _PYG_CXX, "cuda_cflags": _PYG_NVCC, "ldflags": ["-s"], "python_module": False},
    # Its pybind binding is a .cu source too.
    {"entry": "torch-harmonics 0.8.0 (disco_cuda_extension)", "package": "torch-harmonics", "version": "0.8.0", "name": "disco_cuda_extension",
     "sources": ["torch_harmonics/csrc/disco/disco_interface.cu", "torch_harmonics/csrc/disco/disco_cuda_fwd.cu",
                 "torch_harmonics/csrc/disco/disco_cuda_bwd.cu"],
     "include_dirs": [], "cflags": ["-O3", "-DNDEBUG"], "cuda_cflags": ["-O3", "-DNDEBUG"], "ldflags": [], "python_module": True},
    # Its setup.py's -std=c++17 raised to C++20, as for mamba-ssm.
    {"entry": "spatial-correlation-sampler 0.5.0", "package": "spatial-correlation-sampler", "version": "0.5.0",
     "name": "spatial_correlation_sampler_backend",
     "sources": ["Correlation_Module/correlation.cpp", "Correlation_Module/correlation_sampler.cpp",
                 "Correlation_Module/correlation_cuda_kernel.cu"],
     "include_dirs": [], "cflags": ["-std=c++20", "-fopenmp", "-DUSE_CUDA"], "cuda_cflags": ["-DUSE_CUDA"], "ldflags": ["-lgomp"],
     "python_module": True},
    {"entry": "torch-discounted-cumsum 1.1.0", "package": "torch-discounted-cumsum", "version": "1.1.0", "name": "torch_discounted_cumsum_cuda",
     "sources": ["torch_discounted_cumsum/discounted_cumsum_cuda.cpp", "torch_discounted_cumsum/discounted_cumsum_cuda_kernel.cu"],
     "include_dirs": [], "cflags": [], "cuda_cflags": [], "ldflags": [], "python_module": True},
    # Its "legacy" CUDA extension (TLA_BUILD_LEGACY_CUDA=1; the package's default is Triton).
    {"entry": "torch-linear-assignment 0.1.0 (_backend)", "package": "torch-linear-assignment", "version": "0.1.0", "name": "_backend",
     "sources": ["src/torch_linear_assignment_cuda.cpp", "src/torch_linear_assignment_cuda_kernel.cu"], "include_dirs": [],
     "cflags": ["-O3"], "cuda_cflags": [], "ldflags": [], "python_module": True},
    # Not in the corpus, as neither loader builds them under torch 2.15 (nvcc and Clang alike):
    # - nerfacc 0.5.3's own JIT build (nerfacc/cuda/_backend.py): its utils_math.cuh declares a
    #   lerp(float, float, float) that conflicts with C++17's std::lerp;
    # - chamferdist 1.0.3: its setup.py passes -std=c++17, and torch 2.15's headers need C++20
    #   (std::strong_ordering, requires-clauses).
    {"entry": "torch-cluster 1.6.3 (_knn)", "package": "torch-cluster", "version": "1.6.3", "name": "_knn_cuda",
     "sources": ["csrc/knn.cpp", "csrc/cpu/knn_cpu.cpp", "csrc/cuda/knn_cuda.cu"], "include_dirs": ["csrc"],
     "cflags": ["-O2"] + _PYG_CXX[1:], "cuda_cflags": ["-O2"] + _PYG_NVCC[1:], "ldflags": ["-s"], "python_module": False},
    {"entry": "torch-spline-conv 1.2.2 (_weighting)", "package": "torch-spline-conv", "version": "1.2.2", "name": "_weighting_cuda",
     "sources": ["csrc/weighting.cpp", "csrc/cpu/weighting_cpu.cpp", "csrc/cuda/weighting_cuda.cu"], "include_dirs": ["csrc"],
     "cflags": ["-O2", "-Wno-sign-compare", "-DAT_PARALLEL_OPENMP", "-fopenmp", "-DWITH_CUDA"],
     "cuda_cflags": ["-O2", "--expt-relaxed-constexpr", "-DWITH_CUDA"], "ldflags": ["-s"], "python_module": False, "runs": 3},
]


def sdist_root(cache, package, version):
    """The unpacked sdist of package==version in `cache`, downloaded and unpacked if missing."""
    folder = os.path.join(cache, f"{package.replace('-', '_')}-{version}")
    if os.path.isdir(folder):
        return folder
    os.makedirs(cache, exist_ok=True)
    # The sdist itself; its metadata is prepared by the venv's setuptools and torch (no build
    # isolation: an isolated build would fetch torch from source).
    run([VENV_PYTHON, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--no-build-isolation",
         f"{package}=={version}", "-d", cache], env=child_env())
    archive = next(os.path.join(cache, f) for f in os.listdir(cache)
                   if f.lower().startswith(f"{package.replace('-', '_')}-{version}".lower()) and f.endswith(".tar.gz"))
    with tarfile.open(archive) as t:
        # The "data" filter (no links out, no devices) where this Python has it (3.11.4 and later).
        t.extractall(cache, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    return folder


def build(how, entry, env):
    """One cold build in a fresh process: (load()'s wall ms, CPU s of the process tree, loads,
    the library's bytes)."""
    driver = os.path.join(BENCH, "cuda_extensions.py")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([VENV_PYTHON, driver, how, json.dumps(entry)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{how} build of {entry['entry']} failed ({r.returncode}):\n{r.stderr[-2500:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out["seconds"] * 1000, cpu, out["load_before"][0], out["load_after"][0], out["library_bytes"]


def section(a, work):
    """Per entry: kiln.torch.load cold, then cpp_extension.load cold (the order swapped every
    other run), each in a fresh process with an empty cache."""
    started, load_start = time.monotonic(), os.getloadavg()
    probe = run([VENV_PYTHON, "-c", "import torch; assert torch.version.cuda"], check=False, env=child_env())
    if probe.returncode != 0:
        add("cuda-extensions", "CUDA extensions from PyPI", None, "",
            missing=f"a CUDA torch does not import under {VENV_PYTHON}: {probe.stderr.strip()[-300:]}")
        return
    cache = os.path.join(os.environ.get("KILN_COMPARE_CACHE", os.path.expanduser("~/.cache/kiln-compare")), "sdists")
    chosen = [e for e in CORPUS if not os.environ.get("KILN_COMPARE_CUDA_EXT") or
              e["package"] in os.environ["KILN_COMPARE_CUDA_EXT"].split(",") or e["name"] in os.environ["KILN_COMPARE_CUDA_EXT"].split(",")]
    reps_override = 1 if a.quick else (int(os.environ["KILN_COMPARE_CUDA_EXT_REPS"]) if os.environ.get("KILN_COMPARE_CUDA_EXT_REPS") else None)
    base = child_env()
    base.update({"TORCH_CUDA_ARCH_LIST": "9.0", "CCACHE_DISABLE": "1", "PYTHONPATH": os.path.join(BUILD, "python")})
    ratios, sizes = [], []
    for e in chosen:
        entry = dict(e, root=sdist_root(cache, e["package"], e["version"]))
        reps = reps_override or e.get("runs", 1)
        wall = {"kiln": [], "torch": []}
        cpu = {"kiln": [], "torch": []}
        library = {"kiln": [], "torch": []}
        loads = []
        failed = None
        for i in range(reps):
            for how in (("kiln", "torch") if i % 2 == 0 else ("torch", "kiln")):
                tag = f"{e['name']}-{how}{i}"
                env = dict(base, KILN_CACHE_DIR=os.path.join(work, tag + "-cache"), TORCH_EXTENSIONS_DIR=os.path.join(work, tag + "-ext"),
                           KILN_EXTENSION_OUT=os.path.join(work, tag + "-out"))
                log(f"compare: cuda-extensions: {e['entry']}: {how} (run {i + 1} of {reps})")
                try:
                    ms, cpu_s, before, after, library_bytes = build(how, entry, env)
                except RuntimeError as error:  # an entry that does not build is a row that says so (its first error)
                    first = next((l.strip() for l in str(error).splitlines() if "error" in l.lower() and "failed (" not in l),
                                 str(error).splitlines()[0])
                    failed = (failed + "; " if failed else "") + f"{how} failed: {first[-240:]}"
                    log(f"compare: cuda-extensions: {error}")
                    continue
                wall[how].append(ms)
                cpu[how].append(cpu_s)
                library[how].append(library_bytes)
                loads += [before, after]
                log(f"compare: cuda-extensions: {e['entry']}: {how} {ms / 1000:.1f} s, {cpu_s:.1f} CPU s, load {before:.1f} -> {after:.1f}, "
                    f"library {library_bytes / 1e6:.2f} MB")
                for folder in (env["KILN_CACHE_DIR"], env["TORCH_EXTENSIONS_DIR"], env["KILN_EXTENSION_OUT"]):
                    shutil.rmtree(folder, ignore_errors=True)
        if failed or not wall["kiln"] or not wall["torch"]:
            rows.append({"section": "cuda-extensions", "what": f"{e['entry']} cold", "peer_missing": (failed or "no run").replace("|", "/")})
            continue
        kiln_how = "kiln.torch.load(name, sources, the setup.py's flags) in a fresh process, TORCH_CUDA_ARCH_LIST=9.0, empty KILN_CACHE_DIR"
        peer_cmd = ("torch.utils.cpp_extension.load(same arguments) (ninja, nvcc, g++; CCACHE_DISABLE=1), fresh process, "
                    "empty TORCH_EXTENSIONS_DIR")
        f = lambda xs: statistics.median(xs)
        size_ratio = f(library["kiln"]) / f(library["torch"])
        row = add("cuda-extensions", f"{e['entry']} cold: {len(e['sources'])} source{'s' if len(e['sources']) > 1 else ''}", stats_ms(wall["kiln"]), kiln_how,
                  stats_ms(wall["torch"]), peer_cmd,
                  note=(f"CPU seconds of the process tree: kiln {f(cpu['kiln']):.0f}, torch {f(cpu['torch']):.0f} "
                        f"({f(cpu['torch']) / f(cpu['kiln']):.2f}x); library kiln {f(library['kiln']) / 1e6:.2f} MB, "
                        f"torch {f(library['torch']) / 1e6:.2f} MB ({size_ratio:.2f}x); "
                        f"1-min load {min(loads):.1f}..{max(loads):.1f} around the builds"))
        row["cpu_s"] = {"kiln": cpu["kiln"], "torch": cpu["torch"]}
        row["library_bytes"] = {"kiln": library["kiln"], "torch": library["torch"]}
        sizes.append((e["entry"], size_ratio))
        goal(row, ">= 1.0x", row["ratio"] >= 1.0)
        ratios.append(row["ratio"])
    if ratios:
        median = statistics.median(ratios)
        rows.append({"section": "cuda-extensions", "what": f"median over the {len(ratios)} entries (wall, peer / kiln)",
                     "summary_ratio": median, "goal": {"text": ">= 2x on the median", "met": median >= 2},
                     "note": f"goal >= 2x on the median: {'pass' if median >= 2 else 'MISS'}; lowest {min(ratios):.2f}x"})
    if sizes:
        over = [f"{name} {r:.2f}x" for name, r in sizes if r > 1.1]
        rows.append({"section": "cuda-extensions", "what": f"library size over the {len(sizes)} entries (kiln / torch)",
                     "goal": {"text": "<= 1.1x torch's library on every entry", "met": not over},
                     "note": (f"largest {max(r for _, r in sizes):.2f}x, median {statistics.median(r for _, r in sizes):.2f}x; "
                              f"goal <= 1.1x on every entry: {'pass' if not over else 'MISS: ' + ', '.join(over)}")})
    section_took("cuda-extensions", started, load_start)


def docs():
    return ("\nEach build is a fresh process with an empty cache: the whole first build of the extension, PCHs included for "
            "kiln (their CPU seconds too: made at idle priority beside and after the build, for the next build of those "
            "headers). The library is the `.so` each loader wrote. The sdists come from PyPI at run time (`pip download --no-binary :all: --no-deps`), unpacked into "
            "`~/.cache/kiln-compare/sdists`; the corpus (sources and flags per package) is in "
            "`tools/bench/kiln_compare/sections/cuda_extensions.py` (nerfacc 0.5.3 and chamferdist 1.0.3 are not: neither "
            "loader builds them under torch 2.15). How kiln builds a .cu source (the device pass in parts, "
            "the host pass beside it, one job limit): [CUDA-EXTENSIONS.md](CUDA-EXTENSIONS.md).\n\n")
