"""What Inductor asks its C++ compiler without compiling, answered from kiln's store.

Before it builds anything, Inductor asks its compiler questions: `g++ --version` (is there a
compiler, which kind), `g++ -v` (a version string it hashes), `g++ -dumpfullversion
-dumpversion` (flags that depend on the version). With kiln.torch.inductor installed every build
goes through kiln, but these questions still start the compiler: a node whose kernels are all
stored still runs g++, and a runtime image without g++ (pytorch/pytorch#116696) fails at
Inductor's compiler search before it reaches kiln at all.

So the answers are facts kiln keeps: an artifact of kind `cxx-facts` per compiler, made the first
time a node with that compiler is asked (the compiler runs once, its answers are stored and go
to the cluster's tiers like any artifact), and read back everywhere after:
- keyed by the compiler's name and the content of the binary it resolves to on PATH, so a node
  answers for the very compiler it has, and a changed compiler is asked again;
- and under the name alone (for this machine's architecture), the answer a node with no such
  compiler gets: the one the cluster's nodes recorded. Its builds all go through kiln; a command
  kiln passes back to the compiler (see kiln.torch.inductor) fails there, saying so.
Only these queries are answered; every other command Inductor runs is its own (a build that
reaches the compiler, ldconfig, its probes' checks in Python).

The seam: Inductor's cpp_builder calls subprocess.check_output for each of them; install() gives
cpp_builder a `subprocess` whose check_output answers a known query from the facts and hands
anything else to the real one.
"""
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import threading

_log = logging.getLogger("kiln.inductor")
KIND = "cxx-facts"
_FILE = "facts.json"
_SCHEMA = "kiln-cxx-facts 1"
# The questions answered: what Inductor (torch 2.x's cpp_builder) asks.
QUERIES = (("--version",), ("-v",), ("-dumpfullversion", "-dumpversion"), ("-dumpversion",), ("-dumpmachine",))
_lock = threading.Lock()
_answers = {}  # compiler name -> {query: output bytes}
_stats = {"answered": 0, "asked_compiler": 0}


@functools.lru_cache(maxsize=None)
def _binary_identity(path):
    """The content of the compiler's driver (a few MB at most), which names it on every node."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _keys(name):
    """(the key of this node's compiler or None when there is none, the key of the name alone)."""
    anywhere = "%s | %s | any | %s" % (_SCHEMA, name, platform.machine())
    found = shutil.which(name)
    if not found:
        return None, anywhere
    try:
        return "%s | %s | %s" % (_SCHEMA, name, _binary_identity(os.path.realpath(found))), anywhere
    except OSError:
        return None, anywhere


def _load(name):
    """This compiler's answers: stored ones, else asked of it once (and stored), else the cluster's
    for the name alone when there is no such compiler here. None when none can be had."""
    with _lock:
        if name in _answers:
            return _answers[name]
    from .. import KilnError, context

    own, anywhere = _keys(name)
    ctx = context("none")
    answers = None
    try:
        for key in ([own] if own else []) + ([anywhere] if not own else []):
            group = ctx.find_files(KIND, key)
            if group:
                with open(dict(group["files"])[_FILE], encoding="utf-8") as f:
                    stored = json.load(f)
                answers = {tuple(q.split("\0")): a.encode("utf-8", "surrogateescape") for q, a in stored.items()}
                break
        if answers is None and own:
            answers = {}
            for query in QUERIES:
                done = subprocess.run([name, *query], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      env=dict(os.environ, LC_ALL="C"), timeout=60)
                if done.returncode == 0:
                    answers[query] = done.stdout
            _stats["asked_compiler"] += 1
            data = json.dumps({"\0".join(q): a.decode("utf-8", "surrogateescape") for q, a in answers.items()},
                              sort_keys=True).encode()
            for key in (own, anywhere):
                ctx.store_files(KIND, key, [(_FILE, data)], label=name, toolchain=name, keep_first=True,
                                compiled=False)
    except (KilnError, OSError, ValueError, subprocess.SubprocessError) as e:
        _log.debug("no stored answers for %s's queries (%s): it is asked itself", name, e)
        answers = None
    with _lock:
        _answers[name] = answers
    return answers


class _Subprocess:
    """cpp_builder's `subprocess`: check_output answers a known compiler query from the facts."""

    def __getattr__(self, name):
        return getattr(subprocess, name)

    @staticmethod
    def check_output(args, *rest, **kwargs):
        if isinstance(args, (list, tuple)) and args and tuple(args[1:]) in QUERIES and not rest:
            answers = _load(str(args[0]))
            if answers is not None:
                if tuple(args[1:]) not in answers:  # the compiler failed it: as check_output would
                    raise subprocess.CalledProcessError(1, list(args))
                _stats["answered"] += 1
                out = answers[tuple(args[1:])]
                text = kwargs.get("text") or kwargs.get("universal_newlines") or kwargs.get("encoding")
                return out.decode(kwargs.get("encoding") or "utf-8", "replace") if text else out
        return subprocess.check_output(args, *rest, **kwargs)


_installed = None


def install():
    """Answers Inductor's compiler queries from kiln's store in this process (idempotent)."""
    global _installed
    from torch._inductor import cpp_builder

    with _lock:
        if _installed is not None or getattr(cpp_builder, "subprocess", None) is not subprocess:
            return
        _installed = cpp_builder.subprocess
        cpp_builder.subprocess = _Subprocess()


def uninstall():
    global _installed
    from torch._inductor import cpp_builder

    with _lock:
        if _installed is None:
            return
        cpp_builder.subprocess, _installed = _installed, None


def stats():
    """Queries answered from the facts, and compilers asked themselves (once per node each)."""
    return dict(_stats)
