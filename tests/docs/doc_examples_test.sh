#!/usr/bin/env bash
# Keeps docs/API.md true: every ```cpp block is compiled against <kiln/kiln.h> and libkiln.so and
# run; a block right after a `<!-- file: PATH -->` line is written to PATH instead (an op's spec
# or kernel the programs use). Programs run in that folder, with a cache of their own.
#   doc_examples_test.sh DOC INCLUDE_DIR LIB_DIR
set -euo pipefail
doc=$1
include=$2
libdir=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-docs-XXXXXX")
trap 'rm -rf "$work"' EXIT
export KILN_CACHE_DIR=$work/cache

# Split the page: files as marked, programs as prog<N>.cpp, in order.
awk -v dir="$work" '
  /^<!-- file: .* -->$/ { target = $3; next }
  /^```cpp$/ { inblock = 1; if (target == "") { n++; out = dir "/prog" n ".cpp" } else { out = dir "/" target }
               cmd = "mkdir -p \"$(dirname \"" out "\")\""; system(cmd); printf "" > out; next }
  /^```toml$/ { if (target != "") { inblock = 1; out = dir "/" target; cmd = "mkdir -p \"$(dirname \"" out "\")\""; system(cmd); printf "" > out } next }
  /^```$/ { if (inblock) close(out); inblock = 0; target = ""; next }
  inblock { print >> out }
' "$doc"

programs=$(ls "$work"/prog*.cpp 2>/dev/null | sort -V || true)
[ -n "$programs" ] || { echo "FAIL: no cpp examples found in $doc" >&2; exit 1; }
count=0
for p in $programs; do
  name=$(basename "$p" .cpp)
  if ! c++ -std=c++17 -Wall -Werror -I"$include" "$p" -L"$libdir" -Wl,-rpath,"$libdir" -lkiln -o "$work/$name" 2>"$work/$name.log"; then
    echo "FAIL: example $name of $doc does not compile:" >&2; cat "$work/$name.log" >&2; sed -n 1,200p "$p" >&2; exit 1
  fi
  if ! (cd "$work" && "./$name" >"$work/$name.out" 2>&1); then
    echo "FAIL: example $name of $doc exits non-zero:" >&2; cat "$work/$name.out" >&2; exit 1
  fi
  cat "$work/$name.out"
  count=$((count + 1))
done
echo "docs: $count examples of $doc compiled and ran"
