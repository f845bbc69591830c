"""`kiln` from a pip-installed package: `python -m kiln ARGS` and the `kiln` script pip puts on
PATH both run the kiln program the wheel carries (kiln/bin/kiln; in a build tree, build/bin/kiln),
with the same arguments, standard streams and exit status; but `kiln warm --triton`, which
compiles Triton's kernels again, and `kiln warm --torch`, which makes the installed torch's header
artifacts, run in this Python (kiln/triton/warm.py, kiln/torch/inductor.py)."""
import os
import sys


def program():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "bin", "kiln"), os.path.join(here, "..", "..", "bin", "kiln")):
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    raise SystemExit("kiln: the kiln program is missing from %s (reinstall the package)" % here)


# The global options before a command, as the environment variables the kiln program reads.
_GLOBAL_ENV = {"--config": "KILN_CONFIG", "--cache-dir": "KILN_CACHE_DIR", "--remote": "KILN_REMOTE_CACHE"}


def triton_warm(argv):
    """`kiln warm --triton ...` runs here, in this Python (the one that has Triton): the exit
    status of kiln.triton.warm.main, or None when argv is another command."""
    i = 0
    env = {}
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] in _GLOBAL_ENV and i + 1 < len(argv):
            env[_GLOBAL_ENV[argv[i]]] = argv[i + 1]
            i += 2
        elif argv[i] in ("-v", "--verbose"):
            env["KILN_LOG"] = "debug"
            i += 1
        else:
            return None
    if argv[i:i + 1] != ["warm"] or ("--triton" not in argv[i + 1:] and "--torch" not in argv[i + 1:]):
        return None
    os.environ.update(env)
    rest = list(argv[i + 1:])
    if "--torch" in rest:
        rest.remove("--torch")
        from kiln.torch import inductor
        return inductor.warm_headers(rest)
    rest.remove("--triton")
    from kiln.triton import warm
    return warm.main(rest)


def main():
    status = triton_warm(sys.argv[1:])
    if status is not None:
        sys.exit(status)
    path = program()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
