"""torch.compile's C++ builds on the CPU through kiln.

    import kiln.torch.inductor
    kiln.torch.inductor.install()                  # every later torch.compile in this process
    model = torch.compile(model)
    # or, for one model, with no install():  torch.compile(model, backend="kiln")

Inductor writes each CPU kernel module as C++ and builds it with one `g++ ... -shared -o X.so`
process through `torch._inductor.cpp_builder.run_compile_cmd`, which every CPU build passes
(kernel modules, cpp_wrapper's main module, the precompiled header, the ISA probes). install()
puts kiln there: a build of one C++ source into a shared library is compiled by Clang in this
process against a precompiled header of Inductor's prelude kept in kiln's store, linked by lld,
stored under a content key (the source and every header it read, the flags and defines, the
real CPU behind -march=native, torch's version and C++ ABI, Python's SOABI, the OpenMP bridge's
source) and written atomically where Inductor expects it, so a second process, or a node that
shares kiln's cluster tier, compiles nothing. Inductor's compile threads call it concurrently
(kiln releases the GIL). Any other command (objects, links of objects, `-E`) goes to Inductor's
own compiler unchanged, saying why at debug level (logger "kiln.inductor").

OpenMP: Inductor's kernels are OpenMP code and torch runs GCC's libgomp. kiln compiles the
kernel with Clang's OpenMP code generation but without LLVM's runtime, and adds
inductor_openmp.cpp, which carries out Clang's runtime calls with libgomp: one thread pool,
sized by torch.set_num_threads, iterations split exactly as g++'s kernels split them.

Why install() and a backend and no environment variable: Inductor builds C++ on threads of the
calling process (its process pool is for Triton), so patching this process is enough; a dynamo
backend ("kiln", registered through the `torch_dynamo_backends` entry point that pip installs)
turns it on from the torch.compile call itself, with nothing run at interpreter start.
"""
import functools
import hashlib
import logging
import os
import re
import shlex
import shutil
import sys
import threading

from . import _cache_backend, isa_probes

__all__ = ["install", "uninstall", "installed", "backend", "stats", "translate"]

_log = logging.getLogger("kiln.inductor")
_lock = threading.Lock()
_original = None
_original_header = None  # Inductor's _precompile_header while kiln's stands in for it
_stats = {"kiln": 0, "hits": 0, "passed_on": 0, "skipped_pch": 0, "gxx_after_clang_failed": 0}

_SOURCE_SUFFIXES = (".cpp", ".cc", ".cxx", ".c++", ".C")
# GCC-only flags Inductor passes, and what Clang takes in their place (None: dropped).
_GCC_ONLY = {
    # GCC's loop vectorizer off; Clang's is -fno-vectorize (its SLP vectorizer stays on, as GCC's does).
    "-fno-tree-loop-vectorize": "-fno-vectorize",
}
_OPENMP_BRIDGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inductor_openmp.cpp")


class Unhandled(Exception):
    """A command kiln leaves to Inductor's own compiler; the message says why."""


def _cpu_identity():
    """The CPU -march=native resolves to, as text that enters the key: vendor, family, model and
    the feature flags the kernel reports (two nodes share kernels only when these agree)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        import platform

        return platform.machine() + " " + platform.processor()
    flags = " ".join(sorted(fields.get("flags", "").split()))
    text = "%s %s %s %s" % (fields.get("vendor_id", ""), fields.get("cpu family", ""), fields.get("model", ""), flags)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_PLAIN = re.compile(r"[^'\"\\\n]*")


def _split(cmd_line):
    """The command's words, as the shell would split them. Inductor's command lines are long
    (~2 KB) and rarely quoted: plain whitespace splitting gives shlex's answer then, in a
    fraction of its time (shlex was 2.6 ms of a 4.6 ms hit, tools/bench/store_hits.py)."""
    if not isinstance(cmd_line, str):
        return list(cmd_line)
    return cmd_line.split() if _PLAIN.fullmatch(cmd_line) else shlex.split(cmd_line)


def translate(cmd_line, torch_lib_dir=None):
    """What kiln builds for one of Inductor's compile commands: a dict of build_library's options
    plus "output", or "precompiled-header" for the command that makes GCC's .gch; raises
    Unhandled with the reason for any other command."""
    args = _split(cmd_line)
    if not args:
        raise Unhandled("an empty command")
    sources, defines, system_includes, flags, link_dirs, libs, prelude = [], [], [], [], [], [], []
    linker_args = []
    output = None
    shared = openmp = header = False
    i = 1
    while i < len(args):
        a = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None

        def value(prefix):
            nonlocal i
            if a == prefix:
                if nxt is None:
                    raise Unhandled("%s without a value" % a)
                i += 1
                return nxt
            return a[len(prefix):]

        if a in ("-c", "-E", "-S", "-M", "-MM", "-MD"):
            raise Unhandled("%s: not a build of a shared library" % a)
        if a == "-x":
            kind = value("-x")
            if kind != "c++-header":
                raise Unhandled("-x %s" % kind)
            header = True
        elif a == "-o":
            output = value("-o")
        elif a.startswith("-D"):
            defines.append(value("-D"))
        elif a.startswith("-I") or a == "-isystem":
            # torch's and Python's headers: what kernels build against, not their own, so kiln
            # may precompile them (it never does for a library's own folders). Order is kept.
            system_includes.append(value("-I") if a.startswith("-I") else value("-isystem"))
        elif a == "-include":
            prelude.append(value("-include"))
        elif a.startswith("-L"):
            link_dirs.append(value("-L"))
        elif a.startswith("-l"):
            libs.append(value("-l"))
        elif a.startswith("-Wl,"):
            linker_args.append(a)
        elif a == "-shared":
            shared = True
        elif a in ("-fPIC", "-fpic"):
            pass  # kiln's libraries are position-independent
        elif a == "-fopenmp":
            openmp = True
        elif a in _GCC_ONLY:
            if _GCC_ONLY[a]:
                flags.append(_GCC_ONLY[a])
            _log.debug("%s is GCC's; kiln passes Clang %s", a, _GCC_ONLY[a] or "nothing")
        elif a.startswith(("-O", "-g", "-std=", "-m", "-W", "-pedantic", "-pthread")) or (
                a.startswith("-f") and not a.startswith(("-fplugin", "-fprofile", "-fsanitize", "-fcoverage"))):
            flags.append(a)
        elif a.startswith("-"):
            raise Unhandled("a flag kiln does not take: %s" % a)
        elif a.endswith(_SOURCE_SUFFIXES) or (header and a.endswith((".h", ".hpp"))):
            sources.append(a)
        else:
            raise Unhandled("an input that is not a C++ source: %s" % a)
        i += 1
    if header:
        return "precompiled-header"
    if len(sources) != 1:
        raise Unhandled("%d sources (kiln builds one source into one library)" % len(sources))
    if not shared or not output or not output.endswith(".so"):
        raise Unhandled("not a build of one shared library (-shared -o X.so)")
    # lld, like GNU ld, searches every -L folder for every -l, wherever they stand. The running
    # torch's own folder comes first: Inductor lists the system's library folder before it, where
    # a distribution's torch may be (Debian's 1.13 here). --as-needed as Debian's and Ubuntu's
    # g++ link by default: a kernel that calls nothing in libtorch does not load it.
    link_flags = ["-Wl,--as-needed"] + ["-L" + d for d in ([torch_lib_dir] if torch_lib_dir else []) + link_dirs] + linker_args
    for lib in libs:
        # libgomp by soname: torch's own copy has no libgomp.so link for -lgomp to find, and
        # either copy answers to libgomp.so.1, which is the one torch has already loaded.
        link_flags.append("-l:libgomp.so.1" if lib == "gomp" else "-l" + lib)
    if openmp:
        # Clang's OpenMP code generation without the driver's -fopenmp, which would link LLVM's
        # runtime: the bridge carries the calls to libgomp (see inductor_openmp.cpp). It joins
        # the prelude, so it is precompiled with Inductor's headers and compiled in the same
        # translation unit (as a second source it cost as much as the kernel: ~1 s to load the PCH).
        flags.append("-Xclang=-fopenmp")
        if "gomp" not in libs:
            link_flags.append("-l:libgomp.so.1")
    return {"sources": sources, "openmp": openmp, "defines": defines, "system_include_dirs": system_includes,
            "flags": flags, "link_flags": link_flags, "prelude": prelude, "output": output}


_ONE_INCLUDE = re.compile(r"\s*#include\s*[<\"]([^>\"]+)[>\"]\s*")


_DEFINED = re.compile(r"defined\s*\(\s*(\w+)\s*\)")


def _leading_includes(text, defines):
    """The headers a kernel module (or an ISA probe) includes before its code, when that prefix is
    what Inductor writes: `#include <...>` lines, some under `#if defined(A) || defined(B) ...`
    (kept when the command defines one of the names). None for anything else."""
    defined = {d.split("=", 1)[0] for d in defines}
    headers, active = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        if line.startswith("#if "):
            if active is not None:
                return None
            names = _DEFINED.findall(line)
            rest = _DEFINED.sub("", line[4:]).replace("||", "").strip()
            if not names or rest:
                return None  # a condition that is not a disjunction of defined(NAME)
            active = any(n in defined for n in names)
        elif line == "#endif":
            if active is None:
                return None
            active = None
        else:
            found = re.fullmatch(r"#include\s*<([^>]+)>", line)
            if not found:
                # The code starts: the block ends here (with no #if left open).
                return headers if active is None and headers else None
            if active is not False:
                headers.append(found.group(1))
    return None


def _prelude(source, included, defines):
    """The headers to precompile for `source`. Inductor's `-include X.h` names a file whose whole
    text is `#include <torch/csrc/inductor/cpp_prefix.h>`: the header itself is used, so one
    precompiled header serves every file name Inductor gives it. A kernel module has no
    `-include` but opens with ATen's vectorized headers and that prelude (an ISA probe with the
    vectorized headers alone): those become the
    prelude (included first, as g++'s -include is; the source's own #includes then find them
    included), so parsing them, most of a kernel's compile, happens once per flag set."""
    out = []
    for path in included:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(4096)
        except OSError:
            text = ""
        found = _ONE_INCLUDE.fullmatch(text)
        out.append(found.group(1) if found else path)
    if not out:
        try:
            with open(source, encoding="utf-8", errors="replace") as f:
                text = f.read(16384)
        except OSError:
            return out
        out = _leading_includes(text, defines) or []
    return out


@functools.lru_cache(maxsize=None)
def _facts():
    """What enters every kernel's key beside its inputs; fixed for the process, so made once."""
    from . import torch_facts

    return tuple(torch_facts()["key"]) + (("cpu", _cpu_identity()), ("inductor.route", "kiln.inductor 1"))


def _build(cmd_line, cwd):
    from . import torch_facts

    build = translate(cmd_line, torch_facts()["lib_dir"])
    if build == "precompiled-header":
        # GCC's .gch is for g++; kiln keeps its own precompiled header of the same prelude in its
        # store and makes it on the first kernel that includes it. A command kiln leaves to g++
        # still compiles without the .gch (g++ then reads the header itself).
        _stats["skipped_pch"] += 1
        _log.debug("kiln keeps its own precompiled header; GCC's is not made: %s", cmd_line)
        return
    from .. import KilnError, context

    def absolute(p):
        return p if os.path.isabs(p) else os.path.join(cwd, p)

    output = absolute(build.pop("output"))
    probe = isa_probes.is_probe(absolute(build["sources"][0]))
    build["prelude"] = _prelude(absolute(build["sources"][0]), [absolute(p) for p in build["prelude"]], build["defines"])
    if build.pop("openmp"):
        build["prelude"].append(_OPENMP_BRIDGE)
    name = os.path.basename(output)[: -len(".so")].replace(".", "_")
    root = os.path.dirname(absolute(build["sources"][0]))
    try:
        lib = context("none").build_library(
            name, [absolute(s) for s in build["sources"]],
            system_include_dirs=[absolute(p) for p in build["system_include_dirs"]],
            defines=build["defines"], flags=build["flags"], link_flags=build["link_flags"],
            prelude=build["prelude"], facts=list(_facts()), root=root, output=output,
            make_precompiled_headers=not probe)
    except KilnError as e:
        if getattr(e, "code", "") != "compile_error":
            raise
        from torch._inductor.exc import CppCompileError

        error = CppCompileError(shlex.split(cmd_line), str(e))
        # A kernel g++ builds must still build: Clang is stricter in places. Inductor's own
        # compiler gets the command; when it fails too (or is missing), Clang's diagnostics go back.
        try:
            _original(cmd_line, cwd)
        except (CppCompileError, OSError):
            raise error from None
        _stats["gxx_after_clang_failed"] += 1
        _log.warning("kiln.inductor: Clang refused %s and g++ built it (%s)", os.path.basename(output),
                     str(e).split("\n", 2)[1][:300] if "\n" in str(e) else str(e)[:300])
        return
    _stats["kiln"] += 1
    if probe:
        isa_probes.built(output, lib["key"])
    if lib["cache_source"] != "compiled":
        _stats["hits"] += 1
    _log.debug("kiln built %s (%s, %.0f ms, %d precompiled headers used)", output, lib["cache_source"], lib["total_ms"],
               lib.get("precompiled_headers_used", 0))


def _run_compile_cmd(cmd_line, cwd):
    try:
        return _build(cmd_line, cwd)
    except Unhandled as why:
        _stats["passed_on"] += 1
        _log.debug("passed to Inductor's compiler (%s): %s", why, cmd_line)
        args = _split(cmd_line)
        if args and shutil.which(args[0]) is None:
            from torch._inductor.exc import CppCompileError

            raise CppCompileError(args, "kiln builds Inductor's C++ here, but not this command (%s), and the compiler %s "
                                  "it needs is not on this node: install it, or turn off what asks for such a build"
                                  % (why, args[0])) from None
        return _original(cmd_line, cwd)


def install(caches=True):
    """Routes Inductor's C++ builds in this process through kiln (idempotent). Needs torch 2.x.

    caches: also route torch.compile's own caches (FX graphs, AOTAutograd, autotuning, Dynamo's
    profiles) through kiln's store and tiers (kiln.torch.compile_cache.install()), so a node
    whose cluster tier is warm skips Inductor's lowering as well as its compiles."""
    from .. import KilnError

    install_builds()
    if caches:
        try:
            _cache_backend.install_caches()
        except KilnError as e:  # a torch without the seam: its kernels still go through kiln
            if not getattr(install, "_warned", False):
                install._warned = True
                _log.warning("kiln.inductor: %s", e)


def install_builds():
    """The C++ builds alone (kiln.torch.compile_cache.install() turns them on with its caches)."""
    global _original, _original_header
    from .. import KilnError

    with _lock:
        if _original is not None:
            return
        try:
            from torch._inductor import codecache, cpp_builder
        except ImportError as e:
            raise KilnError("kiln.inductor needs torch 2.x with Inductor (torch._inductor.cpp_builder): %s" % e) from None
        if not hasattr(cpp_builder, "run_compile_cmd"):
            raise KilnError("this torch's Inductor has no cpp_builder.run_compile_cmd, the seam kiln.inductor uses; "
                            "its C++ builds stay with Inductor's compiler")
        _original = cpp_builder.run_compile_cmd
        cpp_builder.run_compile_cmd = _run_compile_cmd
        # Inductor names its GCC precompiled header by the hash of the header preprocessed,
        # which costs a `g++ -E` (and an `openssl sha512`) in every process, even one whose
        # kernels are all stored. kiln keeps its own precompiled header (keyed by every
        # header it read), so the header's file is all Inductor needs: see _header_file.
        if hasattr(codecache, "_precompile_header"):
            _original_header = codecache._precompile_header
            codecache._precompile_header = _header_file
        # And the compiler's answers to Inductor's questions (its version, its kind) come from
        # kiln's store: no compiler process on a node whose kernels are stored, and a node
        # with no compiler at all can run (compiler_facts).
        from . import compiler_facts

        compiler_facts.install()
        isa_probes.install()


@functools.lru_cache(maxsize=None)
def _header_file(header, hashable_cmd_line, **compile_command):
    """In place of Inductor's _precompile_header while kiln builds its C++: the file holding
    `#include <header>` that kernels are given with -include, named by the command line it is
    for, and no GCC precompiled header (kiln precompiles the header itself, on its first kernel).
    A command kiln passes back to g++ then reads the header itself."""
    from torch._inductor import codecache

    _stats["skipped_pch"] += 1
    _, path = codecache.write(content="#include <%s>\n" % header, extension="h",
                              extra=hashable_cmd_line + " | kiln.inductor's header file for " + header,
                              specified_dir=codecache._HEADER_DIR)
    return path


def uninstall():
    """Gives Inductor its own compiler back (and torch.compile's caches their own storage)."""
    uninstall_builds()
    _cache_backend.uninstall_caches()


def uninstall_builds():
    global _original, _original_header
    with _lock:
        if _original is None:
            return
        from torch._inductor import codecache, cpp_builder

        cpp_builder.run_compile_cmd = _original
        _original = None
        if _original_header is not None:
            codecache._precompile_header = _original_header
            _original_header = None
        from . import compiler_facts

        compiler_facts.uninstall()
        isa_probes.uninstall()


def installed():
    return _original is not None


def stats():
    """Counts since the process started: builds kiln made or found ("kiln", of which "hits"),
    commands passed to Inductor's compiler ("passed_on"), GCC precompiled headers not made
    ("skipped_pch"), and builds Clang refused that g++ then made ("gxx_after_clang_failed")."""
    return dict(_stats)


def backend(gm, example_inputs, **kwargs):
    """torch.compile(model, backend="kiln"): Inductor, with its C++ builds through kiln."""
    install()
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)


def warm_headers(argv=()):
    """`kiln warm --torch`: makes the header artifacts a node's first torch extension and first
    compiled model need, for the torch installed here, and stores them (and publishes them to
    the remote tiers): torch/extension.h's precompiled header for extensions built with
    torch's default flags (no extra_cflags), and, under torch 2.x, Inductor's for this machine's
    CPU flags (a small model compiled through kiln.inductor). Returns the exit status."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="kiln warm --torch", description=warm_headers.__doc__)
    parser.add_argument("-q", "--quiet", action="store_true", help="say nothing on success")
    args = parser.parse_args(list(argv))
    say = (lambda *a: None) if args.quiet else (lambda msg: print("kiln warm --torch: " + msg, flush=True))
    with tempfile.TemporaryDirectory(prefix="kiln-warm-torch-") as tmp:
        # Inductor reads its folder when it first needs it: a private one, so nothing is a hit.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        import torch

        from .. import KilnError
        from .. import torch as kiln_torch

        src = os.path.join(tmp, "kiln_warm_torch.cpp")
        with open(src, "w") as f:
            f.write("#include <torch/extension.h>\nint kiln_warm_torch() { return 0; }\n")
        try:
            # Two units: the precompiled header is built first, not beside the compile.
            second = os.path.join(tmp, "kiln_warm_torch_2.cpp")
            with open(second, "w") as f:
                f.write("#include <torch/extension.h>\nint kiln_warm_torch_2() { return 0; }\n")
            kiln_torch._build("kiln_warm_torch", [src, second], None, None, None, "", False)
        except KilnError as e:
            print("kiln warm --torch: torch/extension.h does not build here: %s" % e, file=sys.stderr)
            return 1
        say("torch %s: torch/extension.h's precompiled header is stored" % torch.__version__)
        if int(torch.__version__.split(".")[0]) < 2 or not hasattr(torch, "compile"):
            say("torch %s has no Inductor: nothing more to make" % torch.__version__)
            return 0
        install()
        try:
            compiled = torch.compile(lambda x: torch.relu(x @ x).sum(-1) + x.softmax(-1).mean())
            compiled(torch.randn(16, 16))
        except Exception as e:  # Inductor's own failure: say it, the extension's header is made
            print("kiln warm --torch: Inductor's compile failed: %s" % e, file=sys.stderr)
            return 1
        done = stats()
        say("Inductor's precompiled headers for this CPU are stored (%d kernel modules built through kiln)" % done["kiln"])
    return 0
