"""Property-based tests: random nsys-schema exports, built by the same builder as the unit tests.

Whatever the export holds -- overlapping, crossing, unclosed or backwards ranges, duplicate and
dangling correlation ids, several processes and threads, values near the int64 limits -- opening
it and computing the exclusive phase timeline either succeeds with the attribution invariants
(docs/design.md#attribution: phase times sum to the window exactly, every share in [0, 1]) or raises
:class:`specnsys.SpecnsysError`. Any other exception is a bug.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import specnsys
from specnsys.annotate import PHASES
from specnsys.attribution import exclusive_phase_times
from specnsys.testing import NsysExportBuilder

pytestmark = pytest.mark.slow

NAMES = [*PHASES, "request", "not_a_phase"]
INT64_MAX = 2**63 - 1

#: Mostly small times (so events interact), sometimes anywhere in int64.
small_times = st.integers(-50, 2_000)
times = st.one_of(
    small_times,
    small_times,
    small_times,
    st.integers(-(2**60), 2**60),  # the plausible range (see quality.MAX_ABS_TIME_NS)
    st.integers(-(2**63), INT64_MAX),
)


@st.composite
def ends(draw: st.DrawFn, start: int) -> int | None:
    """An end: usually after the start, sometimes equal, before, or missing (NULL)."""
    kind = draw(st.sampled_from(["after", "after", "after", "same", "before", "null", "any"]))
    if kind == "null":
        return None
    if kind == "any":
        return draw(times)
    if kind == "same":
        return start
    delta = draw(st.integers(1, 500))
    value = start - delta if kind == "before" else start + delta
    return max(-(2**63), min(INT64_MAX, value))


@st.composite
def exports(draw: st.DrawFn) -> NsysExportBuilder:
    """A random export: 1-2 processes, 1-2 threads each, ranges, marks, API calls, GPU ops."""
    legacy = draw(st.booleans())
    b = NsysExportBuilder(legacy=legacy)
    pids = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2, unique=True))
    threads = [(pid, tid) for pid in pids for tid in range(1, draw(st.integers(1, 2)) + 1)]
    for pid, tid in threads:
        b.thread(pid, tid, f"t{tid}")
    for pid in pids:
        b.process(pid, f"proc{pid}")
        if draw(st.booleans()) or pid == pids[0]:
            b.domain(1, "specnsys", pid=pid)
    if draw(st.booleans()):
        b.gpu(0)
    thread = st.sampled_from(threads)
    for _ in range(draw(st.integers(0, 12))):
        pid, tid = draw(thread)
        start = draw(times)
        end = draw(ends(start))
        kind = draw(st.sampled_from(["push_pop", "push_pop", "push_pop", "start_end"]))
        getattr(b, kind)(
            start,
            end,
            draw(st.sampled_from(NAMES)),
            pid=pid,
            tid=tid,
            domain_id=draw(st.sampled_from([1, 1, 1, 0])),
        )
    for _ in range(draw(st.integers(0, 4))):
        pid, tid = draw(thread)
        b.mark(
            draw(times),
            draw(st.sampled_from(["proposed", "accepted"])),
            pid=pid,
            tid=tid,
            domain_id=1,
            payload_int=draw(st.integers(-2, 8)),
        )
    correlation = st.integers(0, 8)  # a small pool: duplicates and dangling ids happen
    for _ in range(draw(st.integers(0, 8))):
        pid, tid = draw(thread)
        start = draw(times)
        b.runtime(
            start,
            draw(ends(start)) or start,
            "cudaLaunchKernel_v7000",
            draw(correlation),
            pid=pid,
            tid=tid,
        )
    for _ in range(draw(st.integers(0, 10))):
        pid = draw(st.sampled_from(pids))
        start = draw(times)
        end = draw(ends(start))
        op = draw(st.sampled_from(["kernel", "kernel", "memcpy", "memset"]))
        end = start if end is None else end  # the builder's GPU tables are NOT NULL
        if op == "kernel":
            b.kernel(start, end, "k", draw(correlation), pid=pid)
        elif op == "memcpy":
            b.memcpy(start, end, 64, draw(correlation), pid=pid)
        else:
            b.memset(start, end, 64, draw(correlation), pid=pid)
    return b


def _check_invariants(trace: specnsys.Trace) -> None:
    breakdown = exclusive_phase_times(trace)
    frame = breakdown.frame
    window = breakdown.window_ns
    assert window >= 0
    assert int(frame["wall_ns"].sum()) == window, frame
    assert (frame["wall_ns"] >= 0).all()
    assert (frame["gpu_wall_ns"] + frame["cpu_wall_ns"] == frame["wall_ns"]).all()
    assert int(frame["gpu_wall_ns"].sum()) == breakdown.gpu_union_ns <= window
    assert (frame["gpu_busy_ns"] <= window).all() and (frame["gpu_busy_ns"] >= 0).all()
    shares = frame["share"]
    assert ((shares >= 0.0) & (shares <= 1.0)).all(), frame
    if window > 0:
        assert abs(float(shares.sum()) - 1.0) < 1e-9
    assert int(frame["cpu_exclusive_ns"].sum()) <= window


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(exports())
def test_random_exports_keep_the_invariants_or_fail_cleanly(builder: NsysExportBuilder) -> None:
    note(repr(dict(builder.rows)))  # shown with a failing example
    with tempfile.TemporaryDirectory() as folder:
        path = builder.write(Path(folder) / "random.sqlite")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid-data warnings are the point here
                with specnsys.open(path, use_cache=False) as trace:
                    _check_invariants(trace)
        except specnsys.SpecnsysError as exc:
            assert str(exc) and "\n" not in str(exc)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(exports())
def test_cache_and_memory_give_the_same_answer(builder: NsysExportBuilder) -> None:
    """The Parquet cache and the in-memory path are one model: same phase table."""
    with tempfile.TemporaryDirectory() as folder:
        path = builder.write(Path(folder) / "random.sqlite")
        results: list[list[dict[str, Any]] | str] = []  # the rows, or the one-line error
        for use_cache in (False, True, True):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with specnsys.open(path, use_cache=use_cache) as trace:
                        results.append(exclusive_phase_times(trace).frame.to_dicts())
            except specnsys.SpecnsysError as exc:
                results.append(str(exc))
        assert results[0] == results[1] == results[2]
