"""tools/bench/compare --check: which rows fail their floors (harness.check_floors), on rows as the
sections write them. The floors' figures themselves are measured by CI's `compare --ci`, not here."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

from kiln_compare import harness  # noqa: E402 (after the path it is found on)
from kiln_compare.harness import Floor  # noqa: E402


@pytest.fixture
def rows():
    saved = list(harness.rows)
    harness.rows.clear()
    yield harness.rows
    harness.rows[:] = saved


def timed(ms):
    return {"median_ms": ms, "min_ms": ms, "max_ms": ms, "n": 3}


def test_a_ratio_below_its_floor_fails_and_one_above_holds(rows):
    fast = harness.add("warm", "fast", timed(1.0), "kiln", timed(8.0), "nvcc")
    harness.goal(fast, ">= 8x", fast["ratio"] >= 8, floor=Floor(min_ratio=6.0, source="run A"))
    assert harness.check_floors(["warm"]) == []
    slow = harness.add("warm", "slow", timed(2.0), "kiln", timed(9.0), "nvcc")
    harness.goal(slow, ">= 8x", slow["ratio"] >= 8, floor=Floor(min_ratio=6.0, source="run A"))
    failures = harness.check_floors(["warm"])
    assert len(failures) == 1
    assert "slow" in failures[0] and "4.50x, below its floor 6.00x" in failures[0] and "run A" in failures[0]


def test_the_paired_ratio_is_checked_where_a_row_has_one(rows):
    # Medians say kiln is as fast; in the same rounds it took 1.3x the peer's time.
    row = harness.add("runtime", "adamw", timed(10.0), "kiln", timed(10.0), "deepspeed")
    row["paired_ratio"] = {"median": 1.3, "q1": 1.2, "q3": 1.4}
    harness.goal(row, "at least DeepSpeed's", True, floor=Floor(min_ratio=1 / 1.15, source="run B"))
    failures = harness.check_floors(["runtime"])
    assert len(failures) == 1 and "in the same round" in failures[0]


def test_a_ceiling_on_a_row_with_no_peer(rows):
    rows.append(harness.ceiling({"section": "micro", "what": "disk hit", "kiln": timed(0.02)}, 0.075, "run C"))
    assert harness.check_floors(["micro"]) == []
    rows.append(harness.ceiling({"section": "micro", "what": "slow disk hit", "kiln": timed(0.3)}, 0.075, "run C"))
    failures = harness.check_floors(["micro"])
    assert len(failures) == 1 and "above its ceiling" in failures[0]


def test_a_missing_peer_a_section_that_could_not_run_or_measured_nothing_floored_fails(rows):
    missing = harness.add("runtime", "adamw", timed(10.0), "kiln", missing="DeepSpeed is not installed")
    missing["floor"] = Floor(min_ratio=0.8, source="run B").as_dict()
    rows.append({"section": "warm", "what": "could not run", "peer_missing": "nvcc failed"})
    rows.append({"section": "hit", "what": "a row with no floor", "kiln": timed(1.0)})
    failures = harness.check_floors(["runtime", "warm", "hit"])
    assert any("no figure to check (DeepSpeed is not installed)" in f for f in failures)
    assert any(f.startswith("warm: could not run: nvcc failed") for f in failures)
    assert any(f.startswith("hit: no row with a floor was measured") for f in failures)


def test_a_section_that_sets_no_floors_is_not_asked_for_one(rows):
    # compare --check over every section: only those whose code sets floors must measure one.
    rows.append({"section": "remote", "what": "a remote hit", "kiln": timed(1.0)})
    rows.append({"section": "hit", "what": "a row with no floor", "kiln": timed(1.0)})
    failures = harness.check_floors(["remote", "hit"], floored_sections=["hit"])
    assert len(failures) == 1 and failures[0].startswith("hit: no row with a floor")


def test_every_ci_section_has_a_floor_in_its_code():
    from kiln_compare import cli
    from kiln_compare.sections import hit, micro, runtime, warm
    assert cli.CI_SECTIONS == ["hit", "warm", "micro", "runtime"]
    for floor in (hit.HIT_FLOOR, warm.WARM_SM90_FLOOR, runtime.ADAMW_FLOOR):
        assert floor.min_ratio and "docs/history/" in floor.source
    assert micro.CEILINGS_MS and "docs/history/" in micro.CEILING_SOURCE
    for module in (hit, warm, micro, runtime):
        assert module.FLOORED
    for source in (hit.HIT_FLOOR.source, micro.CEILING_SOURCE):  # the page the floors name exists
        page = source[source.index("docs/history/"):].rstrip('")')
        assert os.path.exists(os.path.join(ROOT, page)), page


def test_help_names_check_and_ci():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "compare"), "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--check" in out and "--ci" in out and "floor" in out


def test_a_ceilinged_benchmark_that_gives_no_figure_fails_the_check(rows, monkeypatch):
    # Google Benchmark writes no median for a benchmark whose runs all failed (SkipWithError, as
    # BM_DiskHit does when its hit turns into a compile): a fault the real benchmark cannot be
    # made to show on demand, so its JSON is replaced by one that lacks BM_DiskHit.
    from types import SimpleNamespace

    from kiln_compare.sections import micro
    got = {"BM_DiskHitAndLoad": {"median_ms": 0.06, "n": 3, "counters": {}, "counters_sd": {}},
           "BM_DiskHit100KiB": {"median_ms": 0.07, "n": 3, "counters": {}, "counters_sd": {}},
           "BM_IndexLookup/1000000": {"median_ms": 0.006, "n": 3, "counters": {}, "counters_sd": {}}}
    monkeypatch.setattr(micro, "gbench", lambda binary, pattern, reps: {k: v for k, v in got.items()
                                                                         if (k == "BM_DiskHitAndLoad") == (binary == "kiln_bench")})
    micro.section(SimpleNamespace(ci=True, quick=False, reps=3), "/nonexistent")
    failures = harness.check_floors(["micro"], floored_sections=["micro"])
    assert len(failures) == 1 and failures[0].startswith("micro: BM_DiskHit: no figure to check"), failures
