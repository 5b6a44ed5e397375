"""What a timeline export draws (``specnsys export --format perfetto``), computed once.

:func:`timeline_export` gathers, for the analyzed process over its analysis window (the same
process, driver thread and window as ``phases``), every row the trace-event renderer
(:mod:`specnsys.render.perfetto`) turns into one event, so that the renderer only maps rows to
events and the event count is known before anything is rendered:

* ``phases``: the exclusive phase timeline (:func:`~specnsys.attribution.timeline.
  exclusive_slices`), adjacent segments of one phase *and the same split* merged into one
  slice: ``phase, start, end, sharing`` (``sharing`` = *n*, the number of phases whose GPU work
  ran at once, so the slice carries ``1 / n`` of its length; 1 while the GPU was idle). Per
  phase, ``sum((end - start) / sharing)`` is the breakdown's exact share, and the largest
  remainder rounding of those (ties in the breakdown's phase order) is its ``wall_ns``;
* ``ranges``: the driver thread's NVTX push/pop ranges (every domain) overlapping the window,
  clipped to it (one that never ended runs to the window end), each on ``lane`` 0 when it nests
  in the ranges drawn there, else on the first further lane where it does (a range of one
  domain that crosses a range of another: the lanes are drawn as extra tracks);
* ``ops``: the process's GPU ops (kernels, memcpy, memset, whole-graph replays) overlapping the
  window, clipped, with their launch phase, device, stream and lane (ops that overlap on one
  stream, which the hardware serializes, go to further lanes);
* ``steps``: the decode steps (:func:`~specnsys.metrics.steps.step_table`) with their
  accepted drafts, output tokens and the fraction of the step some GPU op of the process ran;
* ``gpu_busy``: without steps, the union of the process's GPU activity as ``t, value``
  transitions (1 when something starts running, 0 when nothing runs).

:func:`cut_to_events` cuts all of it to a prefix of the window that fits an event budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.intervals import islands_frame
from specnsys.attribution.launch import attributed_gpu_ops
from specnsys.attribution.timeline import (
    SLICE_SCHEMA,
    PhaseBreakdown,
    exclusive_phase_times,
    exclusive_slices,
    step_phase,
)
from specnsys.metrics.events import Scope
from specnsys.metrics.steps import step_table

if TYPE_CHECKING:
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace

__all__ = ["TimelineExport", "cut_to_events", "phase_totals", "timeline_export"]

_I64 = pl.Int64

PHASE_COLUMNS = SLICE_SCHEMA
RANGE_COLUMNS = {"start": _I64, "end": _I64, "text": pl.String, "domain": pl.String,
                 "lane": _I64}  # fmt: skip
OP_COLUMNS = {
    "kind": pl.String, "name": pl.String, "device": _I64, "stream": _I64, "lane": _I64,
    "start": _I64, "end": _I64, "phase": pl.String,
}  # fmt: skip
STEP_COLUMNS = {"step": _I64, "start": _I64, "end": _I64, "accepted": _I64, "tokens": _I64,
                "gpu_busy": pl.Float64}  # fmt: skip
BUSY_COLUMNS = {"t": _I64, "value": _I64}


@dataclass(frozen=True)
class TimelineExport:
    """The rows of one timeline export (see the module docs); times in ns, session clock."""

    breakdown: PhaseBreakdown
    process_name: str | None
    driver_tid: int | None
    driver_name: str | None
    phases: pl.DataFrame
    ranges: pl.DataFrame
    ops: pl.DataFrame
    steps: pl.DataFrame
    gpu_busy: pl.DataFrame
    has_gpu: bool
    end_ns: int
    """Where the export ends: the window's end, or the cut of :func:`cut_to_events`."""
    dropped: dict[str, int] | None = field(default=None)
    """What :func:`cut_to_events` left out (None: nothing)."""

    @property
    def start_ns(self) -> int:
        return self.breakdown.window_start_ns

    def counters(self) -> list[str]:
        """The per-step counter columns the steps have values for."""
        names = ["accepted", "tokens"] + (["gpu_busy"] if self.has_gpu else [])
        return [c for c in names if self.steps[c].is_not_null().any()]

    def event_count(self) -> int:
        """The events these rows render to, besides the metadata: two per slice (its begin
        and end), one per step marker, per counter value (and one closing value per counter),
        per busy transition."""
        counters = self.counters()
        steps = self.steps.height * (1 + len(counters)) + (
            len(counters) if self.steps.height else 0
        )
        return (
            2 * (self.phases.height + self.ranges.height + self.ops.height)
            + steps
            + self.gpu_busy.height
        )


def _names(
    trace: Trace, pid: int | None, gtid: int | None
) -> tuple[str | None, int | None, str | None]:
    con = trace.connection
    process = con.execute(
        "SELECT min(name) FROM processes WHERE pid = $pid", {"pid": pid}
    ).fetchall()[0]
    thread = con.execute(
        "SELECT min(tid), min(name) FROM threads WHERE global_tid = $g", {"g": gtid}
    ).fetchall()[0]
    tid = thread[0] if thread is not None else None
    if tid is None and gtid is not None:
        tid = gtid % (1 << 24)  # global_tid = pid * 2^24 + tid (docs/model.md)
    return (
        None if process is None else process[0],
        None if tid is None else int(tid),
        None if thread is None else thread[1],
    )


def nest_lanes(starts: Sequence[int], ends: Sequence[int]) -> list[int]:
    """For intervals sorted by start then by end descending: the lane of each, the first in
    which it nests (inside or after every interval still open there), so that no two
    intervals of one lane partially overlap."""
    stacks: list[list[int]] = []  # per lane, the ends of the intervals open in it
    lanes = []
    for s, e in zip(starts, ends, strict=True):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= s:
                stack.pop()
            if not stack or e <= stack[-1]:
                stack.append(e)
                lanes.append(lane)
                break
        else:
            stacks.append([e])
            lanes.append(len(stacks) - 1)
    return lanes


def _with_lanes(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    """*frame* (``start, end``) sorted by *by*, start and end descending, with ``lane``."""
    frame = frame.sort([*by, "start", "end"], descending=[False] * len(by) + [False, True])
    if frame.height == 0:
        return frame.with_columns(pl.lit(0, _I64).alias("lane"))
    lanes: list[int] = []
    groups = frame.partition_by(by, maintain_order=True) if by else [frame]
    for group in groups:
        ends = group["end"]
        # the common case, one lane: every interval starts after the ones before it ended
        if (group["start"].slice(1) >= ends.cum_max().slice(0, group.height - 1)).all():
            lanes.extend([0] * group.height)
        else:
            lanes.extend(nest_lanes(group["start"].to_list(), ends.to_list()))
    return frame.with_columns(pl.Series("lane", lanes, dtype=_I64))


def _driver_ranges(trace: Trace, gtid: int | None, ws: int, we: int) -> pl.DataFrame:
    if gtid is None:
        return pl.DataFrame(schema=RANGE_COLUMNS)
    frame: pl.DataFrame = trace.connection.sql(
        """SELECT greatest(start, $ws) AS start, least(coalesce("end", $we), $we) AS "end",
                  coalesce(text, '') AS text, domain
           FROM nvtx WHERE global_tid = $g AND kind = 'push_pop'
             AND start < $we AND coalesce("end", $we) > $ws
             AND ("end" IS NULL OR "end" > start)""",
        params={"g": gtid, "ws": ws, "we": we},
    ).pl()
    frame = frame.filter(pl.col("end") > pl.col("start"))
    return _with_lanes(frame, []).select([pl.col(c).cast(t) for c, t in RANGE_COLUMNS.items()])


def _attributed_ops(trace: Trace, b: PhaseBreakdown, context: AttributionContext) -> pl.DataFrame | None:
    """The process's GPU ops overlapping the window with their launch phase, name, device and stream,
    computed once for the phase slices and the op tracks (None without a process)."""
    if b.pid is None:
        return None
    ops = attributed_gpu_ops(
        trace, context.phase_index(), pid=b.pid, window=(b.window_start_ns, b.window_end_ns),
        names=True, streams=True, runtime=context.runtime(b.pid, details=False),
    )  # fmt: skip
    context.release_lean_runtime()  # its only reader here (the steps read the phase index)
    return ops


def _gpu_ops(ops: pl.DataFrame | None, b: PhaseBreakdown) -> pl.DataFrame:
    ws, we = b.window_start_ns, b.window_end_ns
    if ops is None:
        return pl.DataFrame(schema=OP_COLUMNS)
    frame = ops.select(
        pl.col("op_kind").cast(pl.String).alias("kind"),
        pl.col("name").cast(pl.String),
        pl.col("device_id").fill_null(-1).cast(_I64).alias("device"),
        pl.col("stream_id").fill_null(-1).cast(_I64).alias("stream"),
        pl.max_horizontal("start", pl.lit(ws, _I64)).alias("start"),
        pl.min_horizontal("end", pl.lit(we, _I64)).alias("end"),
        pl.col("phase").cast(pl.String),
    ).filter(pl.col("end") > pl.col("start"))
    return _with_lanes(frame, ["device", "stream"]).select(
        [pl.col(c).cast(t) for c, t in OP_COLUMNS.items()]
    )


def _union(ops: pl.DataFrame) -> pl.DataFrame:
    """The process's GPU activity as disjoint intervals ``a, b``, by start."""
    if ops.height == 0:
        return pl.DataFrame(schema={"a": _I64, "b": _I64})
    merged = islands_frame(
        ops.select(pl.lit(0).alias("k"), pl.col("start").alias("s"), pl.col("end").alias("e")),
        "k",
    )
    return merged.select(pl.col("a").cast(_I64), pl.col("b").cast(_I64)).sort("a")


def _busy_within(union: pl.DataFrame, starts: pl.Series, ends: pl.Series) -> list[int]:
    """Per ``[start, end)``, the ns of *union* inside it (prefix sums over the intervals)."""
    return (_covered(union, ends) - _covered(union, starts)).to_list()


def _covered(union: pl.DataFrame, t: pl.Series) -> pl.Series:
    """Per time in *t*, the busy ns of *union* (disjoint intervals ``a, b``, by start) before
    it: the intervals that start at or before it, the last one clipped at it."""
    import numpy as np

    a, b, times = union["a"].to_numpy(), union["b"].to_numpy(), t.to_numpy()
    before = np.concatenate(([0], np.cumsum(b - a)))  # busy ns of the first i intervals
    i = np.searchsorted(a, times, side="right")  # intervals starting at or before t
    last = np.maximum(i - 1, 0)
    clipped = np.minimum(times, b[last]) - a[last] if len(a) else np.zeros_like(times)
    return pl.Series(np.where(i > 0, before[last] + clipped, 0), dtype=_I64)


def _steps(
    trace: Trace, b: PhaseBreakdown, rules: PhaseRules, context: AttributionContext,
    union: pl.DataFrame,
) -> pl.DataFrame:  # fmt: skip
    walls = dict(zip(b.frame["phase"].to_list(), b.frame["wall_ns"].to_list(), strict=True))
    table = step_table(trace, Scope.of(b, rules, context), step_phase(b.range_counts, walls))
    steps = table.select(
        pl.col("step").cast(_I64),
        pl.col("start_ns").alias("start"),
        pl.min_horizontal(
            pl.col("start_ns") + pl.col("duration_ns"), pl.lit(b.window_end_ns)
        ).alias("end"),
        pl.col("accepted").cast(_I64),
        pl.col("tokens").cast(_I64),
    ).filter(pl.col("end") > pl.col("start"))
    busy = _busy_within(union, steps["start"], steps["end"])
    return steps.with_columns(
        (pl.Series(busy, dtype=pl.Float64) / (pl.col("end") - pl.col("start"))).alias("gpu_busy")
    ).select([pl.col(c).cast(t) for c, t in STEP_COLUMNS.items()])


def _busy_transitions(union: pl.DataFrame) -> pl.DataFrame:
    return (
        pl.concat(
            [
                union.select(pl.col("a").alias("t"), pl.lit(1, _I64).alias("value")),
                union.select(pl.col("b").alias("t"), pl.lit(0, _I64).alias("value")),
            ]
        )  # fmt: skip
        .sort("t", "value")
        .select([pl.col(c).cast(t) for c, t in BUSY_COLUMNS.items()])
    )


def timeline_export(
    trace: Trace,
    *,
    rules: PhaseRules,
    context: AttributionContext,
    pid: int | None = None,
    window: str | None = None,
) -> TimelineExport:
    """Every row of the export of *trace*'s analyzed process (see the module docs), under
    *rules* (the rules *context* was made for), over its ``--window`` *window*."""
    b = exclusive_phase_times(trace, rules=rules, pid=pid, window=window, context=context)
    ws, we = b.window_start_ns, b.window_end_ns
    attributed = _attributed_ops(trace, b, context)
    phases = exclusive_slices(trace, b, context, attributed)
    ops = _gpu_ops(attributed, b)
    del attributed
    process, tid, thread = _names(trace, b.pid, b.driver_global_tid)
    union = _union(ops)
    steps = _steps(trace, b, rules, context, union)
    busy = _busy_transitions(union) if steps.height == 0 else pl.DataFrame(schema=BUSY_COLUMNS)
    has_gpu = trace.summary.capabilities["gpu_activity"].available
    return TimelineExport(
        b, process, tid, thread, phases,
        _driver_ranges(trace, b.driver_global_tid, ws, we), ops, steps, busy, has_gpu, we,
    )  # fmt: skip


def phase_totals(phases: pl.DataFrame, order: Sequence[str], window_ns: int) -> dict[str, int]:
    """Per phase, its wall time from the phase slices: the exact ``sum((end - start) /
    sharing)``, rounded to integer ns by largest remainder (ties in *order*, then by name) so
    that the totals sum to *window_ns*: what ``phases`` reports for a whole window."""
    # integer sums per (phase, split) in Polars; exact fractions over those few groups only
    sums = phases.group_by("phase", "sharing").agg((pl.col("end") - pl.col("start")).sum())
    exact: dict[str, Fraction] = {}
    for phase, sharing, ns in sums.iter_rows():
        exact[phase] = exact.get(phase, Fraction(0)) + Fraction(int(ns), sharing)
    rank = {p: i for i, p in enumerate(order)}
    names = sorted(exact, key=lambda p: (rank.get(p, len(rank)), p))
    floors = {p: int(exact[p]) for p in names}
    deficit = window_ns - sum(floors.values())
    by_remainder = sorted(names, key=lambda p: (-(exact[p] - floors[p]), names.index(p)))
    for p in by_remainder[: max(deficit, 0)]:
        floors[p] += 1
    return floors


def cut_to_events(data: TimelineExport, budget: int) -> TimelineExport:
    """*data* cut to the prefix ``[start, T)`` of its window whose events fit *budget* (rows
    starting at or after *T* dropped, slices across it cut at it), with what was dropped in
    ``dropped``; *data* itself when it fits."""
    total = data.event_count()
    if total <= budget:
        return data
    per_step = 1 + len(data.counters())
    slices = [data.phases["start"], data.ranges["start"], data.ops["start"]]
    # a slice starting before the cut keeps its begin and its end (moved to the cut)
    starts = pl.concat([
        *slices, *slices, *([data.steps["start"]] * per_step), data.gpu_busy["t"],
    ]).sort()  # fmt: skip
    # the last counter values close at T: leave room for them
    room = max(budget - len(data.counters()), 0)
    cut = int(starts[room]) if room < starts.len() else data.end_ns
    cut = max(cut, data.start_ns + 1) if room else data.start_ns

    def clip(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(pl.col("start") < cut).with_columns(
            pl.min_horizontal("end", pl.lit(cut, _I64)).alias("end")
        )

    kept = replace(
        data,
        phases=clip(data.phases), ranges=clip(data.ranges), ops=clip(data.ops),
        steps=clip(data.steps), gpu_busy=data.gpu_busy.filter(pl.col("t") < cut), end_ns=cut,
    )  # fmt: skip
    before = {"slices": data.phases.height + data.ranges.height + data.ops.height,
              "steps": data.steps.height}  # fmt: skip
    after = {"slices": kept.phases.height + kept.ranges.height + kept.ops.height,
             "steps": kept.steps.height}  # fmt: skip
    dropped = {
        "max_events": budget,
        "events": total,
        "kept_events": kept.event_count(),
        "cut_ns": cut,
        "kept_ns": cut - data.start_ns,
        "window_ns": data.end_ns - data.start_ns,
        "slices_dropped": before["slices"] - after["slices"],
        "steps_dropped": before["steps"] - after["steps"],
    }
    return replace(kept, dropped=dropped)
