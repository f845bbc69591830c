#!/usr/bin/env bash
# An installed kiln, moved after installing, used three ways with no KILN_* variable set:
# the CLI runs a bundled op (finding share/kiln and lib/kiln from its own file); the consumer
# project builds with find_package(kiln) and runs its own op; a program builds with
# `pkg-config kiln` alone. And libkiln.so exports nothing but kiln's API.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
for v in $(env | grep -o '^KILN_[A-Z_]*' || true); do unset "$v"; done
export HOME=$work/home XDG_CONFIG_HOME=$work/home/.config XDG_CACHE_HOME=$work/home/.cache
mkdir -p "$HOME"

fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/installed" >/dev/null
mv "$work/installed" "$work/moved"
prefix=$work/moved
for f in bin/kiln lib/libkiln.so lib/kiln/libkiln_jit_clang.so lib/kiln/kiln-spirv lib/kiln/kiln-hiprtc include/kiln/kiln.h \
         lib/kiln/libkiln_nvrtc.so lib/kiln/libkiln_nvrtc_store.so \
         share/kiln/specs/vector_add.toml share/kiln/include/cpu/kiln/cpu_kernel.h share/kiln/include/hip/kiln/hip_prelude.h \
         lib/cmake/kiln/kilnConfig.cmake lib/pkgconfig/kiln.pc; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done

# The CLI: a bundled op compiled (through the installed Clang library) and checked.
out=$("$prefix/bin/kiln" run vector_add --dim n=1000 2>&1) || fail "kiln run: $out"
grep -q "cache miss" <<<"$out" || fail "expected a compile: $out"
grep -q ": ok" <<<"$out" || fail "the op's check did not pass: $out"
doctor=$("$prefix/bin/kiln" doctor 2>&1) || true
grep -q "library $prefix/lib/kiln/libkiln_jit_clang.so" <<<"$doctor" || fail "doctor does not use the installed toolchain: $doctor"

# The other targets through the installed helpers and headers: SPIR-V (kiln-spirv beside the
# toolchain library), an AMD code object (the HIP prelude under share/kiln/include/hip).
for target in spirv opencl hip:gfx942; do
  out=$("$prefix/bin/kiln" --cache-dir "$work/targets" build "$prefix/share/kiln/specs/gelu.toml" --target "$target" 2>&1) ||
    fail "kiln build --target $target: $out"
done
doctor=$("$prefix/bin/kiln" doctor 2>&1) || true
grep -q "run by $prefix/lib/kiln/kiln-hiprtc" <<<"$doctor" || fail "doctor does not name the installed hiprtc helper: $doctor"

# The same op has the same key from the build tree and from the moved install: no path of
# either enters it, so caches and bundles move between them.
key() { "$1" --cache-dir "$work/keys" build "$2" --json | grep -o '"key":"[0-9a-f]*"'; }
k_build=$(key "$build/bin/kiln" "$source/specs/vector_add.toml")
k_installed=$(key "$prefix/bin/kiln" "$prefix/share/kiln/specs/vector_add.toml")
[ -n "$k_build" ] && [ "$k_build" = "$k_installed" ] || fail "keys differ: build tree $k_build, installed $k_installed"

# find_package(kiln): the consumer project and its own op.
cmake -S "$source/examples/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
out=$("$work/consumer/kiln_consumer") || fail "kiln_consumer: $out"
grep -q "elements ok" <<<"$out" || fail "consumer: $out"
grep -q "refused as it should be" <<<"$out" || fail "consumer: $out"

# pkg-config alone, and a bundled op found by name through the library.
cat >"$work/pc.cpp" <<'CPP'
#include <kiln/kiln.h>
#include <cstdio>
int main() {
  kiln::Context ctx;
  kiln::Op op = ctx.op("vector_add");
  std::printf("%zu params\n", op.params().size());
  return op.params().size() == 4 ? 0 : 1;
}
CPP
c++ -std=c++17 "$work/pc.cpp" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs kiln) -o "$work/pc"
"$work/pc" >/dev/null || fail "a program built with pkg-config kiln"

# The NVRTC library for LD_PRELOAD: named by the moved CLI, exporting NVRTC's entry points alone,
# and (where the test client was built against a real NVRTC) its store side finding libkiln.so
# one folder up: a compile kept, then a hit.
preload=$("$prefix/bin/kiln" nvrtc --preload) || fail "kiln nvrtc --preload: $preload"
[ "$preload" = "$prefix/lib/kiln/libkiln_nvrtc.so" ] || fail "kiln nvrtc --preload names $preload"
others=$(nm -D --defined-only "$preload" | awk '{print $3}' | grep -vE '^(nvrtc|__nvrtc|kiln_nvrtc_preload_real_library@|libnvrtc\.so\.13)' || true)
[ -z "$others" ] || fail "libkiln_nvrtc.so exports more than NVRTC's entry points: $(head -5 <<<"$others")"
if [ -x "$build/bin/nvrtc_client" ] && [ -d /usr/local/cuda/include ]; then
  printf '__global__ void k(float* p) { p[0] = 1; }\n' >"$work/k.cu"
  for expect in "compiled in" "hit (disk)"; do
    LD_PRELOAD="$preload" KILN_CACHE_DIR="$work/nvrtc-cache" KILN_REMOTE_CACHE= KILN_NVRTC_LOG="$work/nvrtc.log" \
      "$build/bin/nvrtc_client" "$work/k.cu" k -arch=sm_90 >/dev/null || fail "nvrtc_client under the installed preload"
    grep -q "$expect" "$work/nvrtc.log" || fail "the installed NVRTC library did not log '$expect': $(cat "$work/nvrtc.log")"
  done
fi

# Only kiln's API leaves the library: no SQLite, zstd, LLVM or kiln internals to clash with.
leaked=$(nm -D --defined-only "$prefix/lib/libkiln.so" | c++filt | grep -E ' (sqlite3_|ZSTD_|XXH|kiln::(builders|cache|runtime|jit|support)::)' || true)
[ -z "$leaked" ] || fail "libkiln.so exports internals: $(head -5 <<<"$leaked")"
echo "install test: ok"
