"""A drop-in for torch.utils.cpp_extension.load and load_inline.

    from kiln.torch import load          # was: from torch.utils.cpp_extension import load
    lltm = load(name="lltm", sources=["lltm.cpp"], extra_cflags=["-O2"])

Same parameters, same return values, same behaviour where a caller can see it (the module, its
name, `is_python_module=False` loading the library for torch.ops, a compile error raising
RuntimeError with the compiler's messages). What differs is how it builds: Clang in this
process (no ninja, no compiler subprocess), linked by lld against the running torch's
libraries, with torch/extension.h as one precompiled header in kiln's store shared by every
extension built with the same torch and flags, and the extension itself stored in kiln's
content-addressed cache (its key: the sources and every header they read, the flags, the
running torch's version and C++ ABI, the Python version, the CPU level), so a second process,
or a second node through a remote tier, compiles nothing. There is no lock file: concurrent
builds of one extension wait for one compile, and a killed build leaves nothing behind.

Python gathers torch's facts; kiln's C++ pipeline (kiln::Context::build_library) does the rest.
"""
import importlib.machinery
import importlib.util
import os
import re
import shlex
import sys
import sysconfig
import threading
import warnings

import torch as _torch

from .. import KilnError, context

__all__ = ["load", "load_inline", "torch_facts", "cuda_build_options"]

_CUDA_SUFFIXES = (".cu", ".cuh")
# The architectures a CUDA extension is built for when TORCH_CUDA_ARCH_LIST is unset and no GPU is
# visible (torch's own loader then fails): cubins for Ampere (sm_80, which runs on sm_86/sm_89 too)
# and Hopper (sm_90), and Hopper's PTX, which the driver compiles for newer GPUs (Blackwell).
DEFAULT_CUDA_ARCH_LIST = "8.0;9.0+PTX"
# torch's cpp_extension COMMON_NVCC_FLAGS, less --expt-relaxed-constexpr (Clang's default).
_COMMON_CUDA_DEFINES = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]
# torch's names for architecture families in TORCH_CUDA_ARCH_LIST (combined names first).
_NAMED_ARCHES = [("Kepler+Tesla", "3.7"), ("Kepler", "3.5+PTX"), ("Maxwell+Tegra", "5.3"), ("Maxwell", "5.0;5.2+PTX"),
                 ("Pascal", "6.0;6.1+PTX"), ("Volta+Tegra", "7.2"), ("Volta", "7.0+PTX"), ("Turing", "7.5+PTX"),
                 ("Ampere+Tegra", "8.7"), ("Ampere", "8.0;8.6+PTX"), ("Ada", "8.9+PTX"), ("Hopper", "9.0+PTX"),
                 ("Blackwell+Tegra", "11.0"), ("Blackwell", "10.0;10.3;12.0;12.1+PTX"), ("Rubin", "10.7+PTX")]
_lock = threading.RLock()
# name -> (artifact key, module) for the extensions loaded in this process; a name with other
# inputs is loaded again as name_v1, name_v2, ... (an extension module imports once per name).
_loaded = {}
_versions = {}
_facts = None


def _default_std(torch_dir, version):
    """The C++ standard the running torch's own loader passes: read from its cpp_extension.py
    (without importing it: in torch 1.13 that costs 0.2 s), else by version."""
    try:
        with open(os.path.join(torch_dir, "utils", "cpp_extension.py"), encoding="utf-8") as f:
            text = f.read()
        found = re.search(r"\['-fPIC', '-std=(c\+\+\d+)'\]", text) or re.search(r"'-std=(c\+\+\d+)', '-fPIC'", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    return "c++14" if version < (2, 0) else "c++17"


def torch_facts():
    """What the running torch decides about an extension's build: include and library folders,
    defines, flags, and the facts that enter the cache key. Computed once per process."""
    global _facts
    if _facts is not None:
        return _facts
    torch_dir = os.path.dirname(os.path.abspath(_torch.__file__))
    version = tuple(int(x) for x in re.findall(r"\d+", _torch.__version__)[:2])
    include = os.path.join(torch_dir, "include")
    includes = [include, os.path.join(include, "torch", "csrc", "api", "include")]
    includes += [d for d in (os.path.join(include, "TH"), os.path.join(include, "THC")) if os.path.isdir(d)]
    python_include = sysconfig.get_path("include", scheme="posix_prefix")
    abi = int(bool(getattr(_torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    defines = ["TORCH_API_INCLUDE_EXTENSION_H", "_GLIBCXX_USE_CXX11_ABI=%d" % abi]
    # torch 1.x tells extensions its pybind11 ABI strings, so they share torch's pybind11 registry
    # (Clang would otherwise call itself "_clang", TOOLCHAIN-FACTS); torch 2.x has none to tell.
    for part in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
        value = getattr(_torch._C, "_PYBIND11_" + part, None)
        if value is not None:
            defines.append('PYBIND11_%s="%s"' % (part, value))
    lib_dir = os.path.join(torch_dir, "lib")
    std = _default_std(torch_dir, version)
    cuda = getattr(_torch.version, "cuda", None)
    _facts = {
        "torch_dir": torch_dir,
        "system_include_dirs": includes + ([python_include] if python_include else []),
        "defines": defines,
        "std": std,
        "lib_dir": lib_dir,
        "key": [
            ("torch.version", _torch.__version__),
            ("torch.git_version", str(getattr(_torch.version, "git_version", ""))),
            ("torch.cuda", str(cuda)),
            ("torch.cxx11_abi", str(abi)),
            ("python", "%s %s" % (sys.implementation.cache_tag, sysconfig.get_config_var("SOABI"))),
        ],
        "build_root_tag": "py%d%d_%s" % (sys.version_info[0], sys.version_info[1],
                                         "cu" + cuda.replace(".", "") if cuda else "cpu"),
    }
    return _facts


def _split(flags):
    """torch's loader hands each entry to a shell through ninja, so "-O0 -Wall" is two flags; kiln
    starts no shell, so it splits them the same way."""
    out = []
    for f in flags or []:
        f = f.strip()
        if f:
            out.extend(shlex.split(f))
    return out


def _build_directory(name):
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        root = os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions", torch_facts()["build_root_tag"])
    return os.path.join(root, name)


_openmp_ready = False


def _preload_openmp():
    """An extension built with -fopenmp needs LLVM's OpenMP runtime (libomp.so.5), linked as
    Clang links it. The wheel carries one (kiln/lib/kiln/llvm/lib) for machines that have none:
    loaded once, globally, before the first extension, so the extension's need is met by soname.
    A libomp.so.5 the system has is used instead."""
    global _openmp_ready
    if _openmp_ready:
        return
    _openmp_ready = True
    import ctypes

    try:
        ctypes.CDLL("libomp.so.5", mode=ctypes.RTLD_GLOBAL)
        return
    except OSError:
        pass
    bundled = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib", "kiln", "llvm", "lib", "libomp.so")
    if os.path.exists(bundled):
        ctypes.CDLL(bundled, mode=ctypes.RTLD_GLOBAL)


def _import(module_name, path, is_python_module):
    _preload_openmp()
    if not is_python_module:
        # The library's TORCH_LIBRARY registrations appear under torch.ops.
        _torch.ops.load_library(path)
        return None
    # The loader named outright: a memory file's path (/proc/self/fd/N) has no suffix to go by.
    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cuda_home():
    """The CUDA toolkit, found as kiln's C++ side finds it: $CUDA_HOME, $CUDA_PATH, /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return os.environ[var]
    return "/usr/local/cuda"


def _arch_entries(arch_list):
    """TORCH_CUDA_ARCH_LIST's syntax ("8.0;9.0+PTX", "Ampere Hopper") as kiln's architectures:
    "sm_80" (a cubin) for each entry and "compute_90" (PTX) for each +PTX one."""
    text = arch_list.replace(" ", ";")
    for named, archs in _NAMED_ARCHES:
        text = text.replace(named, archs)
    out = []
    for entry in filter(None, text.split(";")):
        found = re.fullmatch(r"(\d+)\.(\d)(\+PTX)?", entry)
        if not found:
            raise KilnError("CUDA architecture '%s' (TORCH_CUDA_ARCH_LIST=%r) is not supported by kiln.torch.load: it takes "
                            "numbered ones such as 8.0 or 9.0+PTX (no arch-specific 'a' variants yet)" % (entry, arch_list))
        sm = found.group(1) + found.group(2)
        out.append("sm_" + sm)
        if found.group(3):
            out.append("compute_" + sm)
    return out


def _nvcc_code_entries(arch, code):
    """nvcc's -gencode arch=compute_XX,code=[sm_XX,compute_XX] (or -arch/-code) as architectures."""
    codes = [c for c in re.split(r"[,\[\]\"' ]+", code or "") if c]
    if not codes:
        # -arch=sm_XX alone: a cubin and its PTX; -arch=compute_XX alone: the PTX.
        sm = re.sub(r"^(sm|compute)_", "", arch or "")
        codes = ["sm_" + sm, "compute_" + sm] if (arch or "").startswith("sm_") else [arch]
    out = []
    for c in codes:
        if not re.fullmatch(r"(sm|compute)_\d+", c):
            raise KilnError("CUDA architecture '%s' in extra_cuda_cflags is not supported by kiln.torch.load (it takes sm_XX and "
                            "compute_XX, no 'a' variants, native or all yet)" % c)
        out.append(c)
    return out


# nvcc options that Clang's CUDA path does by default or that do not apply to it: dropped quietly.
_NVCC_NOOPS = {"--expt-relaxed-constexpr", "-expt-relaxed-constexpr", "--expt-extended-lambda", "-expt-extended-lambda",
               "--extended-lambda", "-extended-lambda", "-Wno-deprecated-gpu-targets", "--Wno-deprecated-gpu-targets",
               "--use-local-env", "-use-local-env", "--keep", "-keep", "--source-in-ptx", "-src-in-ptx",
               "--resource-usage", "-res-usage", "--display-error-number", "-err-no", "--no-host-device-move-forward"}
# nvcc options taking a value (as "--opt=value" or "--opt value") that kiln drops: who reads them is
# absent (ptxas, nvlink, fatbinary, cudafe) or nvcc's own process (threads, host compiler).
_NVCC_DROPPED_WITH_VALUE = {"-Xptxas", "--ptxas-options", "-Xnvlink", "--nvlink-options", "-Xfatbin", "--fatbin-options",
                            "-Xcudafe", "--threads", "-t", "-ccbin", "--compiler-bindir", "--diag-suppress", "-diag-suppress",
                            "--maxrregcount", "-maxrregcount", "--prec-div", "-prec-div", "--prec-sqrt", "-prec-sqrt",
                            "--ftz", "-ftz", "--fmad", "-fmad", "--default-stream", "-default-stream", "--relocatable-device-code",
                            "-rdc", "--split-compile", "-split-compile", "--generate-code", "-gencode", "--gpu-architecture",
                            "-arch", "--gpu-code", "-code", "-Xcompiler", "--compiler-options", "--std", "-std"}


def cuda_build_options(extra_cuda_cflags=None):
    """What kiln compiles an extension's CUDA sources with, from torch's loader's inputs: Clang's
    flags (translated from nvcc's, after torch's own CUDA defines and -std), the architectures
    ("sm_90": a cubin; "compute_90": PTX) and notes on nvcc options that have no counterpart and
    were dropped. The architectures, as torch chooses them: -gencode/-arch in extra_cuda_cflags,
    else TORCH_CUDA_ARCH_LIST, else the visible GPUs' (the newest +PTX), else
    DEFAULT_CUDA_ARCH_LIST."""
    flags, notes, archs = list(_COMMON_CUDA_DEFINES), [], []
    arch, code = None, None
    tokens = _split(extra_cuda_cflags)
    i = 0
    while i < len(tokens):
        t = tokens[i]
        i += 1
        name, eq, value = t.partition("=")
        if name in _NVCC_DROPPED_WITH_VALUE and not eq and i < len(tokens):
            value, eq = tokens[i], "="
            i += 1
        if t in _NVCC_NOOPS:
            continue
        if t in ("--use_fast_math", "-use_fast_math"):
            # Device code only, as nvcc's: flush denormals, fast approximations, contracted FMAs.
            flags += ["-fgpu-flush-denormals-to-zero", "-fgpu-approx-transcendentals", "-ffp-contract=fast"]
        elif name in ("--ftz", "-ftz") and eq:
            if value == "true":
                flags.append("-fgpu-flush-denormals-to-zero")
        elif name in ("--fmad", "-fmad") and eq:
            if value == "false":
                flags.append("-ffp-contract=off")
        elif name in ("-gencode", "--generate-code") and eq:
            parts = dict(p.split("=", 1) for p in re.split(r",(?=\w+=)", value) if "=" in p)
            archs += _nvcc_code_entries(parts.get("arch"), parts.get("code"))
        elif name in ("-arch", "--gpu-architecture") and eq:
            arch = value
        elif name in ("-code", "--gpu-code") and eq:
            code = value
        elif name in ("-Xcompiler", "--compiler-options") and eq:
            flags += [f for f in re.split(r"[,]", value.strip("'\"")) if f]
        elif name in ("--std", "-std") and eq:
            flags.append("-std=" + value)
        elif name in ("--default-stream", "-default-stream") and eq:
            if value == "per-thread":
                flags.append("-DCUDA_API_PER_THREAD_DEFAULT_STREAM=1")
        elif name in ("--relocatable-device-code", "-rdc") and eq:
            if value == "true":
                raise KilnError("extra_cuda_cflags: relocatable device code (%s) is not supported by kiln.torch.load" % t)
        elif t in ("-dc", "--device-c", "-dlink", "--device-link"):
            raise KilnError("extra_cuda_cflags: separate device compilation (%s) is not supported by kiln.torch.load" % t)
        elif t in ("-lineinfo", "--generate-line-info"):
            notes.append("%s dropped (no line tables in device code yet)" % t)
        elif t in ("-G", "--device-debug"):
            notes.append("%s dropped (device code is not compiled for debugging)" % t)
        elif name in _NVCC_DROPPED_WITH_VALUE:
            notes.append("%s=%s dropped (%s)" % (name, value, "no ptxas, nvlink, fatbinary or cudafe runs"
                                                 if name.startswith("-X") or "options" in name
                                                 else "nvcc's own option, with no counterpart in Clang's CUDA path"))
        elif t.startswith("--"):
            notes.append("%s dropped (an nvcc option kiln does not know)" % t)
        else:
            flags.append(t)  # -O3, -g, -D, -U, -I, -W, -f, -std=...: Clang takes them as they are
    if arch or code:
        archs += _nvcc_code_entries(arch, code)
    if not archs:
        env = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if env and env != "native":
            archs = _arch_entries(env)
        else:
            archs = _visible_gpu_archs() or _arch_entries(DEFAULT_CUDA_ARCH_LIST)
    if not any(f.startswith("-std=") for f in flags):
        flags.append("-std=" + torch_facts()["std"])
    return {"flags": flags, "archs": sorted(set(archs), key=lambda a: (int(a.split("_")[1]), a.startswith("compute"))), "notes": notes}


def _visible_gpu_archs():
    """torch's rule: every visible GPU's architecture (no newer than torch's build supports), the
    newest with +PTX; none without a GPU."""
    try:
        count = _torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a torch without a usable driver has no GPU to build for
        return []
    if not count:
        return []
    supported = [int(re.sub(r"\D", "", a.split("_")[1])) for a in _torch.cuda.get_arch_list() if a.startswith("sm_")]
    best = max(supported) if supported else 999
    sms = sorted({min(best, 10 * cap[0] + cap[1]) for cap in (_torch.cuda.get_device_capability(i) for i in range(count))})
    return ["sm_%d" % sm for sm in sms] + ["compute_%d" % sms[-1]]


def _cuda_toolkit(name, what):
    """The CUDA toolkit a CUDA extension builds with, or a KilnError that says what is missing."""
    cuda = getattr(_torch.version, "cuda", None)
    if not cuda:
        raise KilnError("extension '%s': %s need a torch built with CUDA; torch %s has no CUDA (torch.version.cuda is None)"
                        % (name, what, _torch.__version__))
    home = _cuda_home()
    header = os.path.join(home, "include", "cuda.h")
    try:
        with open(header, encoding="utf-8", errors="replace") as f:
            found = re.search(r"#define\s+CUDA_VERSION\s+(\d+)", f.read())
    except OSError:
        found = None
    if not found:
        raise KilnError("extension '%s': %s need the CUDA toolkit's headers; there is no %s (set CUDA_HOME to the toolkit)"
                        % (name, what, header))
    version = int(found.group(1))
    if version // 1000 != int(cuda.split(".")[0]):
        raise KilnError("extension '%s': the CUDA toolkit at %s is CUDA %d.%d, torch %s was built with CUDA %s: the major versions "
                        "must match (set CUDA_HOME)" % (name, home, version // 1000, version % 1000 // 10, _torch.__version__, cuda))
    lib = os.path.join(home, "lib64")
    if not os.path.isdir(lib) and os.path.isdir(os.path.join(home, "lib")):
        lib = os.path.join(home, "lib")
    return home, lib


def _check_torch_headers(name, facts):
    """torch's C++ headers, or a KilnError saying how to get them: Debian's python3-torch ships
    include/ as links into /usr/include that only libtorch-dev fills (the compiler would otherwise
    say only that torch/extension.h was not found)."""
    header = os.path.join(facts["system_include_dirs"][0], "torch", "extension.h")
    if os.path.isfile(header):
        return
    broken = os.path.islink(os.path.dirname(header)) or os.path.islink(header)
    raise KilnError("extension '%s': torch %s has no C++ headers: %s %s. Install them with torch (Debian/Ubuntu: apt install "
                    "libtorch-dev; pip's torch wheels carry them)" % (name, _torch.__version__, header,
                                                                     "is a dangling link" if broken else "does not exist"))


def _build(module_name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose, cuda=None):
    facts = torch_facts()
    _check_torch_headers(module_name, facts)
    cflags = ["-std=" + facts["std"]] + _split(extra_cflags)
    ldflags = ["-L" + facts["lib_dir"], "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    system_include_dirs = facts["system_include_dirs"]
    if cuda:
        # As torch's loader links a CUDA extension, and its sources see the toolkit's headers.
        ldflags = ["-L" + facts["lib_dir"], "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda", "-ltorch", "-ltorch_python",
                   "-L" + cuda["lib"], "-lcudart"]
        system_include_dirs = system_include_dirs + [os.path.join(cuda["home"], "include")]
    ldflags += _split(extra_ldflags)
    try:
        return context("none").build_library(
            module_name, sources,
            include_dirs=[os.path.abspath(p) for p in (extra_include_paths or [])],
            system_include_dirs=system_include_dirs,
            defines=facts["defines"],
            unit_defines=["TORCH_EXTENSION_NAME=" + module_name],
            flags=cflags,
            link_flags=ldflags,
            prelude=["torch/extension.h"],
            facts=facts["key"],
            output=output or "",
            cuda_flags=cuda["flags"] if cuda else [],
            cuda_archs=cuda["archs"] if cuda else [])
    except KilnError as e:
        if e.code != "compile_error":
            raise
        message = "Error building extension '%s':\n%s" % (module_name, str(e).split("\n", 1)[-1])
        if verbose:
            print(message, file=sys.stdout, flush=True)
        error = KilnError(message)
        error.code, error.diagnostics = e.code, e.diagnostics
        raise error from None


def load(name, sources, extra_cflags=None, extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None,
         extra_include_paths=None, build_directory=None, verbose=False, with_cuda=None, with_sycl=None,
         is_python_module=True, is_standalone=False, keep_intermediates=True):
    """torch.utils.cpp_extension.load, built and cached by kiln. Returns the extension module
    (or None with is_python_module=False, the library then loaded for torch.ops)."""
    if isinstance(sources, str):
        sources = [sources]
    sources = [os.path.abspath(os.fspath(s)) for s in sources]
    cuda_sources = [s for s in sources if s.endswith(_CUDA_SUFFIXES)]
    cuda = None
    if with_cuda or cuda_sources:
        what = "CUDA sources (%s)" % ", ".join(os.path.basename(s) for s in cuda_sources) if cuda_sources else "with_cuda=True"
        home, lib = _cuda_toolkit(name, what)
        cuda = dict(cuda_build_options(extra_cuda_cflags), home=home, lib=lib)
        if cuda["notes"]:
            warnings.warn("extension '%s': extra_cuda_cflags: %s" % (name, "; ".join(cuda["notes"])), stacklevel=2)
    if is_standalone:
        raise KilnError("extension '%s': is_standalone=True (an executable) is not supported by kiln.torch.load" % name)
    if with_sycl or extra_sycl_cflags:
        raise KilnError("extension '%s': SYCL sources are not supported by kiln.torch.load" % name)
    for s in sources:
        if not os.path.isfile(s):
            raise KilnError("extension '%s': source %s does not exist" % (name, s))
    with _lock:
        output = None
        if build_directory is None and not is_python_module:
            # torch.ops.load_library resolves the path it is given, which a memory file's has not.
            build_directory = _build_directory(name)
        if build_directory is not None:
            os.makedirs(build_directory, exist_ok=True)
            output = os.path.join(build_directory, name + ".so")
        built = _build(name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose, cuda)
        key = built["key"]  # under the plain name: what a later call with these inputs compares
        previous = _loaded.get(name)
        if previous is not None:
            if previous[0] == key:
                return previous[1]
            # Changed inputs under a name already imported: a module name imports once per
            # process, so, as torch does, the new build is name_v1, name_v2, ...
            version = _versions.get(name, 0) + 1
            _versions[name] = version
            module_name = "%s_v%d" % (name, version)
            if output:
                output = os.path.join(build_directory, module_name + ".so")
            built = _build(module_name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose, cuda)
        else:
            module_name = name
        if verbose:
            print("kiln: extension %s: %s (%.0f ms compiling, %.0f ms in all), key %s, %s"
                  % (module_name, built["cache_source"], built["compile_ms"], built["total_ms"], built["key"], built["path"]),
                  flush=True)
            if cuda:
                print("kiln: extension %s: CUDA sources for %s with %s" % (module_name, ", ".join(cuda["archs"]), " ".join(cuda["flags"])),
                      flush=True)
                if built.get("route") == "nvcc":  # Clang's CUDA path refused them: the toolkit's nvcc compiled them
                    print("kiln: extension %s: compiled by nvcc: %s" % (module_name, ", ".join(built["nvcc_sources"])), flush=True)
            for w in built["warnings"]:
                print("kiln: " + w, flush=True)
        module = _import(module_name, built["path"], is_python_module)
        _loaded[name] = (key, module)
        return module


def _write_if_changed(path, text):
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    temp = "%s.%d.tmp" % (path, os.getpid())
    with open(temp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temp, path)


def load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False, no_implicit_headers=False,
                gil_not_used=False):
    """torch.utils.cpp_extension.load_inline, built and cached by kiln: the sources are written to
    build_directory/main.cpp (so diagnostics point at a file you can open), with
    #include <torch/extension.h> first and one m.def per entry of `functions`."""
    if isinstance(cpp_sources, str):
        cpp_sources = [cpp_sources]
    text = ([] if no_implicit_headers else ["#include <torch/extension.h>"]) + list(cpp_sources)
    if functions is not None:
        if isinstance(functions, str):
            functions = [functions]
        if isinstance(functions, list):
            functions = {f: "" for f in functions}
        elif not isinstance(functions, dict):
            raise ValueError("Expected 'functions' to be a list or dict, but was %s" % type(functions))
        # gil_not_used (torch >= 2.6): the bindings declare that a free-threaded Python may run them
        # without the GIL, as torch writes them.
        text.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m, pybind11::mod_gil_not_used()) {" if gil_not_used
                    else "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for function, doc in functions.items():
            wrapped = "torch::wrap_pybind_function(%s)" % function if with_pytorch_error_handling else function
            text.append('m.def("%s", %s, "%s");' % (function, wrapped, doc or function))
        text.append("}")
    directory = build_directory or _build_directory(name)
    os.makedirs(directory, exist_ok=True)
    source = os.path.join(directory, "main.cpp")
    _write_if_changed(source, "\n".join(text) + "\n")
    sources = [source]
    if isinstance(cuda_sources, str):
        cuda_sources = [cuda_sources]
    if cuda_sources:
        # As torch writes it: cuda.cu beside main.cpp, after the headers torch puts first.
        cuda_text = ([] if no_implicit_headers else ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"])
        sources.append(os.path.join(directory, "cuda.cu"))
        _write_if_changed(sources[-1], "\n".join(cuda_text + list(cuda_sources)) + "\n")
    return load(name, sources, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags, extra_ldflags=extra_ldflags,
                extra_include_paths=extra_include_paths, build_directory=build_directory, verbose=verbose,
                with_cuda=with_cuda, is_python_module=is_python_module, keep_intermediates=keep_intermediates)
