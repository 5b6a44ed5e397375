"""Launch attribution and the exclusive phase timeline on small built traces (hand-computed)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specnsys
from specnsys.attribution import PhaseBreakdown, exclusive_phase_times, gpu_ops_with_phase
from specnsys.testing import NsysExportBuilder

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "spec_chat_c4_k4.sqlite"


def _builder(pid: int = 1) -> NsysExportBuilder:
    b = NsysExportBuilder()
    b.process(pid, "python3")
    b.thread(pid, 1, "main")
    b.domain(1, "specnsys", pid=pid, tid=1)
    return b


def _pp(
    b: NsysExportBuilder, start: int, end: int | None, text: str, pid: int = 1, tid: int = 1
) -> None:
    b.push_pop(start, end, text, pid=pid, tid=tid, domain_id=1)


def _request(b: NsysExportBuilder, start: int, end: int, pid: int = 1) -> None:
    b.start_end(start, end, "request", pid=pid, tid=1, domain_id=1)


def _open(b: NsysExportBuilder, tmp_path: Path, name: str = "t.sqlite") -> specnsys.Trace:
    return specnsys.open(b.write(tmp_path / name))


def _by_phase(pb: PhaseBreakdown) -> dict[str, dict[str, Any]]:
    return {row["phase"]: row for row in pb.frame.iter_rows(named=True)}


def _check_invariants(pb: PhaseBreakdown) -> None:
    f = pb.frame
    assert f["wall_ns"].sum() == pb.window_ns
    assert f["gpu_wall_ns"].sum() == pb.gpu_union_ns
    assert (f["wall_ns"] >= 0).all() and (f["gpu_wall_ns"] >= 0).all()
    assert ((f["share"] >= 0) & (f["share"] <= 1)).all()
    if pb.window_ns:
        assert f["share"].sum() == pytest.approx(1.0)


def test_async_kernel_runs_in_draft_while_cpu_is_in_verify(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 1000)
    _pp(b, 100, 300, "draft")
    _pp(b, 300, 700, "verify")
    b.runtime(150, 160, "cudaLaunchKernel", 1)
    b.kernel(250, 500, "draft_gemm", 1)  # still running after draft ended, while CPU is in verify
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t)
        assert ops.select("op_kind", "phase", "api_start").rows() == [("kernel", "draft", 150)]
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    assert (pb.window_start_ns, pb.window_end_ns) == (0, 1000)
    rows = _by_phase(pb)
    # draft: CPU 100..250 + GPU 250..500; verify: CPU 500..700; rest unannotated
    assert rows["draft"]["wall_ns"] == 400
    assert rows["draft"]["gpu_wall_ns"] == 250 and rows["draft"]["cpu_wall_ns"] == 150
    assert rows["verify"]["wall_ns"] == 200
    assert rows["unannotated"]["wall_ns"] == 400
    assert rows["draft"]["gpu_busy_ns"] == 250
    assert rows["draft"]["kernels"] == 1 and rows["draft"]["launches"] == 1
    assert rows["verify"]["cpu_inclusive_ns"] == 400 and rows["verify"]["cpu_exclusive_ns"] == 400
    assert rows["draft"]["share"] == pytest.approx(0.4)
    assert "unattributed_gpu" not in rows


def test_sync_wait_belongs_to_the_gpu_work_it_waits_for(tmp_path: Path) -> None:
    """The host blocks in ``sync`` while verify's kernels run: that time is verify's (the GPU
    is busy with it); the sync phase owns the copy it launched and the time after the GPU
    finished."""
    b = _builder()
    _request(b, 0, 1000)
    _pp(b, 0, 200, "verify")
    _pp(b, 200, 800, "sync")
    b.runtime(10, 20, "cudaLaunchKernel", 1)
    b.kernel(100, 600, "verify_gemm", 1)
    b.runtime(210, 790, "cudaStreamSynchronize", 2)  # blocks until the GPU drained
    b.runtime(600, 610, "cudaMemcpyAsync", 3)
    b.memcpy(650, 700, 64, 3)  # the token copy, launched in sync
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    rows = _by_phase(pb)
    # verify: CPU 0..100 + GPU 100..600; sync: CPU 600..650, GPU copy 650..700, CPU 700..800
    assert rows["verify"]["wall_ns"] == 600
    assert rows["sync"]["wall_ns"] == 50 + 50 + 100
    assert rows["sync"]["gpu_busy_ns"] == 50
    assert rows["unannotated"]["wall_ns"] == 200
    assert rows["sync"]["cpu_inclusive_ns"] == 600  # the CPU view alone would blame sync


def test_launch_goes_to_the_innermost_open_range(tmp_path: Path) -> None:
    b = _builder()
    _pp(b, 0, 1000, "decode")
    _pp(b, 100, 200, "draft")
    _pp(b, 200, 400, "sample")  # starts exactly when draft ends (half-open ranges)
    _pp(b, 600, 800, "kv")
    _pp(b, 650, 700, "sync")
    _pp(b, 1200, None, "schedule")  # never closed: open to +infinity
    _pp(b, 300, 350, "not-a-phase")  # ignored: not in the vocabulary
    for corr, at in enumerate([250, 200, 400, 150, 660, 700, 1100, 5000, 320], start=1):
        b.runtime(at, at + 5, "cudaLaunchKernel", corr)
        b.kernel(6000 + corr * 10, 6005 + corr * 10, f"k{corr}", corr)
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t).sort("correlation_id")
    assert ops["phase"].to_list() == [
        "sample",
        "sample",
        "decode",
        "draft",
        "sync",
        "kv",
        "unannotated",
        "schedule",
        "sample",
    ]


def test_nested_launch_in_sample_inside_decode(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 100)
    _pp(b, 0, 100, "decode")
    _pp(b, 20, 60, "sample")
    b.runtime(30, 32, "cudaLaunchKernel", 7)
    b.kernel(40, 50, "argmax", 7)
    with _open(b, tmp_path) as t:
        assert gpu_ops_with_phase(t)["phase"].to_list() == ["sample"]
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    rows = _by_phase(pb)
    assert rows["sample"]["wall_ns"] == 40 and rows["sample"]["gpu_wall_ns"] == 10
    assert rows["decode"]["wall_ns"] == 60
    assert rows["decode"]["cpu_inclusive_ns"] == 100 and rows["decode"]["cpu_exclusive_ns"] == 60
    assert rows["sample"]["launches"] == 1 and rows["decode"]["launches"] == 0


def test_overlapping_kernels_of_two_phases_on_two_streams_split_evenly(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 500)
    _pp(b, 0, 50, "draft")
    _pp(b, 50, 100, "verify")
    b.runtime(10, 12, "cudaLaunchKernel", 1)
    b.runtime(60, 62, "cudaLaunchKernel", 2)
    b.kernel(100, 300, "draft_k", 1, stream=7)
    b.kernel(200, 400, "verify_k", 2, stream=8)
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    rows = _by_phase(pb)
    # draft: CPU 50 + GPU 100 alone + 50 (half of 200..300); verify symmetric
    assert rows["draft"]["wall_ns"] == 200 and rows["verify"]["wall_ns"] == 200
    assert rows["draft"]["gpu_busy_ns"] == 200 and rows["verify"]["gpu_busy_ns"] == 200
    assert rows["unannotated"]["wall_ns"] == 100
    assert pb.gpu_union_ns == 300


def test_three_way_split_rounds_to_an_exact_sum(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 20)
    for corr, phase in enumerate(["draft", "verify", "sample"], start=1):
        _pp(b, corr, corr + 1, phase)
        b.runtime(corr, corr + 1, "cudaLaunchKernel", corr)
        b.kernel(10, 20, f"k{corr}", corr, stream=corr)  # 10 ns shared by three phases
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    rows = _by_phase(pb)
    assert sorted(rows[p]["gpu_wall_ns"] for p in ("draft", "verify", "sample")) == [3, 3, 4]
    assert rows["draft"]["gpu_wall_ns"] == 4  # remainder goes to the first phase in order


def test_kernel_without_runtime_row_is_unattributed_gpu(tmp_path: Path) -> None:
    b = _builder()
    b.thread(2, 1, "other")
    _request(b, 0, 100)
    _pp(b, 0, 100, "decode")
    b.runtime(10, 12, "cudaLaunchKernel", 99, pid=2)  # same correlation id, other process
    b.kernel(20, 50, "orphan", 99)
    b.memcpy(60, 70, 64, 98)  # no runtime row at all
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t)
        pb = exclusive_phase_times(t)
    assert ops["phase"].to_list() == ["unattributed_gpu", "unattributed_gpu"]
    assert ops["api_start"].null_count() == 2
    _check_invariants(pb)
    rows = _by_phase(pb)
    assert rows["unattributed_gpu"]["wall_ns"] == 40
    assert (
        rows["unattributed_gpu"]["gpu_busy_ns"] == 40 and rows["unattributed_gpu"]["kernels"] == 1
    )
    assert rows["decode"]["wall_ns"] == 60
    assert pb.frame["phase"].to_list()[-1] == "unattributed_gpu"


@pytest.mark.parametrize("packable", [True, False])
def test_ops_match_their_call_by_process_and_id_whatever_the_ids(
    tmp_path: Path, packable: bool
) -> None:
    """Across processes an op is matched to its call by (pid, correlation id), packed into one
    integer when every call's pair packs (ids in [0, 2**32)). Ids outside that range must
    neither match a wrong call (-2**32 + 5 in process 2 packs like 5 in process 1 would) nor
    be lost: with a call whose id does not pack, the two-column join takes over."""
    b = _builder()
    b.process(2, "worker")
    b.thread(2, 1, "main")
    b.domain(1, "specnsys", pid=2, tid=1)
    _request(b, 0, 100)
    _pp(b, 0, 50, "draft")
    _pp(b, 50, 100, "verify")
    _pp(b, 0, 100, "verify", pid=2)
    b.runtime(10, 12, "cudaLaunchKernel", 5)  # pid 1, draft
    b.runtime(60, 62, "cudaLaunchKernel", 7, pid=2)  # pid 2, verify
    b.kernel(20, 30, "mine", 5)
    b.kernel(30, 40, "other process, id 7", 7, pid=2)
    b.kernel(40, 45, "wrapped id", 5 - (1 << 32), pid=2)  # must not match pid 1's id 5
    if not packable:
        b.runtime(70, 72, "cudaLaunchKernel", (1 << 32) + 9)  # an id no packing can hold
        b.kernel(80, 90, "big id", (1 << 32) + 9)
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t).sort("start")
    want = [("mine", "draft", 10), ("other process, id 7", "verify", 60), ("wrapped id", None, None)]
    if not packable:
        want.append(("big id", "verify", 70))
    got = list(zip(ops["name"], ops["phase"], ops["api_start"], strict=True))
    assert got == [(n, p or "unattributed_gpu", a) for n, p, a in want]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_lean_merge_join_matches_the_ordered_hash_join(tmp_path: Path, seed: int) -> None:
    """The timeline's lean path matches ops to calls by merging both sides sorted by key (an
    as-of join kept only on equal keys); the detailed path by a hash join. On ids that miss
    (between, below and above the calls' ids), NULL ids, ids shared by two calls, a second
    process and a memcpy, both give every op the same phase, with one process and with all
    (the packed key)."""
    import random

    from specnsys.attribution.launch import attributed_gpu_ops, attributed_runtime
    from specnsys.attribution.phase_map import create_phase_index, drop_phase_index
    from specnsys.attribution.rules import default_rules

    rng = random.Random(seed)
    b = _builder()
    b.process(2, "worker")
    b.thread(2, 1, "main")
    b.domain(1, "specnsys", pid=2, tid=1)
    _request(b, 0, 10_000)
    for pid in (1, 2):
        for i in range(20):
            _pp(b, i * 500, i * 500 + 250, "draft" if i % 2 else "verify", pid=pid)
    nulls = []
    for i in range(300):
        pid = rng.choice((1, 2))
        corr = rng.randrange(0, 200)
        start = rng.randrange(0, 9_900)
        if rng.random() < 0.6:
            b.runtime(start, start + 2, "cudaLaunchKernel", corr, pid=pid)
        if rng.random() < 0.05:
            nulls.append(corr + 10_000)  # an id no call has, set NULL below
            corr += 10_000
        if rng.random() < 0.1:
            b.memcpy(start + 5, start + 20, 64, corr, pid=pid)
        else:
            b.kernel(start + 5, start + 20, f"k{i}", corr, pid=pid)
    b.kernel(9_990, 9_995, "above every id", 500)
    path = b.write(tmp_path / "ids.sqlite")
    import sqlite3

    with sqlite3.connect(path) as db:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            db.execute(f"UPDATE {table} SET correlationId = NULL WHERE correlationId >= 10000 "
                       "AND correlationId < 20000")
    assert nulls, "the seed must give a NULL id"
    key = ["op_kind", "start", "end", "phase"]
    with specnsys.open(path, use_cache=False) as t:
        index = create_phase_index(t.connection, default_rules())
        try:
            for only in (1, 2, None):  # one process, or every process
                runtime = attributed_runtime(t, index, only)
                lean = attributed_gpu_ops(t, index, pid=only, runtime=runtime)
                full = attributed_gpu_ops(t, index, pid=only, details=True)
                want = full.select(key).with_columns(pl.col("phase").cast(pl.String)).sort(key)
                got = lean.with_columns(pl.col("phase").cast(pl.String)).sort(key)
                assert got.equals(want), only
                assert want["phase"].n_unique() >= 3, only  # draft, verify, unattributed_gpu
        finally:
            drop_phase_index(t.connection, index)


def test_shared_correlation_id_goes_to_the_earliest_call(tmp_path: Path) -> None:
    """Two API calls of one process with one correlation id (a malformed export): the op
    belongs to the earlier call, once, in both the full and the lean attribution paths."""
    b = _builder()
    _request(b, 0, 100)
    _pp(b, 0, 50, "draft")
    _pp(b, 50, 100, "verify")
    b.runtime(60, 62, "cudaLaunchKernel", 5)  # later, in verify (written first)
    b.runtime(10, 12, "cudaLaunchKernel", 5)  # earlier, in draft
    b.kernel(70, 90, "k", 5)
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t)
        pb = exclusive_phase_times(t)
    assert ops.height == 1 and ops["phase"].to_list() == ["draft"]
    assert ops["api_start"].to_list() == [10]
    rows = _by_phase(pb)
    assert rows["draft"]["kernels"] == 1 and rows["draft"]["gpu_busy_ns"] == 20
    assert rows["verify"]["kernels"] == 0 and rows["verify"]["launches"] == 1
    _check_invariants(pb)


def test_backtrace_duplicate_runtime_row_does_not_double_count(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 100)
    _pp(b, 0, 50, "draft")
    _pp(b, 50, 100, "verify")
    b.runtime(10, 12, "cudaLaunchKernel", 5)
    b.runtime(10, 12, "cudaLaunchKernel", 5, event_class=67)
    b.runtime(60, 62, "cudaLaunchKernel", 5, event_class=67)  # a stray one in verify
    b.kernel(20, 40, "k", 5)
    with _open(b, tmp_path) as t:
        ops = gpu_ops_with_phase(t)
        pb = exclusive_phase_times(t)
    assert ops.height == 1 and ops["phase"].to_list() == ["draft"]
    rows = _by_phase(pb)
    assert rows["draft"]["kernels"] == 1 and rows["draft"]["launches"] == 1
    assert rows["verify"]["launches"] == 0 and rows["draft"]["gpu_busy_ns"] == 20
    _check_invariants(pb)


def test_request_ranges_define_the_window(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 100, 400)
    _request(b, 500, 900)
    _pp(b, 50, 200, "draft")  # starts before the window
    _pp(b, 880, None, "verify")  # never closed
    b.runtime(60, 62, "cudaLaunchKernel", 1)
    b.kernel(850, 950, "k", 1)  # ends after the window
    b.kernel(10, 20, "early", 1)  # entirely before the window: not counted
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    assert (pb.window_start_ns, pb.window_end_ns) == (100, 900)
    _check_invariants(pb)
    rows = _by_phase(pb)
    assert rows["draft"]["cpu_inclusive_ns"] == 100
    assert rows["draft"]["gpu_busy_ns"] == 50 and rows["draft"]["kernels"] == 1
    assert rows["draft"]["wall_ns"] == 100 + 50
    assert rows["verify"]["cpu_inclusive_ns"] == 20 and rows["verify"]["wall_ns"] == 0
    assert rows["unannotated"]["wall_ns"] == 800 - 150
    assert rows["draft"]["launches"] == 0  # launched before the window


def test_window_without_requests_spans_ranges_and_gpu_ops(tmp_path: Path) -> None:
    b = _builder()
    _pp(b, 100, 200, "draft")
    b.runtime(150, 152, "cudaLaunchKernel", 1)
    b.kernel(180, 260, "k", 1)
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    assert (pb.window_start_ns, pb.window_end_ns) == (100, 260)
    _check_invariants(pb)
    assert _by_phase(pb)["draft"]["wall_ns"] == 160


@pytest.mark.parametrize(
    ("requests", "window"),
    [
        ([(100, 400), (500, 300)], (100, 400)),  # one ends before it starts: ignored
        ([(50, 10), (100, 400)], (100, 400)),  # ignored, though it starts first
        ([(100, 400), (500, None)], (100, 1000)),  # one never ends: it runs to the span's end
        ([(100, 1200), (500, None)], (100, 1200)),  # a closed one past every other event
        ([(100, 400), (500, 700)], (100, 700)),  # well-formed: the requests alone
        ([(300, 200), (150, 120)], (0, 0)),  # only backwards requests, nothing else: empty
    ],
)
def test_window_with_malformed_request_ranges(
    tmp_path: Path, requests: list[tuple[int, int | None]], window: tuple[int, int]
) -> None:
    b = _builder()
    for start, end in requests:
        b.start_end(start, end, "request", pid=1, tid=1, domain_id=1)
    if window != (0, 0):
        _pp(b, 120, 380, "draft")
        b.runtime(130, 132, "cudaLaunchKernel", 1)
        b.kernel(900, 1000, "k", 1)  # the last event of the process (but for a request)
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    assert (pb.window_start_ns, pb.window_end_ns) == window
    _check_invariants(pb)


def test_cpu_only_trace(tmp_path: Path) -> None:
    b = _builder()
    _request(b, 0, 100)
    _pp(b, 0, 100, "decode")
    _pp(b, 10, 30, "draft")
    _pp(b, 40, 90, "verify")
    with _open(b, tmp_path) as t:
        assert gpu_ops_with_phase(t).height == 0
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    rows = _by_phase(pb)
    assert [rows[p]["wall_ns"] for p in ("decode", "draft", "verify", "unannotated")] == [
        30,
        20,
        50,
        0,
    ]
    assert pb.gpu_union_ns == 0 and "unattributed_gpu" not in rows


@pytest.mark.skipif(not SAMPLE.exists(), reason="sample trace absent")
def test_real_cpu_only_capture() -> None:
    with specnsys.open(SAMPLE) as t:
        pb = exclusive_phase_times(t)
    _check_invariants(pb)
    assert pb.window_ns > 0
    assert pb.frame["share"].sum() == pytest.approx(1.0)
    rows = _by_phase(pb)
    for phase in ("draft", "verify", "sample", "kv", "sync", "schedule", "prefill"):
        assert rows[phase]["wall_ns"] > 0, phase
    assert pb.frame["gpu_busy_ns"].sum() == 0


# -- property test against a brute-force, per-nanosecond reference -----------------------------

PH = ("decode", "draft", "verify", "sample", "kv", "prefill", "forward")


@st.composite
def _traces(draw: st.DrawFn) -> dict:
    t = 0
    stack: list[tuple[int, str]] = []
    ranges: list[tuple[int, int | None, str]] = []
    for _ in range(draw(st.integers(0, 12))):
        t += draw(st.integers(0, 15))
        if bool(stack) and draw(st.booleans()):  # bool(): no list type context for draw
            start, text = stack.pop()
            ranges.append((start, t, text))
        else:
            stack.append((t, draw(st.sampled_from(PH))))
    close = draw(st.booleans())
    for start, text in reversed(stack):
        t += draw(st.integers(0, 5))
        ranges.append((start, t if close else None, text))
    other = draw(
        st.lists(
            st.tuples(st.integers(0, 150), st.integers(0, 30), st.sampled_from(PH)), max_size=1
        )
    )
    ops = draw(
        st.lists(
            st.tuples(
                st.integers(0, 150),  # launch time
                st.integers(0, 40),  # delay to start
                st.integers(0, 40),  # duration
                st.integers(1, 3),  # stream
                st.sampled_from(["ok", "ok", "missing", "other_tid", "other_pid"]),
                st.sampled_from(["kernel", "memcpy"]),
            ),
            max_size=6,
        )
    )
    req = draw(st.one_of(st.none(), st.tuples(st.integers(0, 100), st.integers(0, 150))))
    return {"ranges": ranges, "other": [(s, s + d, p) for s, d, p in other], "ops": ops, "req": req}


def _innermost(ranges: list[tuple[int, int | None, str]], at: int) -> str | None:
    inside = [(i, r) for i, r in enumerate(ranges) if r[0] <= at and (r[1] is None or at < r[1])]
    if not inside:
        return None
    # properly nested: the innermost has the latest start, then the earliest end; identical
    # intervals nest in row order (the later row inside), as the ingester's depth has it
    nested = sorted(
        inside, key=lambda ir: (ir[1][0], -(ir[1][1] if ir[1][1] is not None else 10**9), ir[0])
    )
    name = nested[-1][1][2]
    # nesting by role (docs/design.md#nesting-by-role): the outermost prefill or draft range
    # open decides what the innermost range's time is
    role = next((r[2] for _i, r in nested if r[2] in ("prefill", "draft_prefill", "draft")), None)
    if role == "draft":
        return "draft"
    if role is not None and name in ("forward", "draft", "verify"):
        return role
    return name


def _reference(
    spec: dict,
) -> tuple[int, int, dict[str, Fraction], list[str], dict[str, int], dict[str, int]]:
    """Per nanosecond of the window: the window, each phase's wall time, the ops' phases, and
    each phase's time as the driver's innermost phase (all of it: ``cpu_exclusive_ns``; with
    the GPU idle: ``cpu_wall_ns``)."""
    main, other = spec["ranges"], spec["other"]
    count = lambda rs: sum(1 for r in rs if r[1] is None or r[1] > r[0])  # noqa: E731
    driver = main if count(main) >= count(other) else other
    if count(driver) == 0:
        driver = []
    ops = []
    for corr, (launch, delay, dur, _stream, how, _kind) in enumerate(spec["ops"], start=1):
        s, e = launch + delay, launch + delay + dur
        if how == "other_pid":
            continue
        if how == "missing":
            phase = "unattributed_gpu"
        else:
            phase = _innermost(main if how == "ok" else other, launch) or "unannotated"
        ops.append((s, e, phase, corr))
    if spec["req"] is not None:
        ws, we = spec["req"][0], spec["req"][0] + spec["req"][1]
    else:
        pts = [r[0] for r in main + other] + [
            r[1] if r[1] is not None else r[0] for r in main + other
        ]
        pts += [p for o in ops for p in o[:2]]
        ws, we = (min(pts), max(pts)) if pts else (0, 0)
    wall: dict[str, Fraction] = {}
    exclusive: dict[str, int] = {}
    cpu_wall: dict[str, int] = {}
    for at in range(ws, we):
        running = {o[2] for o in ops if o[0] <= at < o[1]}
        inner = _innermost(driver, at) or "unannotated"
        exclusive[inner] = exclusive.get(inner, 0) + 1
        if running:
            for p in running:
                wall[p] = wall.get(p, Fraction(0)) + Fraction(1, len(running))
        else:
            wall[inner] = wall.get(inner, Fraction(0)) + 1
            cpu_wall[inner] = cpu_wall.get(inner, 0) + 1
    order = [o[2] for o in sorted(ops, key=lambda o: o[3])]
    return ws, we, wall, order, exclusive, cpu_wall


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=_traces())
def test_property_exclusive_times_sum_to_the_window(tmp_path: Path, spec: dict) -> None:
    b = _builder()
    b.process(2, "other")
    b.thread(1, 2, "worker")
    for s, e, text in spec["ranges"]:
        _pp(b, s, e, text)
    for s, e, text in spec["other"]:
        _pp(b, s, e, text, tid=2)
    if spec["req"] is not None:
        _request(b, spec["req"][0], spec["req"][0] + spec["req"][1])
    for corr, (launch, delay, dur, stream, how, kind) in enumerate(spec["ops"], start=1):
        pid = 2 if how == "other_pid" else 1
        if how != "missing":
            b.runtime(
                launch,
                launch + 1,
                "cudaLaunchKernel",
                corr,
                pid=pid,
                tid=2 if how == "other_tid" else 1,
            )
        s, e = launch + delay, launch + delay + dur
        if kind == "kernel":
            b.kernel(s, e, f"k{corr}", corr, pid=pid, stream=stream)
        else:
            b.memcpy(s, e, 8, corr, pid=pid, stream=stream)
    with _open(b, tmp_path, "prop.sqlite") as t:
        ops = gpu_ops_with_phase(t).filter(pl.col("pid") == 1).sort("correlation_id")
        pb = exclusive_phase_times(t, pid=1)
    ws, we, wall, op_phases, exclusive, cpu_wall = _reference(spec)
    assert ops["phase"].to_list() == op_phases
    assert (pb.window_start_ns, pb.window_end_ns) == (ws, we)
    _check_invariants(pb)
    got = dict(zip(pb.frame["phase"], pb.frame["wall_ns"], strict=True))
    for phase in set(got) | set(wall):
        assert abs(got.get(phase, 0) - wall.get(phase, Fraction(0))) < 1, phase
    for column, expected in (("cpu_exclusive_ns", exclusive), ("cpu_wall_ns", cpu_wall)):
        found = {p: v for p, v in zip(pb.frame["phase"], pb.frame[column], strict=True) if v}
        assert found == expected, column
    busy = {
        at
        for o in spec["ops"]
        if o[4] != "other_pid"
        for at in range(max(ws, o[0] + o[1]), min(we, o[0] + o[1] + o[2]))
    }
    assert pb.gpu_union_ns == len(busy) == pb.frame["gpu_wall_ns"].sum()


def test_breakdown_is_kept_beside_the_cached_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm path: a second analysis of the unchanged export reads the stored breakdown
    (computing nothing); other rules or another export compute afresh."""
    from specnsys.attribution import timeline

    b = _builder()
    _request(b, 0, 1000)
    _pp(b, 100, 300, "draft")
    _pp(b, 300, 700, "verify")
    b.runtime(150, 160, "cudaLaunchKernel_v7000", 1, pid=1, tid=1)
    b.kernel(400, 600, "draft_k", 1, pid=1)
    path = b.write(tmp_path / "t.sqlite")
    with specnsys.open(path) as cold:
        first = exclusive_phase_times(cold)
        assert cold.cache_folder is not None
        stored = list((cold.cache_folder / "derived").glob("phase_breakdown-*.json"))
        assert len(stored) == 1

    def fail(*args: object, **kw: object) -> None:
        raise AssertionError("recomputed although the breakdown was stored")

    with specnsys.open(path) as warm, monkeypatch.context() as m:
        m.setattr(timeline, "_breakdown", fail)
        again = exclusive_phase_times(warm)
        assert again.frame.equals(first.frame)
        assert again.to_dict() == first.to_dict()
        with pytest.raises(AssertionError, match="recomputed"):
            exclusive_phase_times(warm, rules="nvtx")  # other rules: another key
        with pytest.raises(AssertionError, match="recomputed"):
            exclusive_phase_times(warm, pid=2)
    by = _by_phase(first)
    assert by["draft"]["gpu_wall_ns"] == 200 and first.window_ns == 1000
    _pp(b, 800, 900, "sample")  # the export changes: its cache entry (and breakdown) is new
    b.write(path)
    with specnsys.open(path) as changed:
        assert _by_phase(exclusive_phase_times(changed))["sample"]["cpu_wall_ns"] == 100


def test_range_counts_are_the_driver_threads_ranges_starting_in_the_window(
    tmp_path: Path,
) -> None:
    """Per-range times divide by these counts: a phase range counts when it is on the driver
    thread and starts in ``[window start, window end)``, however far it runs; ranges of
    another thread, or starting before or at the window's end, do not."""
    b = _builder()
    b.thread(1, 2, "helper")
    _pp(b, 50, 150, "draft")  # starts before the window, overlaps it: not counted
    _request(b, 100, 1000)
    _pp(b, 100, 200, "draft")  # at the window start
    _pp(b, 300, 400, "draft")
    _pp(b, 320, 350, "sample")  # nested
    _pp(b, 500, None, "verify")  # never closed
    _pp(b, 990, 1200, "verify")  # starts inside, ends after the window
    _pp(b, 1000, 1100, "verify")  # starts at the window end
    for start in (110, 310, 510):  # the helper thread has fewer ranges: not the driver
        _pp(b, start, start + 20, "verify", tid=2)
    with _open(b, tmp_path) as t:
        pb = exclusive_phase_times(t)
    assert (pb.window_start_ns, pb.window_end_ns) == (100, 1000)
    assert pb.driver_global_tid is not None
    # (issue 29) the sample inside a draft is draft work, and the verify ranges after the one
    # that never closed lie inside it: they are part of that one range
    assert pb.range_counts == {"draft": 2, "verify": 1}
    assert PhaseBreakdown.from_dict(pb.to_dict()).range_counts == pb.range_counts


def spec_builder(spec: dict) -> NsysExportBuilder:
    """A trace of one process from a :func:`_traces` spec: its phase ranges, request and GPU
    ops (each launched from the driver thread unless the spec says the launch is missing),
    beside a second, empty process."""
    b = _builder()
    b.process(2, "other")
    for s, e, text in spec["ranges"]:
        _pp(b, s, e, text)
    if spec["req"] is not None:
        _request(b, spec["req"][0], spec["req"][0] + spec["req"][1])
    for corr, (launch, delay, dur, stream, how, _kind) in enumerate(spec["ops"], start=1):
        if how != "missing":
            b.runtime(launch, launch + 1, "cudaLaunchKernel", corr, pid=1, tid=1)
        b.kernel(launch + delay, launch + delay + dur, f"k{corr}", corr, pid=1, stream=stream)
    return b


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(spec=_traces())
def test_property_exclusive_segments_sum_to_the_breakdown(tmp_path: Path, spec: dict) -> None:
    """The exclusive timeline a phase track draws (exclusive_segments) sums, per phase, to
    the breakdown's wall time (within its rounding to integer ns), tiles the window, and
    never has a negative length. exclusive_slices (what an export's phase tracks draw, merged
    on codes) is those segments with adjacent ones of one phase and split merged, by phase
    name then start; the same whether it reads the ops itself or is handed the export's
    attributed ops (names, devices and streams)."""
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.launch import attributed_gpu_ops, rules_for
    from specnsys.attribution.timeline import exclusive_segments, exclusive_slices
    from specnsys.vocabulary import DOMAIN, PHASES

    b = spec_builder(spec)
    b.thread(1, 2, "worker")
    with _open(b, tmp_path, "seg.sqlite") as t:
        pb = exclusive_phase_times(t, pid=1)
        seg = exclusive_segments(t, pid=1)
        with AttributionContext(t, rules_for(PHASES, DOMAIN, None)) as context:
            own = exclusive_slices(t, pb, context)
            span = (pb.window_start_ns, pb.window_end_ns)
            ops = attributed_gpu_ops(
                t, context.phase_index(), pid=1, window=span, names=True, streams=True
            )
            handed = exclusive_slices(t, pb, context, ops)
    expected = _merged_by_hand(seg)
    assert own.rows() == expected and handed.rows() == expected
    assert (seg["end"] >= seg["start"]).all()
    got = seg.group_by("phase").agg(((pl.col("end") - pl.col("start")) * pl.col("share")).sum())
    walls = dict(zip(pb.frame["phase"], pb.frame["wall_ns"], strict=True))
    for phase, total in got.iter_rows():
        assert abs(total - walls[phase]) < 1 + 1e-6, (phase, total, walls)
    assert sum(walls.values()) == pb.window_ns
    covered = seg.select(((pl.col("end") - pl.col("start")) * pl.col("share")).sum()).item()
    assert covered == pytest.approx(pb.window_ns, abs=1e-6 * max(1, pb.window_ns))


def _merged_by_hand(seg: pl.DataFrame) -> list[tuple[str, int, int, int]]:
    """exclusive_segments' rows merged the slow way: per phase by start, a segment that starts
    where the last slice ended with the same split extends it."""
    out: list[list[Any]] = []
    for phase, start, end, share in sorted(
        seg.select("phase", "start", "end", "share").iter_rows(), key=lambda r: (r[0], r[1])
    ):
        sharing = round(1 / share)
        last = out[-1] if out else None
        if last is not None and (last[0], last[2], last[3]) == (phase, start, sharing):
            last[2] = end
        else:
            out.append([phase, start, end, sharing])
    return [tuple(x) for x in out]


@pytest.mark.parametrize("unit", [1, 2**56], ids=["ns", "a window of 2**60 ns"])
def test_exclusive_slices_order_with_one_key_and_two(tmp_path: Path, unit: int) -> None:
    """The slices are ordered by one integer key (phase rank x window + start) where it fits
    in 62 bits, else by the two columns: a window of 2**60 ns with four phases takes the
    second way; both give the segments merged by hand (two phases sharing the GPU, an idle
    gap, a kernel outside every range)."""
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.launch import rules_for
    from specnsys.attribution.timeline import exclusive_segments, exclusive_slices
    from specnsys.vocabulary import DOMAIN, PHASES

    b = _builder()
    _request(b, 0, 16 * unit)
    _pp(b, 0, 8 * unit, "draft")
    _pp(b, 8 * unit, 12 * unit, "verify")
    _pp(b, 12 * unit, 16 * unit, "sample")
    for c, (launch, start, end, stream) in enumerate(
        [(1, 2, 9, 1), (8, 9, 11, 2), (13, 14, 15, 1)], start=1
    ):
        b.runtime(launch * unit, launch * unit + 1, "cudaLaunchKernel", c, pid=1, tid=1)
        b.kernel(start * unit, end * unit, f"k{c}", c, pid=1, stream=stream)
    b.kernel(5 * unit, 6 * unit, "orphan", 99, pid=1, stream=3)
    with _open(b, tmp_path) as t:
        seg = exclusive_segments(t, pid=1)
        with AttributionContext(t, rules_for(PHASES, DOMAIN, None)) as context:
            pb = exclusive_phase_times(t, pid=1, context=context)
            slices = exclusive_slices(t, pb, context)
    assert slices.rows() == _merged_by_hand(seg)
    assert {r[3] for r in slices.rows()} == {1, 2} and len({r[0] for r in slices.rows()}) >= 4
