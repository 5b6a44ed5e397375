"""What is wrong inside a step: why a phase's GPU is idle, and the expert-rule findings.

The phase breakdown says how long each phase took; users act on *why*. Over the window, for
the analysed process (docs/design.md#findings):

**GPU idle inside each phase.** Every instant the process's GPU runs nothing belongs, as in
the breakdown, to the innermost phase open on the driver thread; it is split by what the
host was doing:

* ``dependency_ns`` -- work was already submitted but had not started (its launch call had
  returned and the op was still queued: it waits on another stream, an event or a copy);
* ``sync_wait_ns`` -- nothing queued, and a synchronizing API call (``*Synchronize``) was in
  flight on a thread of the process: the host waits for the device instead of feeding it;
  per call name in ``sync_calls``;
* ``host_wait_ns`` -- nothing queued and no synchronization: the host had not submitted the
  next work yet, or was still inside the call submitting it (a launch-bound phase).

**Findings**, each with its time, its share of the phase, where it happens and the run's
speedup if that time went away (``W / (W - x)``), listed when they are at least
:data:`FLOOR` of the window:

* ``sync_wait``: GPU idle while a named synchronizing call blocks the host;
* ``launch_bound``: a phase whose GPU work leaves the GPU idle for host waits more than
  half of the phase's time;
* ``sync_memcpy``: copies issued by a synchronous ``cudaMemcpy*`` (not ``*Async``): the
  host time of those calls;
* ``pageable_memcpy``: copies from or to pageable host memory (a staged, synchronous copy
  whatever the API): their GPU time;
* ``launch_storm``: kernels shorter than the call that launched them (at least
  :data:`STORM_KERNELS` of them, the majority of the phase's kernels): the launch calls'
  host time (CUDA graphs or fused kernels remove most of it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.context import attribution_context
from specnsys.attribution.intervals import islands_frame
from specnsys.attribution.launch import OP_KIND, UNANNOTATED
from specnsys.attribution.phase_map import lookup_phase
from specnsys.ingest.keys import all_distinct
from specnsys.metrics.events import Scope
from specnsys.results import to_dict
from specnsys.vocabulary import API_CALL_EVENT_CLASSES, LAUNCH_NAME_PATTERN

if TYPE_CHECKING:
    from specnsys.attribution.phase_map import PhaseIndex
    from specnsys.ingest import Trace

__all__ = ["FLOOR", "Finding", "IdleSplit", "findings_of"]

#: Smallest finding listed, as a share of the window.
FLOOR = 0.005
#: Fewest too-short kernels of one phase that make a launch storm.
STORM_KERNELS = 32
#: A synchronizing API call: the host blocks until the device (or a stream/event) is done.
SYNC_CALL_PATTERN = r"(?i)synchronize"
#: A copy call (``cudaMemcpy``, ``cuMemcpyDtoH_v2``...); those matching
#: :data:`ASYNC_PATTERN` too do not block the host.
MEMCPY_CALL_PATTERN = r"(?i)^(cuda|cu)memcpy"
ASYNC_PATTERN = r"(?i)async"

_I64 = pl.Int64


@dataclass(frozen=True)
class IdleSplit:
    """GPU idle time of one phase (ns) and what the host did meanwhile (module docs)."""

    idle_ns: int
    host_wait_ns: int
    sync_wait_ns: int
    dependency_ns: int
    sync_calls: dict[str, int]


@dataclass(frozen=True)
class Finding:
    """One finding: its ``kind``, ``phase``, ``what`` (API call or kernel, when one), the
    time it costs (``time_ns``), that time as a share of the phase (of the phase's figure
    ``share_of_phase_of`` names: ``wall_ns`` for GPU idle time, ``gpu_busy_ns`` for copy time,
    ``cpu_inclusive_ns`` for host call time; None where that figure is 0 or smaller than
    the time, e.g. calls on another thread than the phase's ranges) and of the window, how
    often it happens (``count``) and the run's speedup without that time."""

    kind: str
    phase: str
    what: str | None
    time_ns: int
    share_of_phase: float | None
    share_of_phase_of: str
    share_of_window: float
    count: int
    speedup_if_removed: float
    text: str


def _ops(trace: Trace, scope: Scope) -> pl.DataFrame:
    """The process's GPU ops overlapping the window, with their launching call (the
    earliest API call of the id, as launch attribution takes it).

    Polars over the model's scans, the filters pushed into them; a DuckDB query of the same
    (a hash aggregate of every call, then a hash join, both converted to Polars) took 3.7 s
    of a 5 s ``findings_of`` on the 2M-kernel bench export
    (docs/performance.md#attribution-and-metrics)."""
    ws, we = scope.start_ns, scope.end_ns
    mine = pl.lit(False) if scope.pid is None else pl.col("pid") == scope.pid
    in_window = (pl.col("end") > ws) & (pl.col("start") < we) & (pl.col("end") > pl.col("start"))
    # Millions of rows: the kind and the names are categorical (a few bytes a row, where a
    # string column costs 16 even when NULL); the ops' own names are not read.

    def part(table: str, kind: str, pageable: pl.Expr, nbytes: pl.Expr) -> pl.LazyFrame:
        return trace.table(table).filter(mine & in_window).select(
            pl.lit(kind, OP_KIND).alias("kind"), pl.col("start").cast(_I64),
            pl.col("end").cast(_I64), pl.col("correlation_id").cast(_I64).alias("c"),
            pageable.fill_null(False).alias("pageable"), nbytes.cast(_I64).alias("bytes"),
        )  # fmt: skip

    # a copy from or to pageable host memory: one flag, not the two memory kinds per op
    pageable = (pl.col("src_kind") == "pageable") | (pl.col("dst_kind") == "pageable")
    ops = pl.concat([
        part("kernels", "kernel", pl.lit(False), pl.lit(None, _I64)),
        part("memcpy", "memcpy", pageable, pl.col("bytes")),
        part("memset", "memset", pl.lit(False), pl.col("bytes")),
        part("graphs", "graph", pl.lit(False), pl.lit(None, _I64)),
    ])  # fmt: skip
    # Streamed, the calls read lazily: the join never holds the op parts, the calls and its
    # output whole at once (3.4-3.7 GB at 20M kernels with both sides collected, 2.6 GB so).
    return ops.join(_launch_calls(trace, mine), on="c", how="left").select(
        "kind", "start", "end", "pageable", "bytes",
        "api_start", "api_end", "api_name", "api_gtid",
    ).collect(engine="streaming")  # fmt: skip


def _launch_calls(trace: Trace, mine: pl.Expr) -> pl.LazyFrame:
    """Per correlation id ``c`` of the process's API calls: the earliest call's start, and
    the end, name and thread of its earliest call that has one (SQL's ``min`` and
    ``arg_min``, which skip NULLs); lazy, to be read in its join's plan."""
    calls = (
        trace.table("runtime")
        .filter(
            mine
            & pl.col("event_class").is_in(list(API_CALL_EVENT_CLASSES))
            & ~pl.col("is_backtrace").fill_null(False)
            & pl.col("correlation_id").is_not_null()
            & pl.col("start").is_not_null()
        )
        .select(
            pl.col("correlation_id").cast(_I64).alias("c"),
            pl.col("start").cast(_I64).alias("api_start"),
            pl.col("end").cast(_I64).alias("api_end"),
            pl.col("name").cast(pl.Categorical).alias("api_name"),
            pl.col("global_tid").cast(_I64).alias("api_gtid"),
        )
    )
    if all_distinct(calls, "c"):  # one call per id (the usual): nothing to pick
        return calls
    return calls.group_by("c").agg(
        pl.col("api_start").min(),
        *(
            pl.col(c).sort_by("api_start").drop_nulls().first()
            for c in ("api_end", "api_name", "api_gtid")
        ),
    )


def _sync_calls(trace: Trace, scope: Scope) -> pl.DataFrame:
    """The process's synchronizing API calls overlapping the window, by start. A few
    distinct call names over millions of calls: the regex runs on each name once (DuckDB's
    ``regexp_matches`` on every call cost 0.5 s of ``findings_of`` at 2M calls)."""
    ws, we = scope.start_ns, scope.end_ns
    runtime = trace.table("runtime")
    names = runtime.select(pl.col("name").cast(pl.String).unique()).collect()["name"]
    syncs = names.drop_nulls().filter(names.drop_nulls().str.contains(SYNC_CALL_PATTERN))
    mine = pl.lit(False) if scope.pid is None else pl.col("pid") == scope.pid
    return (
        runtime.filter(
            mine
            & pl.col("event_class").is_in(list(API_CALL_EVENT_CLASSES))
            & ~pl.col("is_backtrace").fill_null(False)
            & pl.col("name").cast(pl.String).is_in(syncs.implode())
            & (pl.col("end") > ws) & (pl.col("start") < we) & (pl.col("end") > pl.col("start"))
        )
        .select(pl.col("start").cast(_I64), pl.col("end").cast(_I64),
                pl.col("name").cast(pl.String))
        .sort("start")
        .collect()
    )  # fmt: skip


#: The sweep's running counts: ops running, ops queued, syncs in flight.
_DELTAS = ("db", "dp", "ds")


def _bounds(frame: pl.LazyFrame, s: str, e: str, delta: str, ws: int, we: int) -> pl.LazyFrame:
    """+1 at each interval's start and -1 at its end, in column *delta* (clipped to the
    window; empty intervals dropped)."""
    clipped = frame.select(
        pl.max_horizontal(pl.col(s), pl.lit(ws)).cast(_I64).alias("a"),
        pl.min_horizontal(pl.col(e), pl.lit(we)).cast(_I64).alias("b"),
    ).filter(pl.col("a") < pl.col("b"))
    zero = {d: pl.lit(0, pl.Int8) for d in _DELTAS if d != delta}
    return pl.concat([
        clipped.select(pl.col("a").alias("t"), pl.lit(1, pl.Int8).alias(delta), **zero),
        clipped.select(pl.col("b").alias("t"), pl.lit(-1, pl.Int8).alias(delta), **zero),
    ]).select("t", *_DELTAS, pl.lit(None, _I64).alias("tm"))  # fmt: skip


def _idle_segments(
    ops: pl.DataFrame, syncs: pl.DataFrame, driver_times: pl.Series, ws: int, we: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The window's GPU idle time, swept boundary by boundary: per span between two of the
    driver's change points (``span``: the time of the one that opens it) and per ``cls``
    (dependency, sync or host), the idle ``len`` and its first instant ``t``; and every sync
    segment (``t, len, span``), to be named after its call.

    The phase is constant inside a span (every change point of the driver inside the window
    is a mark, and a range's end is one), so the phase is looked up once per span, not once
    per segment (2.5M idle segments on the 2M-kernel bench export).

    The ops running and the ops submitted but not started are each merged into islands
    first, one kind at a time: only whether any op runs or waits matters, so a million
    back-to-back kernels are one busy island, not two million boundaries. The synchronizing
    calls stay one by one: a segment is named after the call in flight at its start. The
    sweep then runs chunk by chunk of :data:`SWEEP_CHUNK` islands, cut at the driver's
    change points: no segment crosses a cut, so the chunks' rows are the whole sweep's, and
    its memory is a chunk's, not the trace's (the peak of the 20M-kernel analysis;
    docs/performance.md#issue-35-third-session-the-findings-in-chunks)."""
    # submitted (its launch call returned) but not started: it waits on something else
    lazy_ops = ops.lazy()
    pending = lazy_ops.filter(
        pl.col("api_end").is_not_null() & (pl.col("api_end") < pl.col("start"))
    )

    def clipped(frame: pl.LazyFrame, s: str, e: str, which: int) -> pl.LazyFrame:
        return frame.select(
            pl.lit(which, pl.Int8).alias("which"),
            pl.max_horizontal(pl.col(s), pl.lit(ws)).cast(_I64).alias("s"),
            pl.min_horizontal(pl.col(e), pl.lit(we)).cast(_I64).alias("e"),
        ).filter(pl.col("s") < pl.col("e"))

    # one kind at a time: a sort of the running ops, then one of the queued ones
    busy, queued = (
        islands_frame(clipped(intervals, s, e, w), "which").select("a", "b").sort("a")
        for intervals, s, e, w in ((lazy_ops, "start", "end", 0), (pending, "api_end", "start", 1))
    )
    inside = driver_times.filter((driver_times > ws) & (driver_times < we)).cast(_I64)
    marks = pl.concat([pl.Series([ws], dtype=_I64), inside.unique().sort()])
    parts = [
        _sweep(
            (c0, c1),
            [_overlapping(busy, c0, c1), _overlapping(queued, c0, c1)],
            syncs.lazy().filter((pl.col("start") < c1) & (pl.col("end") > c0)),
            _between(marks, c0, c1),
        )
        for c0, c1 in itertools.pairwise(_cuts(busy["a"], marks, we))
    ]
    return pl.concat([p[0] for p in parts]), pl.concat([p[1] for p in parts])


#: Busy islands per chunk of the idle sweep (see :func:`_idle_segments`).
SWEEP_CHUNK = 1_000_000


def _cuts(starts: pl.Series, marks: pl.Series, we: int) -> list[int]:
    """The chunks' bounds: the window's start (the first mark), then the first mark at or
    after every :data:`SWEEP_CHUNK`-th island start, then the window's end."""
    cuts = [int(marks[0])]
    for i in range(SWEEP_CHUNK, starts.len(), SWEEP_CHUNK):
        at = int(marks.search_sorted(starts[i], side="left"))
        if at < marks.len() and int(marks[at]) > cuts[-1]:
            cuts.append(int(marks[at]))
    return [*cuts, we]


def _between(marks: pl.Series, c0: int, c1: int) -> pl.Series:
    """The sorted *marks* in ``[c0, c1)``, as a slice."""
    first = int(marks.search_sorted(c0, side="left"))
    return marks.slice(first, int(marks.search_sorted(c1, side="left")) - first)


def _overlapping(islands: pl.DataFrame, c0: int, c1: int) -> pl.LazyFrame:
    """The islands (``a, b``, disjoint, by ``a``) overlapping ``[c0, c1)``: a slice, the one
    that opened before ``c0`` included."""
    first = max(int(islands["a"].search_sorted(c0, side="left")) - 1, 0)
    last = int(islands["a"].search_sorted(c1, side="left"))
    return islands.slice(first, max(last - first, 0)).lazy()


def _sweep(
    chunk: tuple[int, int], islands: list[pl.LazyFrame], syncs: pl.LazyFrame,
    marks: pl.Series,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """:func:`_idle_segments`'s two frames for one chunk ``[c0, c1)`` (its first mark at
    ``c0``): busy and queued *islands*, the *syncs* and the driver's *marks* in it."""
    c0, c1 = chunk
    mark_rows = marks.cast(_I64).alias("t").to_frame().lazy().with_columns(
        *(pl.lit(0, pl.Int8).alias(d) for d in _DELTAS), pl.col("t").alias("tm")
    )  # fmt: skip
    end = pl.DataFrame({"t": [c1]}, schema={"t": _I64}).lazy().with_columns(
        *(pl.lit(0, pl.Int8).alias(d) for d in _DELTAS), pl.lit(None, _I64).alias("tm")
    )  # fmt: skip
    busy, queued = islands
    bounds = pl.concat([
        _bounds(busy, "a", "b", "db", c0, c1),
        _bounds(queued, "a", "b", "dp", c0, c1),
        _bounds(syncs, "start", "end", "ds", c0, c1),
        mark_rows,
        end,
    ])  # fmt: skip
    last = (pl.col("t") != pl.col("t").shift(-1)).fill_null(True)
    seg = (
        bounds.sort("t")
        .with_columns(*(pl.col(d).cum_sum() for d in _DELTAS), pl.col("tm").forward_fill())
        .filter(last)
        .with_columns((pl.col("t").shift(-1) - pl.col("t")).fill_null(0).alias("len"))
        .filter((pl.col("len") > 0) & (pl.col("db") == 0) & (pl.col("t") >= c0) & (pl.col("t") < c1))
        .select(
            "t", "len", pl.col("tm").set_sorted().alias("span"),
            # a code per segment (strings on a million rows cost more than the sweep)
            pl.when(pl.col("dp") > 0).then(pl.lit(_DEPENDENCY, pl.Int8))
            .when(pl.col("ds") > 0).then(pl.lit(_SYNC, pl.Int8))
            .otherwise(pl.lit(_HOST, pl.Int8)).alias("cls"),
        )
        .collect()
    )  # fmt: skip
    # by span (sorted: the sweep runs in time order), each class's time a column of its own
    per_span = seg.group_by("span", maintain_order=True).agg(
        pl.col("t").min(),
        *(pl.col("len").filter(pl.col("cls") == code).sum().alias(name)
          for code, name in _CLASSES.items()),
    )  # fmt: skip
    return per_span, seg.filter(pl.col("cls") == _SYNC).select("t", "len", "span")


#: The idle classes' codes in the sweep, and their names.
_HOST, _SYNC, _DEPENDENCY = 0, 1, 2
_CLASSES = {_HOST: "host", _SYNC: "sync", _DEPENDENCY: "dependency"}


def idle_by_phase(
    trace: Trace, scope: Scope, index: PhaseIndex, ops: pl.DataFrame
) -> dict[str, IdleSplit]:
    """Per phase, its GPU idle time split by cause (module docs), from the process's *ops*
    (:func:`_ops`'s ``start, end, api_end``)."""
    syncs = _sync_calls(trace, scope)
    # no driver thread (a trace without phase ranges): no change point, all idle time is
    # unannotated (a comparison with None would select the same nothing, with a warning)
    points = (
        index.change_points.clear()
        if scope.driver_gtid is None
        else index.change_points.filter(pl.col("gtid") == scope.driver_gtid)
    )
    spans, sync_segments = _idle_segments(ops, syncs, points["t"], scope.start_ns, scope.end_ns)
    spans = lookup_phase(spans, points, t="t", gtid=None).with_columns(
        pl.col("phase").cast(pl.String).fill_null(UNANNOTATED)
    )
    named = sync_segments.sort("t").join_asof(
        syncs.select(pl.col("start").cast(_I64), pl.col("end").alias("_until"), "name").sort("start"),
        left_on="t", right_on="start", strategy="backward",
    ).filter(pl.col("t") < pl.col("_until")).join(
        spans.select("span", "phase").unique("span"), on="span", how="left"
    )  # fmt: skip
    by_call = named.group_by("phase", "name").agg(pl.col("len").sum())
    totals = spans.group_by("phase").agg(pl.col(name).sum() for name in _CLASSES.values())
    split: dict[str, IdleSplit] = {}
    for row in totals.sort("phase").iter_rows(named=True):
        phase = row["phase"]
        mine = {name: row[name] for name in _CLASSES.values() if row[name]}
        # largest first, equal times by name: the same order on every run
        calls = by_call.filter(pl.col("phase") == phase).sort(
            ["len", "name"], descending=[True, False]
        )
        split[phase] = IdleSplit(
            idle_ns=int(sum(mine.values())),
            host_wait_ns=int(mine.get("host", 0)),
            sync_wait_ns=int(mine.get("sync", 0)),
            dependency_ns=int(mine.get("dependency", 0)),
            sync_calls={str(n): int(v) for n, v in calls.select("name", "len").iter_rows()},
        )
    return split


#: Which figure of its phase each kind of finding is a share of (see :class:`Finding`).
SHARE_OF = {
    "sync_wait": "wall_ns",
    "launch_bound": "wall_ns",
    "pageable_memcpy": "gpu_busy_ns",
    "sync_memcpy": "cpu_inclusive_ns",
    "launch_storm": "cpu_inclusive_ns",
}


def _finding(
    kind: str, phase: str, what: str | None, time_ns: int, count: int, text: str,
    figures: dict[str, dict[str, int]], window: int,
) -> Finding:  # fmt: skip
    of = SHARE_OF[kind]
    base = figures.get(phase, {}).get(of, 0)
    rest = window - time_ns
    return Finding(
        kind, phase, what, time_ns, time_ns / base if base >= time_ns > 0 else None, of,
        time_ns / window, count, window / rest if rest > 0 else float("inf"), text,
    )  # fmt: skip


#: Columns of :func:`_launched_summary`: per group of launched ops, their count and sums.
LAUNCHED_GROUPS = ("phase", "kind", "api_name", "pageable", "short")


def _launched_summary(
    ops: pl.DataFrame, points: pl.DataFrame, window_of: tuple[int, int]
) -> pl.DataFrame:
    """The launched ops of *ops* (those with a launching call) grouped by
    :data:`LAUNCHED_GROUPS`: the phase of their launching call (the innermost phase on its
    thread), their kind and call name, whether they copy pageable memory and whether they ran
    shorter than their launch call; with ``n`` (ops), ``api_ns`` (their calls' time in the
    window), ``op_ns`` (their own time in the window) and ``bytes``.

    Every finding below is a sum over such groups: the per-op frame is narrowed to what the
    sums need before the phase look-up sorts it, and never held with its phase (a copy of
    every op's columns: the findings' peak on the 2M-kernel bench export,
    docs/performance.md#issue-35-third-session-the-findings-in-chunks)."""
    sums = ("n", "api_ns", "op_ns", "bytes")
    one_thread = points["gtid"].n_unique() <= 1
    parts = []
    # A slice of the ops at a time: the look-up sorts and joins its rows, and a slice's copies
    # are what is held, not the trace's (the sums add up across slices).
    for offset in range(0, max(ops.height, 1), SUMMARY_CHUNK):
        narrow = ops.slice(offset, SUMMARY_CHUNK).lazy().filter(
            pl.col("api_start").is_not_null()
        ).select(
            "api_start", pl.col("api_gtid").alias("gtid_"), "kind", "api_name",
            "pageable",
            ((pl.col("end") - pl.col("start")) < (pl.col("api_end") - pl.col("api_start")))
            .fill_null(False).alias("short"),
            _clipped("api_start", "api_end", window_of).alias("api_ns"),
            _clipped("start", "end", window_of).alias("op_ns"),
            "bytes",
        ).collect()  # fmt: skip
        lo, hi = narrow.select(
            pl.col("api_start").min().alias("lo"), pl.col("api_start").max().alias("hi")
        ).row(0)
        near = _points_between(points, lo, hi, one_thread=one_thread)
        phased = lookup_phase(narrow, near, t="api_start", gtid="gtid_")
        parts.append(phased.group_by(LAUNCHED_GROUPS).agg(
            pl.len().alias("n"), *(pl.col(c).sum() for c in sums[1:])
        ))  # fmt: skip
    return (
        pl.concat(parts)
        .with_columns(pl.col("phase").cast(pl.String).fill_null(UNANNOTATED))
        .group_by(LAUNCHED_GROUPS)
        .agg(pl.col(c).sum() for c in sums)
    )


def _points_between(
    points: pl.DataFrame, lo: int | None, hi: int | None, *, one_thread: bool
) -> pl.DataFrame:
    """The change points that a look-up of calls started in ``[lo, hi]`` can land on: per
    thread, from its last point at or before *lo* to *hi*. A slice's calls span a stretch of
    the trace; the look-up's join otherwise copies every point of the trace for each slice
    (8.8M at 20M kernels: the findings' peak). *one_thread*: the points are one thread's."""
    if lo is None or hi is None:
        return points.clear()
    if one_thread:  # the usual: a slice of the sorted points
        times = points["t"]
        first = max(int(times.search_sorted(lo, side="right")) - 1, 0)
        return points.slice(first, int(times.search_sorted(hi, side="right")) - first)
    upto = points.lazy().filter(pl.col("t") <= hi)
    start = upto.filter(pl.col("t") <= lo).group_by("gtid").agg(pl.col("t").max().alias("_from"))
    return (
        upto.join(start, on="gtid", how="left", maintain_order="left")
        .filter(pl.col("_from").is_null() | (pl.col("t") >= pl.col("_from")))
        .drop("_from")
        .collect()
    )


#: Ops per slice of :func:`_launched_summary`.
SUMMARY_CHUNK = 250_000


def findings_of(trace: Trace, scope: Scope, figures: dict[str, dict[str, int]]) -> dict[str, object]:
    """The idle split per phase and the findings of the window (module docs), as JSON:
    ``idle_by_phase``, ``findings`` (largest first), ``floor`` and what shares are of.
    *figures*: per phase its ``wall_ns``, ``gpu_busy_ns`` and ``cpu_inclusive_ns``."""
    with attribution_context(trace, scope.rules, scope.context) as shared:
        return _findings(trace, scope, shared.phase_index(), figures)


def _findings(
    trace: Trace, scope: Scope, index: PhaseIndex, figures: dict[str, dict[str, int]]
) -> dict[str, object]:
    window = scope.end_ns - scope.start_ns
    span = (scope.start_ns, scope.end_ns)
    ops = _ops(trace, scope)
    # each launched op's phase, looked up once and summed for the three uses below; then
    # the idle sweep holds only the three columns it reads (a third of the ops' memory)
    launched = _launched_summary(ops, index.change_points, span)
    launching = set(launched["phase"].unique().to_list())
    ops = ops.select("start", "end", "api_end")
    split = idle_by_phase(trace, scope, index, ops)
    del ops
    floor = FLOOR * window
    found: list[Finding] = []
    for phase, s in split.items():
        for name, ns in s.sync_calls.items():
            if ns >= floor:
                found.append(_finding(
                    "sync_wait", phase, name, ns, 1,
                    f"GPU idle {ns / 1e6:.3f} ms in {phase} while {name} blocks the host",
                    figures, window,
                ))  # fmt: skip
        wall = figures.get(phase, {}).get("wall_ns", 0)
        busy_phase = phase in launching
        if busy_phase and s.host_wait_ns >= floor and wall and s.host_wait_ns > wall / 2:
            found.append(_finding(
                "launch_bound", phase, None, s.host_wait_ns, 1,
                f"{phase} leaves the GPU idle {s.host_wait_ns / wall:.0%} of its time with nothing "
                "queued: launch-bound (fewer, larger or graph-captured launches)",
                figures, window,
            ))  # fmt: skip
    found += _copy_findings(launched, figures, window, floor)
    found += _storm_findings(launched, figures, window, floor)
    found.sort(key=lambda f: (-f.time_ns, f.kind, f.phase, f.what or ""))
    return {
        "idle_by_phase": {p: to_dict(s) for p, s in split.items()},
        "findings": [to_dict(f) for f in found],
        "floor": FLOOR,
        "shares_of": "share_of_phase: of the phase's figure share_of_phase_of names; "
        "share_of_window: of window_ns",
    }


def _clipped(s: str, e: str, window_of: tuple[int, int]) -> pl.Expr:
    """The part of ``[s, e)`` inside the window (0 when outside)."""
    ws, we = window_of
    span = pl.min_horizontal(pl.col(e), pl.lit(we)) - pl.max_horizontal(pl.col(s), pl.lit(ws))
    return pl.max_horizontal(span, pl.lit(0))


def _copy_findings(
    launched: pl.DataFrame, figures: dict[str, dict[str, int]], window: int, floor: float,
) -> list[Finding]:  # fmt: skip
    """The copy findings, from the launched ops' sums (:func:`_launched_summary`)."""
    copies = launched.filter(pl.col("kind") == "memcpy")
    out = []
    sync = (
        copies.filter(
            pl.col("api_name").cast(pl.String).str.contains(MEMCPY_CALL_PATTERN)
            & ~pl.col("api_name").cast(pl.String).str.contains(ASYNC_PATTERN)
        )
        .group_by("phase", "api_name")
        .agg(pl.col("n").sum(), pl.col("api_ns").sum().alias("ns"))
    )
    for phase, name, n, ns in sync.iter_rows():
        if ns >= floor:
            out.append(_finding(
                "sync_memcpy", phase, name, int(ns), int(n),
                f"{n} synchronous {name} calls in {phase} block the host {ns / 1e6:.3f} ms "
                "(cudaMemcpyAsync on a pinned buffer overlaps them)",
                figures, window,
            ))  # fmt: skip
    pageable = (
        copies.filter(pl.col("pageable"))
        .group_by("phase")
        .agg(pl.col("n").sum(), pl.col("op_ns").sum().alias("ns"), pl.col("bytes").sum())
    )
    for phase, n, ns, nbytes in pageable.iter_rows():
        if ns >= floor:
            out.append(_finding(
                "pageable_memcpy", phase, None, int(ns), int(n),
                f"{n} copies of pageable host memory in {phase} ({(nbytes or 0) / 1e6:.1f} MB, "
                f"{ns / 1e6:.3f} ms of GPU time): staged and synchronous; pin the buffer",
                figures, window,
            ))  # fmt: skip
    return out


def _storm_findings(
    launched: pl.DataFrame, figures: dict[str, dict[str, int]], window: int, floor: float,
) -> list[Finding]:  # fmt: skip
    """The launch storms, from the launched ops' sums (:func:`_launched_summary`)."""
    # a few distinct call names: the regex runs on each name once
    names = launched["api_name"].unique().drop_nulls().cast(pl.String)
    launches = names.filter(names.str.contains(LAUNCH_NAME_PATTERN))
    kernels = launched.filter(
        (pl.col("kind") == "kernel") & pl.col("api_name").is_in(launches.implode())
    )
    storms = kernels.group_by("phase").agg(
        pl.col("n").sum().alias("kernels"),
        pl.col("n").filter(pl.col("short")).sum().alias("short"),
        pl.col("api_ns").filter(pl.col("short")).sum().alias("launch_ns"),
    )
    out = []
    for phase, total, n, ns in storms.iter_rows():
        if n >= STORM_KERNELS and n * 2 > total and (ns or 0) >= floor:
            out.append(_finding(
                "launch_storm", phase, None, int(ns), int(n),
                f"{n} of {phase}'s {total} kernels run shorter than their launch: "
                f"{ns / 1e6:.3f} ms of launch calls (CUDA graphs or fused kernels)",
                figures, window,
            ))  # fmt: skip
    return out
