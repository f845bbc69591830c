#!/usr/bin/env bash
# `cpack -G DEB` makes a Debian package of the installed tree (under /opt/kiln) that holds the
# CLI, the library, the header, the specs and the CMake package.
#   deb_test.sh BUILD_DIR
set -euo pipefail
build=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-deb-XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work" >/dev/null)
deb=$(ls "$work"/kiln_*.deb)
listing=$(dpkg-deb -c "$deb")
for f in ./opt/kiln/bin/kiln ./opt/kiln/lib/libkiln.so ./opt/kiln/lib/kiln/libkiln_jit_clang.so ./opt/kiln/include/kiln/kiln.h \
         ./opt/kiln/share/kiln/specs/vector_add.toml ./opt/kiln/lib/cmake/kiln/kilnConfig.cmake; do
  grep -q " $f" <<<"$listing" || { echo "FAIL: $f is not in $(basename "$deb")" >&2; exit 1; }
done
dpkg-deb -f "$deb" Depends | grep -q libclang-cpp22 || { echo "FAIL: the package does not depend on libclang-cpp22" >&2; exit 1; }
echo "deb test: ok ($(basename "$deb"))"
