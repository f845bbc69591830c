"""kiln.context("none").build_library, the pipeline under kiln.torch.load, on a plain C++ library
(no torch): its code is generated in parts, on as many threads as KILN_COMPILE_THREADS allows, and
the library works and has the same bytes whatever the number of threads."""
import ctypes
import re

from conftest import run_python

# What splitting a module must keep whole: a static initializer, internal functions called from
# functions that may land in other parts, a template instantiated in a comdat, a function-local
# static, a table of function pointers, and thread-local storage.
SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>

namespace {
int g_initialised = 0;
struct Init { Init() { g_initialised = 41; } } g_init;
static double scale(double x) { return x * 3.0; }
thread_local int t_calls = 0;
}

template <typename T> T clamp_add(T a, T b, T hi) { T s = a + b; return s > hi ? hi : s; }

extern "C" int initialised() { return g_initialised + 1; }
extern "C" double scaled_sqrt(double x) { ++t_calls; return std::sqrt(scale(x)); }
extern "C" int clamped(int a, int b) { ++t_calls; return clamp_add<int>(a, b, 100); }
extern "C" int counter() { static int n = 0; return ++n; }
extern "C" int calls_here() { return t_calls; }
typedef double (*unary)(double);
static double twice(double x) { return scale(x) / 1.5; }
static unary table[] = {twice, scaled_sqrt};
extern "C" double apply(int which, double x) { return table[which & 1](x); }
static int shared(int x) { return x * 2 + static_cast<int>(std::strlen("literal")); }
#define USER(n) extern "C" int first##n(int x) { return shared(x + n) + static_cast<int>(std::strlen("literal")); }
USER(0) USER(1) USER(2) USER(3) USER(4) USER(5) USER(6) USER(7) USER(8) USER(9) USER(10) USER(11)
"""

BUILD = """
import json, kiln
lib = kiln.context("none").build_library("split_demo", [%r], flags=["-O2", "-std=c++17"], output=%r)
print(json.dumps({"cache": lib["cache_source"], "warnings": lib["warnings"], "log": lib["log"]}))
"""


def build(tmp_path, threads):
    source = tmp_path / "split_demo.cpp"
    source.write_text(SOURCE)
    cache, out = tmp_path / ("cache%s" % threads), tmp_path / ("split_demo_%s.so" % threads)
    done = run_python(BUILD % (str(source), str(out)), env={"KILN_CACHE_DIR": str(cache), "KILN_COMPILE_THREADS": str(threads)})
    return out, done.stdout


def check(path):
    lib = ctypes.CDLL(str(path))
    lib.scaled_sqrt.restype = lib.apply.restype = ctypes.c_double
    lib.scaled_sqrt.argtypes = [ctypes.c_double]
    lib.apply.argtypes = [ctypes.c_int, ctypes.c_double]
    assert lib.initialised() == 42  # the static initializer ran
    assert abs(lib.scaled_sqrt(12.0) - 6.0) < 1e-12
    assert lib.clamped(70, 20) == 90 and lib.clamped(70, 50) == 100
    assert [lib.counter() for _ in range(3)] == [1, 2, 3]
    assert lib.calls_here() == 3
    assert abs(lib.apply(0, 3.0) - 6.0) < 1e-12 and abs(lib.apply(1, 3.0) - 3.0) < 1e-12


def test_code_generation_on_any_number_of_threads_makes_the_same_working_library(tmp_path):
    one, log = build(tmp_path, 1)
    two, _ = build(tmp_path, 2)
    three, _ = build(tmp_path, 3)
    assert '"cache": "compiled"' in log
    for path in (one, two, three):
        check(path)
    # The code is generated in a fixed number of parts, whatever the threads: the same bytes.
    assert one.read_bytes() == two.read_bytes() == three.read_bytes()


def test_a_bad_thread_count_is_a_warning_and_the_build_goes_on(tmp_path):
    path, out = build(tmp_path, "lots")
    assert "KILN_COMPILE_THREADS=lots is not a number from 1 to 1024" in out, out
    check(path)


# A second unit with locals of the same kind (string literals, an internal static initializer):
# split into parts, each unit's locals would become hidden globals of the same names.
SECOND = r"""
#include <cstring>
#include <iostream>
namespace { int g_second = 0; struct Init { Init() { g_second = 7; } } g_init; }
static const char* greeting() { return "hello from the second unit"; }
static int shared(int x) { return x * 3 + static_cast<int>(std::strlen(greeting())); }
#define USER(n) extern "C" int user##n(int x) { return shared(x + n) + static_cast<int>(std::strlen("literal")); }
USER(0) USER(1) USER(2) USER(3) USER(4) USER(5) USER(6) USER(7) USER(8) USER(9) USER(10) USER(11)
extern "C" int second_value() { return g_second + static_cast<int>(std::strlen(greeting())); }
"""


def test_two_units_with_locals_of_the_same_names_link_into_one_library(tmp_path):
    (tmp_path / "split_demo.cpp").write_text(SOURCE)
    (tmp_path / "second.cpp").write_text(SECOND)
    out = tmp_path / "two.so"
    run_python("""
        import kiln
        kiln.context("none").build_library("two_units", [%r, %r], flags=["-O2", "-std=c++17"], output=%r)
        """ % (str(tmp_path / "split_demo.cpp"), str(tmp_path / "second.cpp"), str(out)),
               env={"KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_COMPILE_THREADS": "2"})
    check(out)
    lib = ctypes.CDLL(str(out))
    assert lib.second_value() == 7 + len("hello from the second unit")
    assert lib.user5(1) == (1 + 5) * 3 + len("hello from the second unit") + len("literal")
    assert lib.first5(1) == (1 + 5) * 2 + 2 * len("literal")



# A prelude whose headers use vtables of class templates: the PCH instantiates their virtual
# members once (jit/clang: GenerateHostPchAction), and every compile that uses it must still emit
# those vtables, and still instantiate the members whose templates only its own source defines.
PRELUDE = r"""
#pragma once
template <typename T> struct Shape {
  virtual ~Shape() = default;
  virtual T area() const { return side * side; }
  virtual T sides() const;  // defined by the sources, after this header
  T side = 3;
};
template <typename T> struct Square final : Shape<T> {
  T area() const override { return this->side * this->side * 2; }
};
inline Shape<int>* make_shape() { return new Shape<int>; }
inline Shape<int>* make_square() { return new Square<int>; }
template <typename T> T doubled(T x) { return x.doubled(); }
"""

SHAPES = r"""
template <typename T> T Shape<T>::sides() const { return %d; }
extern "C" int area_%s() { Shape<int>* s = make_shape(); int a = s->area(); delete s; return a; }
extern "C" int square_area_%s() { Shape<int>* s = make_square(); int a = s->area(); delete s; return a; }
extern "C" int sides_%s() { Shape<int>* s = make_square(); int n = s->sides(); delete s; return n; }
"""


def test_a_prelude_with_vtables_serves_every_unit_through_its_precompiled_header(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "shapes.h").write_text(PRELUDE)
    for unit in ("a", "b"):
        (tmp_path / ("%s.cpp" % unit)).write_text(SHAPES % (4, unit, unit, unit))
    built = []
    for name in ("shapes_one", "shapes_two"):  # the second finds the PCH the first made
        out = tmp_path / ("%s.so" % name)
        done = run_python("""
            import json, kiln
            lib = kiln.context("none").build_library(%r, [%r, %r], system_include_dirs=[%r], prelude=["shapes.h"],
                                                     unit_defines=["LIBRARY_NAME=" + %r], flags=["-O1", "-std=c++17"],
                                                     output=%r)
            print(json.dumps({"cache": lib["cache_source"], "pch": lib["precompiled_headers_used"]}))
            """ % (name, str(tmp_path / "a.cpp"), str(tmp_path / "b.cpp"), str(include), name, str(out)),
                          env={"KILN_CACHE_DIR": str(tmp_path / "cache")})
        assert '"cache": "compiled"' in done.stdout and '"pch": 0' not in done.stdout, done.stdout
        built.append(out)
    for out in built:
        lib = ctypes.CDLL(str(out))
        for unit in ("a", "b"):
            assert getattr(lib, "area_" + unit)() == 9
            assert getattr(lib, "square_area_" + unit)() == 18
            assert getattr(lib, "sides_" + unit)() == 4

    # An error in a template of the prelude's headers, instantiated by a source compiled with
    # their PCH: the error and where it came from, not a complaint about the PCH.
    (tmp_path / "bad.cpp").write_text('extern "C" int bad() { return doubled(3); }\n')
    done = run_python("""
        import kiln
        try:
            kiln.context("none").build_library("shapes_bad", [%r, %r], system_include_dirs=[%r], prelude=["shapes.h"],
                                               flags=["-O1", "-std=c++17"])
        except kiln.KilnError as e:
            print(e.code, [(d["file"], d["line"], d["message"]) for d in e.diagnostics])
        """ % (str(tmp_path / "a.cpp"), str(tmp_path / "bad.cpp"), str(include)), env={"KILN_CACHE_DIR": str(tmp_path / "cache")})
    assert done.stdout.startswith("compile_error"), done.stdout
    assert "precompiled" not in done.stdout, done.stdout
    assert "shapes.h', 14, \"member reference base type 'int' is not a structure or union\"" in done.stdout, done.stdout
    assert "bad.cpp', 1, " in done.stdout, done.stdout


THIRD = r"""
#include <string>
static std::string name() { return "third"; }
#define USER(n) extern "C" int third##n(int x) { return x + n + static_cast<int>(name().size()); }
USER(0) USER(1) USER(2) USER(3) USER(4) USER(5) USER(6) USER(7)
"""


def test_units_that_share_their_code_generation_make_the_same_library_on_any_threads(tmp_path):
    # Three units, each split into parts that any of the compile's threads may generate (a thread
    # whose units are done takes another unit's parts): whoever ran which part, the same bytes.
    for name, text in (("split_demo.cpp", SOURCE), ("second.cpp", SECOND), ("third.cpp", THIRD)):
        (tmp_path / name).write_text(text)
    outs = []
    for threads in (1, 2, 8):
        out = tmp_path / ("three_%d.so" % threads)
        run_python("""
            import kiln
            kiln.context("none").build_library("three_units", [%r, %r, %r], flags=["-O2", "-std=c++17"], output=%r)
            """ % (str(tmp_path / "split_demo.cpp"), str(tmp_path / "second.cpp"), str(tmp_path / "third.cpp"), str(out)),
                   env={"KILN_CACHE_DIR": str(tmp_path / ("cache%d" % threads)), "KILN_COMPILE_THREADS": str(threads)})
        check(out)
        lib = ctypes.CDLL(str(out))
        assert lib.second_value() == 7 + len("hello from the second unit") and lib.third7(1) == 1 + 7 + 5
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_debug_logging_times_each_unit_and_its_stages(tmp_path):
    # KILN_LOG=debug says where a library's compile spends its time (the README's DeepSpeed figures
    # lean on it): each unit's parse and optimisation, its code generation, and the whole unit.
    (tmp_path / "split_demo.cpp").write_text(SOURCE)
    (tmp_path / "second.cpp").write_text(SECOND)
    done = run_python("""
        import kiln
        kiln.context("none").build_library("logged", [%r, %r], flags=["-O2", "-std=c++17"], output=%r)
        """ % (str(tmp_path / "split_demo.cpp"), str(tmp_path / "second.cpp"), str(tmp_path / "logged.so")),
                      env={"KILN_CACHE_DIR": str(tmp_path / "cache"), "KILN_LOG": "debug"})
    for unit in ("split_demo.cpp", "second.cpp"):
        for stage in ("parsed and optimised", "code generated", "compiled"):
            assert re.search(r"compile: \S*%s: %s in \d+ ms" % (re.escape(unit), stage), done.stderr), (unit, stage, done.stderr[-2000:])
