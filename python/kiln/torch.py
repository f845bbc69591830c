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

import torch as _torch

from . import KilnError, context

__all__ = ["load", "load_inline", "torch_facts"]

_CUDA_SUFFIXES = (".cu", ".cuh")
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


def _import(module_name, path, is_python_module):
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


def _build(module_name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose):
    facts = torch_facts()
    cflags = ["-std=" + facts["std"]] + _split(extra_cflags)
    ldflags = ["-L" + facts["lib_dir"], "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"] + _split(extra_ldflags)
    try:
        return context("none").build_library(
            module_name, sources,
            include_dirs=[os.path.abspath(p) for p in (extra_include_paths or [])],
            system_include_dirs=facts["system_include_dirs"],
            defines=facts["defines"],
            unit_defines=["TORCH_EXTENSION_NAME=" + module_name],
            flags=cflags,
            link_flags=ldflags,
            prelude=["torch/extension.h"],
            facts=facts["key"],
            output=output or "")
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
    if with_cuda or cuda_sources:
        raise KilnError("extension '%s': kiln.torch.load builds C++ sources only; CUDA sources (%s) are not supported yet "
                        "(use torch.utils.cpp_extension.load for this extension)"
                        % (name, ", ".join(os.path.basename(s) for s in cuda_sources) or "with_cuda=True"))
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
        built = _build(name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose)
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
            built = _build(module_name, sources, extra_cflags, extra_ldflags, extra_include_paths, output, verbose)
        else:
            module_name = name
        if verbose:
            print("kiln: extension %s: %s (%.0f ms compiling, %.0f ms in all), key %s, %s"
                  % (module_name, built["cache_source"], built["compile_ms"], built["total_ms"], built["key"], built["path"]),
                  flush=True)
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
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False, no_implicit_headers=False):
    """torch.utils.cpp_extension.load_inline, built and cached by kiln: the sources are written to
    build_directory/main.cpp (so diagnostics point at a file you can open), with
    #include <torch/extension.h> first and one m.def per entry of `functions`."""
    if cuda_sources:
        raise KilnError("extension '%s': kiln.torch.load_inline builds C++ sources only; cuda_sources are not supported yet" % name)
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
        text.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
        for function, doc in functions.items():
            wrapped = "torch::wrap_pybind_function(%s)" % function if with_pytorch_error_handling else function
            text.append('m.def("%s", %s, "%s");' % (function, wrapped, doc or function))
        text.append("}")
    directory = build_directory or _build_directory(name)
    os.makedirs(directory, exist_ok=True)
    source = os.path.join(directory, "main.cpp")
    _write_if_changed(source, "\n".join(text) + "\n")
    return load(name, [source], extra_cflags=extra_cflags, extra_ldflags=extra_ldflags,
                extra_include_paths=extra_include_paths, build_directory=build_directory, verbose=verbose,
                is_python_module=is_python_module, keep_intermediates=keep_intermediates)
