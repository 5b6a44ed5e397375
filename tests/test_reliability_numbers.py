"""Reliability of the numbers ``specnsys kernels`` and ``specnsys ranges`` print (issue 22).

* Item 12: the ingest accepts event times up to +-2**60 ns of the session start
  (``summary.require_plausible_times``); durations then reach 2**61 ns and a sum of eight of
  them passes 2**63. Those sums must come out exact (128-bit), not as an internal error (exit 3)
  nor silently wrapped (the per-name ``ranges`` summary once printed a wrapped sum, exit 0).
* Item 16: two launch calls on one thread with the same start time made the projection pick
  an arbitrary one of the tied calls, so ops and whole ranges dropped from run to run. A built
  trace with ties checks the exact projection; a copy of a real export with every second call's
  start set to its predecessor's checks run-to-run identity and equality with NVIDIA's
  ``nsys stats -r nvtxgpuproj`` on that same copy (stored report, see golden/nsys_stats).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.attribution.projection import nvtx_gpu_projection
from specnsys.ingest.summary import MAX_ABS_TIME_NS
from specnsys.testing import NsysExportBuilder
from tests.conftest import CORPUS, sha256

GOLDEN = Path(__file__).resolve().parent / "golden" / "nsys_stats"

# -- item 12: sums of durations near the accepted bound ----------------------------------------

L = MAX_ABS_TIME_NS  # the largest |time| the ingest lets through
N = 8  # eight durations of 2 * 2**60 = 2**61 ns sum to 2**64, past int64
SPAN = 2 * L


def _far_trace(path: Path) -> Path:
    """N kernels and N start/end ranges spanning the whole accepted time axis [-2**60, 2**60].

    Every range contains every launch call, so each range has N ops and the projected span
    2**61; per name the sums are N * 2**61 = 2**64."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.push_pop(-L, L, "outer", pid=1, tid=1)
    for i in range(N):
        b.start_end(-L, L, "far", pid=1, tid=1)
        b.runtime(-L + 10 * i, -L + 10 * i + 5, "cudaLaunchKernel", correlation_id=i + 1)
        b.kernel(-L, L, "long_kernel", correlation_id=i + 1, demangled="long_kernel<int>")
    return b.write(path)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=300
    )


def _ok(*args: str, warnings: tuple[str, ...] = ()) -> str:
    """stdout of a command that must succeed with no warning but those named (substrings)."""
    out = _cli(*args)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == len(warnings), out.stderr
    assert all(w in line for w, line in zip(warnings, lines, strict=True)), out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def far_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _far_trace(tmp_path_factory.mktemp("far") / "far.sqlite")


def test_kernels_sum_past_int64_is_exact(far_trace: Path) -> None:
    row = json.loads(_ok("kernels", "--json", str(far_trace)))["rows"][0]
    assert row["total_ns"] == N * SPAN == 2**64
    assert (row["instances"], row["min_ns"], row["max_ns"]) == (N, SPAN, SPAN)
    assert row["avg_ns"] == SPAN and row["share"] == 1.0
    text = _ok("kernels", str(far_trace))
    assert f"{N:,} launches, {2**64 / 1e6:.3f} ms summed" in text
    assert f" {2**64 / 1e6:.3f} " in text  # the table cell, apart from its neighbours


def test_ranges_sums_past_int64_are_exact(far_trace: Path) -> None:
    rows = {r["name"]: r for r in json.loads(_ok("ranges", "--json", str(far_trace)))["rows"]}
    far = rows["far"]
    assert (far["instances"], far["gpu_ops"]) == (N, N * N)
    assert far["cpu_ns"] == far["proj_ns"] == far["gpu_busy_ns"] == N * SPAN
    assert rows["outer"]["cpu_ns"] == rows["outer"]["proj_ns"] == SPAN
    instances = json.loads(_ok("ranges", "--instances", "--json", str(far_trace)))["rows"]
    assert len(instances) == N + 1
    assert all(
        (r["start"], r["duration"], r["proj_start"], r["proj_duration"], r["gpu_busy_ns"])
        == (-L, SPAN, -L, SPAN, SPAN)
        for r in instances
    )
    text = _ok("ranges", str(far_trace))
    # every figure its own whitespace-separated cell: wide numbers never run together
    cells = next(line for line in text.splitlines() if line.startswith("far")).split()
    assert cells[1:] == ["StartEnd", f"{N}", *[f"{N * SPAN / 1e6:.3f}"] * 3, f"{N * N}"]
    assert "far" in _ok("ranges", "--instances", str(far_trace))


def test_unended_range_ignores_an_implausible_definition_row(tmp_path: Path) -> None:
    """A range without an end runs to the last NVTX timestamp, definition rows included (as in
    nsys); a domain definition row at 2**63 - 1, a time the ingest's plausibility check does
    not look at (it bounds events only), once became that end and ``end - start`` overflowed
    (exit 3). Such a time is now ignored; a plausible definition row still counts."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(5, "dom", pid=1, tid=1, t=2**63 - 1)
    b.domain(6, "late", pid=1, tid=1, t=9000)
    b.push_pop(-L, None, "open", pid=1, tid=1)
    b.mark(5000, "last event", pid=1, tid=1)
    b.runtime(100, 200, "cudaLaunchKernel", correlation_id=1, pid=1, tid=1)
    b.kernel(300, 400, "k", correlation_id=1, pid=1)
    path = b.write(tmp_path / "open.sqlite")
    never_closed = ("1 NVTX range(s) were never closed",)  # the data check every command prints
    doc = json.loads(_ok("ranges", "--instances", "--json", str(path), warnings=never_closed))
    (row,) = doc["rows"]
    assert (row["name"], row["start"], row["duration"]) == ("open", -L, 9000 + L)
    assert (row["proj_start"], row["proj_duration"], row["gpu_ops"]) == (300, 100, 1)
    assert "open" in _ok("ranges", str(path), warnings=never_closed)


# -- item 16: tied launch starts --------------------------------------------------------------

GROUPS = 300


def _tied_trace(path: Path) -> Path:
    """GROUPS repetitions of three launch calls with one start time on one thread, inside
    nested ranges C [t, t+500] > A [t+1, t+35] > B [t+10, t+25]. Call k (1..3) ends at
    t + 10 + 10k and launches a kernel at [t + 100 + 10k, t + 105 + 10k]."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    for g in range(GROUPS):
        t = g * 1000
        b.push_pop(t, t + 500, "C")
        b.push_pop(t + 1, t + 35, "A")
        b.push_pop(t + 10, t + 25, "B")
        for k in (1, 2, 3):
            b.runtime(t + 10, t + 10 + 10 * k, "cudaLaunchKernel", correlation_id=3 * g + k)
            b.kernel(t + 100 + 10 * k, t + 105 + 10 * k, "k", correlation_id=3 * g + k)
    return b.write(path)


def test_tied_launch_starts_give_the_exact_projection(tmp_path: Path) -> None:
    """C holds all three calls, A the two that end by t+35, B the one that ends by t+25."""
    path = _tied_trace(tmp_path / "tied.sqlite")
    expected = {"C": (3, 110, 25), "A": (2, 110, 15), "B": (1, 110, 5)}  # ops, start-t, span
    for _ in range(3):
        with specnsys.open(path, use_cache=False) as trace:
            proj = nvtx_gpu_projection(trace)
        assert proj.height == 3 * GROUPS
        for r in proj.iter_rows(named=True):
            t = (r["start"] // 1000) * 1000
            ops, start, span = expected[r["name"]]
            assert (r["gpu_ops"], r["proj_start"] - t, r["proj_duration"]) == (ops, start, span)
            assert r["gpu_busy_ns"] == 5 * ops


TIED_SOURCE = CORPUS / "2026.2.1_nsysai_mfu-2gpu-before.sqlite"
TIED_GOLDEN = GOLDEN / "2026.2.1_nsysai_mfu-2gpu-before-tied_nvtxgpuproj.csv.gz"

#: Every second runtime call of a thread (in start order) gets its predecessor's start, as a
#: coarse clock would write them. Also in golden/nsys_stats/make.sh, which made the stored
#: ``nsys stats`` report of this copy: keep the two the same.
TIE_SQL = """
WITH launch AS (
    SELECT rowid AS rid,
           row_number() OVER (PARTITION BY globalTid ORDER BY start, rowid) AS n,
           lag(start) OVER (PARTITION BY globalTid ORDER BY start, rowid) AS prev
    FROM CUPTI_ACTIVITY_KIND_RUNTIME
)
UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = launch.prev FROM launch
WHERE launch.rid = CUPTI_ACTIVITY_KIND_RUNTIME.rowid AND launch.n % 2 = 0
"""


def tied_start_groups(path: Path) -> int:
    """How many (thread, start) pairs of the export at *path* hold more than one runtime call."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute(
            "SELECT count(*) FROM (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            "GROUP BY globalTid, start HAVING count(*) > 1)"
        ).fetchone()[0])
    finally:
        con.close()


def tie_copy(source: Path, target: Path) -> Path:
    """Copy *source* to *target* and give the copy tied launch starts (never the source)."""
    shutil.copyfile(source, target)
    target.chmod(0o644)
    con = sqlite3.connect(target)
    try:
        with con:
            con.execute(TIE_SQL)
    finally:
        con.close()
    return target


@pytest.mark.skipif(not TIED_SOURCE.exists(), reason="real corpus not present")
def test_tied_corpus_copy_is_deterministic_and_equals_nsys(tmp_path: Path) -> None:
    before = sha256(TIED_SOURCE)
    path = tie_copy(TIED_SOURCE, tmp_path / "tied.sqlite")
    assert sha256(TIED_SOURCE) == before
    ties = tied_start_groups(path)
    assert ties > 1000
    ref = pl.read_csv(gzip.decompress(TIED_GOLDEN.read_bytes()), infer_schema_length=0).select(
        pl.col("RangeId").cast(pl.Int64).alias("range_id"),
        pl.col("Name").alias("name"),
        pl.col("Orig Start (ns)").cast(pl.Int64).alias("start"),
        pl.col("Orig Duration (ns)").cast(pl.Int64).alias("duration"),
        pl.col("Projected Start (ns)").cast(pl.Int64).alias("proj_start"),
        pl.col("Projected Duration (ns)").cast(pl.Int64).alias("proj_duration"),
        pl.col("NumGPUOps").cast(pl.Int64).alias("gpu_ops"),
    )
    runs = []
    for _ in range(4):
        with specnsys.open(path, use_cache=False) as trace:
            runs.append(nvtx_gpu_projection(trace).sort("range_id"))
    assert all(run.equals(runs[0]) for run in runs[1:])
    assert runs[0].select(ref.columns).to_dicts() == ref.sort("range_id").to_dicts()
