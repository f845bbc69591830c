"""`kiln` from a pip-installed package: `python -m kiln ARGS` and the `kiln` script pip puts on
PATH both run the kiln program the wheel carries (kiln/bin/kiln; in a build tree, build/bin/kiln),
with the same arguments, standard streams and exit status."""
import os
import sys


def program():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "bin", "kiln"), os.path.join(here, "..", "..", "bin", "kiln")):
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    raise SystemExit("kiln: the kiln program is missing from %s (reinstall the package)" % here)


def main():
    path = program()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
