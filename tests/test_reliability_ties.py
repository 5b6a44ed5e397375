"""Tied keys in every as-of lookup outside the projection (issue 22, item 16's class of bug).

An as-of join whose right side has duplicate keys picks an arbitrary one of the tied rows
(DuckDB ASOF JOIN and Polars ``join_asof`` both do), so a lookup that can see ties must
order them by a unique key that states the semantics. The lookups and what keeps them exact:

* phase map (:mod:`specnsys.attribution.phase_map`): boundaries at one instant are swept in a
  total order (ends first; starts outer first: the later end, then depth, then row id), the
  owner join is keyed by the unique row number, and the map has one change point per
  (thread, instant). Simultaneous starts were once ordered by depth first, which is not
  comparable across NVTX domains (each has its own stack): a range of another domain nested
  in time inside a deeper one took the wrong phase, and after it closed no phase at all.
* NVTX nesting (:func:`specnsys.ingest.nvtx_nesting.nvtx_nesting`): the parent join is keyed
  by the unique start rank of the sorted sweep.
* launching call of a GPU op (:mod:`specnsys.attribution.launch`): the calls' keys are made
  unique first (earliest call per ``(pid, correlation id)``, ties by end, thread and name).
* ``output_tokens`` mark of a request (:mod:`specnsys.metrics.requests`): marks of one
  thread at one instant are ordered by export row (emission order on the thread); the old
  join took the first emitted of tied marks on a small trace and the last on a large one.

Built traces give exact answers worked out by hand from docs/design.md#attribution (GPU work to the
phase that launched it; idle time to the innermost phase range open on the driver thread);
fresh processes with different Polars thread counts must print identical output; a coarse
clock copy of a real export (every time floored to a microsecond) and the tied-launch copy of
:mod:`tests.test_reliability_numbers` must too.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.attribution import gpu_ops_with_phase
from specnsys.attribution.phase_map import lookup_phase, phase_change_points
from specnsys.attribution.timeline import exclusive_phase_times
from specnsys.metrics.events import Scope, mark_phases, resolve
from specnsys.metrics.requests import request_latencies
from specnsys.testing import NsysExportBuilder
from tests.test_reliability_numbers import TIED_SOURCE, tie_copy, tied_start_groups

THREADS = ("1", "2", "1", "2")  # POLARS_MAX_THREADS of the fresh processes compared


def _cli_json(*args: str, threads: str) -> dict:
    env = {**os.environ, "POLARS_MAX_THREADS": threads}
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", "--no-cache", *args, "--json"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _same_in_fresh_processes(*args: str) -> dict:
    """The JSON answer of ``specnsys *args --json``, identical in every fresh process."""
    runs = [_cli_json(*args, threads=n) for n in THREADS]
    assert all(run == runs[0] for run in runs[1:])
    return runs[0]


def _phases_of(breakdown_frame: pl.DataFrame, column: str) -> dict[str, int]:
    return {p: v for p, v in breakdown_frame.select("phase", column).iter_rows() if v}


def _exclusive(breakdown_frame: pl.DataFrame) -> dict[str, int]:
    """Time each phase range is the innermost on the driver thread (not the time outside)."""
    return _phases_of(breakdown_frame.filter(pl.col("phase") != "unannotated"), "cpu_exclusive_ns")


# -- phase map: boundaries of one thread at one instant ------------------------------------

#: Launch call starts on the driver thread and the phase each was launched in. 150 twice:
#: two calls with one start (issue 22 item 16's case).
LAUNCHES = [
    (100, "sample"),  # forward and sample pushed at the same ns: the inner one
    (150, "kv"),  # sample ends as kv starts (half-open ranges)
    (150, "kv"),
    (200, "draft"),  # kv and forward end as draft starts
    (300, "sample"),  # verify and sample: the same interval, sample pushed second
    (400, "schedule"),  # both end as schedule starts
    (450, "sample"),  # schedule ends as forward and sample start
    (500, "kv"),
    (600, "unannotated"),  # everything ends
]
#: Time each phase is the innermost open range on the driver thread (hand-computed).
EXCLUSIVE = {"sample": 50 + 100 + 50, "kv": 50 + 100, "draft": 100, "schedule": 50}


def _tied_phases_trace(path: Path) -> tuple[Path, dict[int, tuple[int, int | None]]]:
    """Phase ranges whose boundaries coincide (see LAUNCHES), one launch at every boundary,
    and marks at the same instants; a second thread with a phase range over the same
    instants. Returns the path and, per range id, the expected ``(depth, parent)``."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.thread(1, 2, "worker")
    b.domain(1, "specnsys")

    def pp(s: int, e: int, name: str, tid: int = 1) -> int:
        return b.push_pop(s, e, name, domain_id=1, tid=tid)

    nesting: dict[int, tuple[int, int | None]] = {}
    f1 = pp(100, 200, "forward")
    nesting[f1] = (0, None)
    nesting[pp(100, 150, "sample")] = (1, f1)
    nesting[pp(150, 200, "kv")] = (1, f1)
    nesting[pp(200, 300, "draft")] = (0, None)
    v = pp(300, 400, "verify")
    nesting[v] = (0, None)
    nesting[pp(300, 400, "sample")] = (1, v)
    nesting[pp(400, 450, "schedule")] = (0, None)
    f2 = pp(450, 600, "forward")
    nesting[f2] = (0, None)
    nesting[pp(450, 500, "sample")] = (1, f2)
    nesting[pp(500, 600, "kv")] = (1, f2)
    nesting[pp(100, 200, "verify", tid=2)] = (0, None)
    for i, (t, _) in enumerate(LAUNCHES):
        b.runtime(t, t + 1, "cudaLaunchKernel", correlation_id=i + 1)
        b.kernel(1000 + 10 * i, 1005 + 10 * i, "k", correlation_id=i + 1)
        b.mark(t, "target_bytes", domain_id=1, payload_int=i)
    # the worker's launch at 150 is in its own verify range, not in the driver's kv
    b.runtime(150, 151, "cudaLaunchKernel", correlation_id=100, tid=2)
    b.kernel(1200, 1205, "k", correlation_id=100)
    return b.write(path), nesting


@pytest.fixture(scope="module")
def tied_phases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return _tied_phases_trace(tmp_path_factory.mktemp("ties") / "phases.sqlite")


def test_tied_boundaries_nest_by_push_order(tied_phases) -> None:
    path, nesting = tied_phases
    with specnsys.open(path, use_cache=False) as trace:
        rows = trace.connection.sql(
            "SELECT id, depth, parent FROM nvtx WHERE kind = 'push_pop'"
        ).fetchall()
    assert {i: (d, p) for i, d, p in rows} == nesting


def test_launches_at_tied_boundaries_take_the_innermost_phase(tied_phases) -> None:
    path, _ = tied_phases
    with specnsys.open(path, use_cache=False) as trace:
        ops = gpu_ops_with_phase(trace)
    got = ops.sort("correlation_id").select("api_start", "phase").rows()
    assert got == [*LAUNCHES, (150, "verify")]


def test_idle_time_at_tied_boundaries_goes_to_the_innermost_phase(tied_phases) -> None:
    path, _ = tied_phases
    with specnsys.open(path, use_cache=False) as trace:
        b = exclusive_phase_times(trace)
    frame = b.frame
    assert _exclusive(frame) == EXCLUSIVE
    kernels: dict[str, int] = {}
    for _, phase in LAUNCHES:
        kernels[phase] = kernels.get(phase, 0) + 1
    kernels["verify"] = 1  # the worker's launch
    assert _phases_of(frame, "kernels") == kernels
    assert _phases_of(frame, "launches") == kernels
    assert _phases_of(frame, "gpu_busy_ns") == {p: 5 * n for p, n in kernels.items()}
    assert int(frame["wall_ns"].sum()) == b.window_ns


def test_marks_at_tied_boundaries_take_the_innermost_phase(tied_phases) -> None:
    """The DuckDB as-of lookup (phase_lookup_sql) answers as the Polars one does."""
    path, _ = tied_phases
    with specnsys.open(path, use_cache=False) as trace:
        scope = Scope(1, None, 0, 10_000, resolve(None))
        found = mark_phases(trace, scope, "target_bytes").sort("value")
    expected = [None if p == "unannotated" else p for _, p in LAUNCHES]
    assert found["phase"].to_list() == expected


def test_tied_boundaries_phases_cli_is_exact_in_fresh_processes(tied_phases) -> None:
    path, _ = tied_phases
    out = _same_in_fresh_processes("phases", str(path))
    phases = out["phases"]
    assert {p: v["cpu_exclusive_ns"] for p, v in phases.items() if p in EXCLUSIVE} == EXCLUSIVE
    assert sum(v["wall_ns"] for v in phases.values()) == out["window_ns"]


def test_simultaneous_starts_of_two_domains_nest_by_their_ends(tmp_path: Path) -> None:
    """Y (domain B) lies inside X2 (domain A) and starts with it; X2 is deeper in its own
    stack than Y in its own. Y is the innermost range over [100, 200), X2 over [200, 300)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "A")
    b.domain(2, "B")
    b.push_pop(0, 1000, "X0", domain_id=1)
    b.push_pop(50, 900, "X1", domain_id=1)
    b.push_pop(100, 300, "X2", domain_id=1)
    b.push_pop(100, 200, "Y", domain_id=2)
    for i, t in enumerate((100, 250)):
        b.runtime(t, t + 5, "cudaLaunchKernel", correlation_id=i + 1)
        b.kernel(2000 + 100 * i, 2010 + 100 * i, "k", correlation_id=i + 1)
    path = b.write(tmp_path / "domains.sqlite")
    with specnsys.open(path, use_cache=False) as trace:
        ops = gpu_ops_with_phase(trace, rules="nvtx")
        frame = exclusive_phase_times(trace, rules="nvtx").frame
    assert ops.sort("api_start")["phase"].to_list() == ["Y", "X2"]
    exclusive = {"X0": 50 + 100, "X1": 50 + 600, "X2": 100, "Y": 100}
    assert _exclusive(frame) == exclusive
    out = _same_in_fresh_processes("phases", "--rules", "nvtx", str(path))
    assert {p: out["phases"][p]["cpu_exclusive_ns"] for p in exclusive} == exclusive


def test_lookup_without_a_thread_refuses_change_points_of_several_threads() -> None:
    """Looked up as one thread, two threads' change points at one instant would tie."""
    ranges = pl.DataFrame(
        {"id": [1, 2], "gtid": [1, 2], "s": [0, 0], "e": [10, 20], "phase": ["a", "b"],
         "depth": [0, 0]}
    )  # fmt: skip
    points = pl.DataFrame({"t": [5]})
    with pytest.raises(ValueError, match="one thread"):
        lookup_phase(points, phase_change_points(ranges), t="t", gtid=None)


# -- launching call: duplicate correlation ids ---------------------------------------------


def test_duplicate_correlation_ids_take_the_earliest_call(tmp_path: Path) -> None:
    """GROUPS ops whose correlation id two calls share: the earlier call (in draft) owns the
    op, whichever comes first in the export; a tie on start, end and thread goes to the
    first name in byte order (cuLaunchKernel before cudaLaunchKernel)."""
    groups = 200
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    b.push_pop(0, 100_000, "draft", domain_id=1)
    b.push_pop(100_000, 200_000, "verify", domain_id=1)
    for i in range(groups):
        t = 10 + 100 * i
        later, earlier = (100_000 + t, "cudaLaunchKernel"), (t, "cudaLaunchKernel")
        for start, name in (later, earlier) if i % 2 else (earlier, later):
            b.runtime(start, start + 5, name, correlation_id=i + 1)
        b.kernel(300_000 + 10 * i, 300_005 + 10 * i, "k", correlation_id=i + 1)
        # tied: same start, end and thread, two names
        b.runtime(t + 1, t + 6, "cudaLaunchKernel", correlation_id=1000 + i)
        b.runtime(t + 1, t + 6, "cuLaunchKernel", correlation_id=1000 + i, event_class=1)
        b.kernel(400_000 + 10 * i, 400_005 + 10 * i, "k", correlation_id=1000 + i)
    path = b.write(tmp_path / "dup.sqlite")
    with specnsys.open(path, use_cache=False) as trace:
        ops = gpu_ops_with_phase(trace).sort("correlation_id")
        frame = exclusive_phase_times(trace).frame
    assert ops.height == 2 * groups
    assert ops["phase"].unique().to_list() == ["draft"]
    first = ops.filter(pl.col("correlation_id") <= groups)
    assert first["api_start"].to_list() == [10 + 100 * i for i in range(groups)]
    tied = ops.filter(pl.col("correlation_id") > groups)
    assert tied["api_name"].unique().to_list() == ["cuLaunchKernel"]
    assert _phases_of(frame, "kernels") == {"draft": 2 * groups}


# -- requests: tied output_tokens marks ------------------------------------------------------


def test_tied_output_tokens_marks_take_the_last_emitted(tmp_path: Path) -> None:
    """Two ``output_tokens`` marks at one instant on the ending thread: the later row (the
    later emitted) is the last mark. Two requests ending together both take that one mark,
    so neither gets it."""
    n = 20
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    for i in range(n):
        t = 10_000 * i
        b.start_end(t, t + 5000, "request", domain_id=1, payload_int=i)
        b.mark(t + 100, "first_token", domain_id=1, payload_int=i)
        b.mark(t + 4000, "output_tokens", domain_id=1, payload_int=3)
        b.mark(t + 4000, "output_tokens", domain_id=1, payload_int=5)
    t = 10_000 * n
    for rid, s in ((n, t), (n + 1, t + 1000)):
        b.start_end(s, t + 5000, "request", domain_id=1, payload_int=rid)
    b.mark(t + 5000, "output_tokens", domain_id=1, payload_int=7)
    b.mark(t + 5000, "output_tokens", domain_id=1, payload_int=9)
    path = b.write(tmp_path / "requests.sqlite")
    with specnsys.open(path, use_cache=False) as trace:
        lat = request_latencies(trace, Scope(1, None, 0, 10**9, resolve(None)))
    tokens = dict(lat.select("request_id", "output_tokens").iter_rows())
    assert tokens == {**dict.fromkeys(range(n), 5), n: None, n + 1: None}
    tpot = lat.filter(pl.col("request_id") < n)["tpot_ns"].unique().to_list()
    assert tpot == [(5000 - 100) / 4]


# -- real exports with ties ------------------------------------------------------------------


def _coarse_copy(source: Path, target: Path, quantum: int = 1000) -> Path:
    """Copy *source* with every NVTX, CUDA API and GPU time floored to *quantum* ns, as a
    coarse clock writes them: properly nested ranges stay nested, and boundaries, launch
    starts and kernels now tie by the thousand (never the source)."""
    shutil.copyfile(source, target)
    target.chmod(0o644)
    con = sqlite3.connect(target)
    try:
        with con:
            for table in (
                "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            ):  # fmt: skip
                con.execute(
                    f"UPDATE {table} SET start = (start / {quantum}) * {quantum}, "
                    f'"end" = ("end" / {quantum}) * {quantum}'
                )
    finally:
        con.close()
    return target


@pytest.mark.skipif(not TIED_SOURCE.exists(), reason="real corpus not present")
@pytest.mark.parametrize("make", [tie_copy, _coarse_copy], ids=["tied-launches", "coarse-clock"])
def test_phases_of_a_tied_corpus_copy_are_identical_in_fresh_processes(make, tmp_path) -> None:
    path = make(TIED_SOURCE, tmp_path / "copy.sqlite")
    ties = tied_start_groups(path)
    assert ties > 100
    out = _same_in_fresh_processes("phases", "--rules", "nvtx", str(path))
    assert sum(v["wall_ns"] for v in out["phases"].values()) == out["window_ns"]
