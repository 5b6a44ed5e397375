"""Exclusive phase timeline (docs/design.md#attribution, rules 2-4): times summing to the window.

Method (sorted sweeps in Polars over the model's columns; no per-event Python, no
interval-pair joins; memory grows with the number of rows, never with ranges x ops):

* GPU ops of the analyzed process get their launch phase (:mod:`.launch`: a hash join to the
  launching call and one as-of lookup of the call's start), are clipped to the window and
  merged, per phase, into disjoint *islands* (a sorted running max of ``end``). The islands
  give each phase's GPU busy time (an interval union).
* Every island start/end (+1/-1), every driver-thread phase-range start/end and both window
  ends are boundaries; consecutive boundaries bound elementary segments ``[t_i, t_{i+1})``.
  The running sum of the +1/-1 is ``n``, the number of distinct phases with GPU work running.
* A segment with ``n > 0`` is split evenly among the ``n`` running phases. To stay exact with
  no overflow whatever the number of phases, each phase's share is summed per distinct ``n``
  (``S_n``: the length of its islands' segments with that ``n``, a prefix-sum difference) and
  the total ``sum(S_n / n)`` is an exact fraction. The totals sum to the union of GPU activity
  exactly; they are rounded to integer ns by largest remainder (ties in phase order), so the
  rounded GPU parts sum to the GPU-busy union exactly.
* A segment with ``n = 0`` belongs to the innermost phase range open on the driver thread at
  its start (one as-of lookup in the thread's phase change points), else to ``unannotated``.

So ``sum(wall_ns) == window_ns`` exactly and every share lies in ``[0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypedDict

import polars as pl

from specnsys import __version__
from specnsys.attribution.context import AttributionContext, attribution_context
from specnsys.attribution.graph_nodes import graph_notes
from specnsys.attribution.intervals import islands_frame, run_rows
from specnsys.attribution.launch import (
    OP_KIND,
    UNANNOTATED,
    UNATTRIBUTED_GPU,
    attributed_gpu_ops,
    rules_for,
)
from specnsys.attribution.nesting import NestingFacts, nesting_facts
from specnsys.attribution.phase_map import (
    PhaseIndex,
    lookup_phase,
    mapped_nvtx_sql,
    phase_ranges,
)
from specnsys.attribution.rules import REQUEST, PhaseRules
from specnsys.attribution.window import (
    COMPILE_RANGE_PATTERN,
    GRAPH_CAPTURE_CALL_PATTERN,
    WindowChoice,
    WindowDropped,
    WindowSpec,
    choose_window,
    parse_window,
)
from specnsys.ingest.summary import OSRT_CALL_SQL
from specnsys.vocabulary import DOMAIN, PHASES, SPEC_ACCELERABLE, STEP_PHASE

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "NO_WINDOW", "SEGMENT_SCHEMA", "STEP_PHASE", "WINDOW_SOURCES", "KernelNameRow",
    "PhaseBreakdown",
    "driver_ranges", "driver_ranges_key", "exclusive_phase_times", "exclusive_segments",
    "exclusive_slices", "SLICE_SCHEMA",
    "step_phase",
]

def step_phase(counts: Mapping[str, int], walls: Mapping[str, int]) -> str:
    """The phase whose ranges are a run's decode steps, from its range counts and wall times
    per phase: ``decode`` when it has decode ranges, else ``verify`` in a speculative run
    (draft or verify present) and ``forward`` in a baseline. The one definition both
    ``analyze``'s step count and the timeline's step choice use."""
    if counts.get(STEP_PHASE, 0):
        return STEP_PHASE
    spec = any(counts.get(p, 0) > 0 or walls.get(p, 0) > 0 for p in SPEC_ACCELERABLE)
    return "verify" if spec else "forward"


_I64 = pl.Int64


class KernelNameRow(TypedDict):
    """Count and clipped time (ns) of one kernel *name* in one *phase* of the window."""

    phase: str
    name: str
    count: int
    ns: int


@dataclass(frozen=True)
class PhaseBreakdown:
    """The exclusive phase timeline of one process over its analysis window.

    ``frame`` has one row per phase (the given phases in order, then ``unannotated``, then
    ``unattributed_gpu`` when such GPU ops exist) and the columns:

    * ``wall_ns`` -- exclusive wall time (rule 2); sums to ``window_ns`` exactly;
    * ``share`` -- ``wall_ns / window_ns``;
    * ``gpu_wall_ns`` / ``cpu_wall_ns`` -- the parts of ``wall_ns`` while GPU work of the
      process ran (split evenly among running phases) / while the GPU was idle;
    * ``gpu_busy_ns`` -- union of the phase's GPU op intervals, clipped to the window;
    * ``kernels`` -- kernels attributed to the phase overlapping the window;
    * ``launches`` -- runtime calls named ``*launch*`` (kernel and graph launches) made in
      the phase, on any thread of the process, starting in the window;
    * ``cpu_inclusive_ns`` -- sum of the phase's range durations on the driver thread,
      clipped to the window (unclosed ranges run to the window end);
    * ``cpu_exclusive_ns`` -- time the phase is the innermost open range on the driver thread.
    """

    window_start_ns: int
    window_end_ns: int
    frame: pl.DataFrame
    pid: int | None = None
    driver_global_tid: int | None = None
    gpu_union_ns: int = 0
    """Union of all GPU activity of the process within the window."""
    rules: str = "specnsys"
    """Name of the name-mapping rule set the phases come from."""
    unclosed_ranges: int = 0
    """Phase ranges on the driver thread with no end in the trace, counted to the window end."""
    range_counts: dict[str, int] = field(default_factory=dict)
    """Phase ranges per phase on the driver thread that start in the window (what per-range
    times divide by); counted from the ranges the breakdown reads anyway."""
    graph_notes: list[str] = field(default_factory=list)
    """CUDA graph work of the process in the window attributed to its launch's phase instead
    of the phase its node was captured in, and why (:func:`.graph_nodes.graph_notes`)."""
    window_source: str | None = None
    """What set the window: a key of :data:`WINDOW_SOURCES` (None in a breakdown kept by an
    older version)."""
    kernel_names: list[KernelNameRow] | None = None
    """Per (``phase``, kernel ``name``): ``count`` and ``ns`` (durations clipped to the
    window) of the kernels the process ran in the window, from the same attributed ops as
    the frame (what a per-phase kernel summary reads, with no second attribution pass);
    None in a breakdown kept by an older version."""
    window_rule: str = "requests"
    """The ``--window`` the breakdown was made for (:mod:`.window`): ``requests`` (the
    default window), ``auto``, ``A:B`` or ``steps:N-M``."""
    window_dropped: WindowDropped | None = None
    """What the window rule cut from the default window (:class:`.window.WindowChoice`)."""
    nesting: NestingFacts | None = None
    """What the nesting of the driver thread's ranges in the window says: draft leaves (one
    draft forward at the finest granularity annotated), ranges a role reassigned, structural
    errors (:func:`.nesting.nesting_facts`); None in a breakdown kept by an older version."""

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    def to_dict(self) -> dict[str, object]:
        """Every field, the frame as a list of rows (the inverse of :meth:`from_dict`)."""
        fields = {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "frame"}
        return {**fields, "frame": self.frame.to_dicts()}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PhaseBreakdown:
        """The breakdown whose :meth:`to_dict` the trace cache kept (its JSON read back: the
        fields' own values, handed to the constructor as they were written)."""
        frame = pl.DataFrame(doc["frame"], schema=FRAME_SCHEMA, orient="row")
        return cls(**{**doc, "frame": frame})


FRAME_SCHEMA = {
    "phase": pl.String,
    "wall_ns": _I64,
    "share": pl.Float64,
    "gpu_wall_ns": _I64,
    "cpu_wall_ns": _I64,
    "gpu_busy_ns": _I64,
    "kernels": _I64,
    "launches": _I64,
    "cpu_inclusive_ns": _I64,
    "cpu_exclusive_ns": _I64,
}
"""Columns of :attr:`PhaseBreakdown.frame`, in order."""

#: Version of the timeline's semantics, part of the key of breakdowns kept in the trace cache:
#: bump it whenever a change to this package would give a different breakdown.
TIMELINE_VERSION = 7  # 2: range_counts; 3: kernel_names; 4: a CUDA-API-only window;
# 5: windows of OS runtime calls or CPU samples alone, window_source; 6: nesting by role
# (docs/design.md#nesting-by-role), nested ranges of one phase counted once, ``nesting``;
# 7: --window (window_rule, window_dropped)

#: What can set a process's window, in the order tried: each is used only without the ones
#: before it (a trace of a CPU-only program still has a run to look at).
WINDOW_SOURCES = {
    "requests": "first request start to last request end",
    "ranges_gpu": "the span of the process's phase ranges and GPU work",
    "cuda_api": "the span of the process's CUDA API calls",
    "os_runtime": "the span of the process's OS runtime calls",
    "cpu_samples": "the process's first to last CPU sample",
}

#: What a process with no window lacks: every kind of event :func:`_window` looks for.
NO_WINDOW = (
    "no phase ranges, GPU work, CUDA API calls, OS runtime calls or CPU samples "
    "spanning any time"
)



def _one(trace: Trace, sql: str, prm: Mapping[str, object] | None = None) -> tuple[Any, ...] | None:
    """The first row of a DuckDB query (an untyped tuple: each caller knows its columns)."""
    rows = trace.connection.execute(sql, prm).fetchall()
    return rows[0] if rows else None


_ALL_OPS = """(
    SELECT pid, start, "end" FROM kernels UNION ALL SELECT pid, start, "end" FROM memcpy
    UNION ALL SELECT pid, start, "end" FROM memset UNION ALL SELECT pid, start, "end" FROM graphs
)"""


def _choose_pid(trace: Trace, ranges: pl.DataFrame) -> int | None:
    """The process with the most phase *ranges* (ties: the lowest pid), else with the most
    GPU ops, else the first with NVTX ranges, else the one with the most CUDA API calls, OS
    runtime calls or CPU samples, in that order."""
    by_pid = ranges.filter(pl.col("pid").is_not_null()).group_by("pid").len()
    if by_pid.height:
        return int(by_pid.sort(["len", "pid"], descending=[True, False])["pid"][0])
    row = _one(
        trace,
        f"SELECT pid FROM {_ALL_OPS} WHERE pid IS NOT NULL "
        "GROUP BY pid ORDER BY count(*) DESC, pid LIMIT 1",
    )
    if row is None:
        row = _one(trace, "SELECT min(pid) FROM nvtx WHERE kind IN ('push_pop', 'start_end')")
    # neither ranges nor GPU work: the busiest CUDA API user, else OS runtime user, else the
    # most sampled process
    for table, rows in (("runtime", "TRUE"), ("osrt", OSRT_CALL_SQL), ("cpu_samples", "TRUE")):
        if row is not None and row[0] is not None:
            break
        row = _one(
            trace,
            f"SELECT pid FROM {table} WHERE {rows} AND pid IS NOT NULL "
            "GROUP BY pid ORDER BY count(*) DESC, pid LIMIT 1",
        )
    return None if row is None or row[0] is None else int(row[0])


def _driver_thread(ranges: pl.DataFrame, pid: int | None) -> int | None:
    """The thread of *pid* with the most phase *ranges* (ties: the lowest global tid)."""
    if pid is None:
        return None
    by_thread = ranges.filter(pl.col("pid") == pid).group_by("gtid").len()
    if by_thread.height == 0:
        return None
    return int(by_thread.sort(["len", "gtid"], descending=[True, False])["gtid"][0])


def _cpu_ranges(ranges: pl.DataFrame, gtid: int | None, ws: int, we: int) -> pl.DataFrame:
    """The driver thread's phase ranges clipped to the window ``[ws, we)`` (an unclosed one
    runs to its end): ``phase, s, e, unclosed``."""
    end = pl.col("e").fill_null(we)
    on_driver = pl.col("gtid") == gtid if gtid is not None else pl.lit(False)
    return ranges.filter(on_driver & (pl.col("s") < we) & (end > ws)).select(
        pl.col("phase").cast(pl.String),
        pl.max_horizontal("s", pl.lit(ws, _I64)).alias("s"),
        pl.min_horizontal(end, pl.lit(we, _I64)).alias("e"),
        pl.col("e").is_null().alias("unclosed"),
        "counted",
    )


def _range_counts(ranges: pl.DataFrame, gtid: int | None, ws: int, we: int) -> dict[str, int]:
    """Phase ranges per phase on the driver thread *gtid* that start in ``[ws, we)``; a range
    nested in another of the same phase (a draft forward inside a draft step, a forward that
    a prefill runs) is part of that one, not a range of its own."""
    if gtid is None:
        return {}
    starts = ranges.filter(
        (pl.col("gtid") == gtid) & pl.col("counted") & (pl.col("s") >= ws) & (pl.col("s") < we)
    )
    return {str(p): int(n) for p, n in starts.group_by("phase").len().iter_rows()}


def _step_ranges(ranges: pl.DataFrame, gtid: int | None, ws: int, we: int) -> pl.DataFrame:
    """The decode steps (``s, e``, sorted) on the driver thread in the default window: the
    ranges of :func:`step_phase` (decode, else verify or forward), counted once."""
    counts = _range_counts(ranges, gtid, ws, we)
    phase = step_phase(counts, {})
    if gtid is None:
        return pl.DataFrame(schema={"s": _I64, "e": _I64})
    return (
        ranges.filter(
            (pl.col("gtid") == gtid) & pl.col("counted") & (pl.col("phase") == phase)
            & (pl.col("s") >= ws) & (pl.col("s") < we)
        )
        .select(pl.col("s").cast(_I64), pl.col("e").fill_null(we).cast(_I64))
        .sort("s")
    )  # fmt: skip


def _compile_spans(trace: Trace, pid: int, ws: int, we: int) -> pl.DataFrame:
    """Compile and graph-capture spans of process *pid* in ``[ws, we)`` (``s, e, what``)."""
    frame: pl.DataFrame = trace.connection.sql(
        """SELECT start AS s, "end" AS e, name AS what FROM runtime
           WHERE pid = $pid AND regexp_matches(name, $calls) AND "end" > $ws AND start < $we
           UNION ALL
           SELECT start, "end", text FROM nvtx
           WHERE pid = $pid AND kind IN ('push_pop', 'start_end') AND "end" IS NOT NULL
             AND regexp_matches(coalesce(text, ''), $ranges) AND "end" > $ws AND start < $we
           ORDER BY 1""",
        params={"pid": pid, "calls": GRAPH_CAPTURE_CALL_PATTERN,
                "ranges": COMPILE_RANGE_PATTERN, "ws": ws, "we": we},
    ).pl()  # fmt: skip
    return frame


def _window(trace: Trace, pid: int | None, rules: PhaseRules) -> tuple[int, int, str | None]:
    """The window ``(start, end, source)`` of process *pid*; *source* is a key of
    :data:`WINDOW_SOURCES` (None with no window)."""
    if pid is None:
        return 0, 0, None
    # The request ranges set the window (one ending before it starts is ignored, as every
    # backwards range is); the span of everything, a scan of every GPU op, is only needed
    # without them or to close a request that never ended.
    req = _one(
        trace,
        f"""SELECT min(s), max(e), count(*), count(*) - count(e)
            FROM ({mapped_nvtx_sql(rules)})
            WHERE pid = $pid AND phase = '{REQUEST}' AND (e IS NULL OR e >= s)""",
        {"pid": pid},
    )
    requests = req if req is not None and req[2] > 0 else None  # the aggregate, when any
    if requests is not None and not requests[3]:
        return int(requests[0]), int(requests[1]), "requests"
    span = _one(
        trace,
        f"""SELECT min(s), max(e) FROM (
                SELECT start AS s, coalesce("end", start) AS e FROM nvtx
                WHERE pid = $pid AND kind IN ('push_pop', 'start_end') AND start IS NOT NULL
                  AND coalesce("end", start) >= start  -- backwards rows are ignored everywhere
                UNION ALL
                SELECT start, "end" FROM {_ALL_OPS} WHERE pid = $pid AND "end" >= start)""",
        {"pid": pid},
    )
    source = "ranges_gpu"
    # no range and no GPU work: the span of what the process did on the CPU, from the first
    # source that has any (a capture of a program that only talks to the driver, or runs on
    # the CPU alone, is still a run to look at)
    fallbacks = (
        ("cuda_api", 'SELECT min(start), max("end") FROM runtime WHERE pid = $pid AND "end" >= start'),
        (
            "os_runtime",
            f'SELECT min(start), max("end") FROM osrt WHERE {OSRT_CALL_SQL} AND pid = $pid '
            'AND "end" >= start',
        ),
        ("cpu_samples", "SELECT min(timestamp), max(timestamp) FROM cpu_samples WHERE pid = $pid"),
    )
    for name, sql in fallbacks:
        if span is not None and span[0] is not None:
            break
        span, source = _one(trace, sql, {"pid": pid}), name
    if span is None or span[0] is None:
        return 0, 0, None
    span_start, span_end = int(span[0]), int(span[1])
    if requests is not None:  # an unclosed request runs to the end of the span (holding them all)
        return int(requests[0]), span_end, "requests"
    return span_start, span_end, source


def _segments(islands: pl.DataFrame, cpu_ranges: pl.DataFrame, ws: int, we: int) -> pl.DataFrame:
    """Elementary segments ``[t, t + len)`` between all boundaries, sorted by ``t``, with
    ``n`` (GPU phases running); see the module docs."""
    one = pl.Int8  # +1/-1/0 per boundary: a byte, not eight, on tens of millions of rows
    bounds = pl.concat(
        [
            islands.lazy().select(pl.col("a").alias("t"), pl.lit(1, one).alias("d")),
            islands.lazy().select(pl.col("b").alias("t"), pl.lit(-1, one).alias("d")),
            cpu_ranges.lazy().select(pl.col("s").alias("t"), pl.lit(0, one).alias("d")),
            cpu_ranges.lazy().select(pl.col("e").alias("t"), pl.lit(0, one).alias("d")),
            pl.LazyFrame({"t": [ws, we], "d": [0, 0]}, schema={"t": _I64, "d": one}),
        ]
    )
    # Sorted once; the running count after the last boundary of each instant is its n.
    last_of_instant = (pl.col("t") != pl.col("t").shift(-1)).fill_null(True)
    return (
        bounds.sort("t")
        .with_columns(pl.col("d").cast(pl.Int32).cum_sum().alias("n"))
        .filter(last_of_instant)
        .select("t", "n", (pl.col("t").shift(-1) - pl.col("t")).fill_null(0).alias("len"))
        .collect()
    )


def _gpu_shares(islands: pl.DataFrame, segments: pl.DataFrame) -> dict[str, Fraction]:
    """Each phase's exact share of GPU-busy time: ``sum over n of S_n / n`` (module docs)."""
    if islands.height == 0:
        return {}
    if int(segments["n"].max()) <= 1:  # type: ignore[arg-type]
        # No two phases ever overlap on the GPU (the usual single-stream loop): every island
        # segment has n = 1, so each phase's share is exactly its busy time.
        busy = islands.group_by("phase").agg((pl.col("b") - pl.col("a")).sum())
        return {p: Fraction(int(v)) for p, v in busy.iter_rows() if v}
    seg_t = segments["t"]
    at = islands.select(
        "phase",
        seg_t.search_sorted(islands["a"]).alias("ia"),
        seg_t.search_sorted(islands["b"]).alias("ib"),
    )
    totals: dict[str, Fraction] = {}
    for n in segments.filter(pl.col("n") > 0)["n"].unique().sort().to_list():
        mine = pl.when(segments["n"] == n).then(segments["len"]).otherwise(0)
        prefix = segments.select((mine.cum_sum() - mine).alias("f"))["f"]  # before segment i
        per_phase = (
            at.with_columns((prefix.gather(at["ib"]) - prefix.gather(at["ia"])).alias("part"))
            .group_by("phase")
            .agg(pl.col("part").sum())
        )
        for phase, part in per_phase.iter_rows():
            if part:
                totals[phase] = totals.get(phase, Fraction(0)) + Fraction(int(part), int(n))
    return totals


def _largest_remainder(shares: Sequence[Fraction], target: int) -> list[int]:
    """Integer parts of *shares* (which sum to *target*), +1 for the ``target - sum(floors)``
    largest remainders (ties: earlier first), so the result sums to *target* exactly."""
    floors = [int(math.floor(x)) for x in shares]
    deficit = target - sum(floors)
    order = sorted(range(len(shares)), key=lambda i: (-(shares[i] - floors[i]), i))
    for i in order[: max(deficit, 0)]:
        floors[i] += 1
    return floors


def exclusive_phase_times(
    trace: Trace,
    phases: Sequence[str] = PHASES,
    domain: str = DOMAIN,
    pid: int | None = None,
    *,
    rules: PhaseRules | str | None = None,
    context: AttributionContext | None = None,
    window: WindowSpec | str | None = None,
) -> PhaseBreakdown:
    """Exclusive wall time per phase of process *pid* (docs/design.md#attribution, rule 2).

    Phases are named by *rules* (a :class:`PhaseRules`, a built-in set's name or a TOML path;
    see :mod:`.rules`) or, by default, by specnsys's convention: push/pop ranges of *domain*
    named one of *phases*. *pid* defaults to the process with the most phase ranges (or,
    without any, the most GPU ops). The window runs from its first ``request`` start to its
    last ``request`` end, or spans its NVTX ranges and GPU ops when it has no ``request``
    range; without either, its CUDA API calls, else its OS runtime calls, else its CPU
    samples (:data:`WINDOW_SOURCES`; all of such a window is ``unannotated``). The driver
    thread is its thread with the most phase ranges. See
    :class:`PhaseBreakdown` for the columns. *context* (an
    :class:`~specnsys.attribution.context.AttributionContext` of the same rules) supplies the
    phase index when the caller has one. *window* (``--window``: :mod:`.window`) narrows the
    window to a steady state or a slice of it; the breakdown says what it dropped.
    """
    mapping = rules_for(phases, domain, rules)
    spec = parse_window(window)
    # A breakdown is a pure function of the export, the rules and pid: kept beside the cached
    # model, a second analysis of the same unchanged export reads it back (the warm path).
    # the package version is in the key too: an upgrade never reads an older release's result
    key = {
        "version": TIMELINE_VERSION,
        "specnsys": __version__,
        "rules": repr(mapping),
        "pid": pid,
        "window": spec.text,
    }
    stored = trace.load_derived("phase_breakdown", key)
    if stored is not None:
        return PhaseBreakdown.from_dict(stored)
    con = trace.connection
    # The phase ranges are read once: the process, its driver thread and its CPU ranges come
    # from them, and so does the index every lookup below reads.
    ranges = phase_ranges(con, mapping)
    if pid is None:
        pid = _choose_pid(trace, ranges)
    ws, we, window_source = _window(trace, pid, mapping)
    gtid = _driver_thread(ranges, pid)
    choice = WindowChoice(ws, we)
    if spec.kind != "requests" and pid is not None:
        steps = _step_ranges(ranges, gtid, ws, we)
        choice = choose_window(spec, (ws, we), steps, _compile_spans(trace, pid, ws, we))
        ws, we = choice.start, choice.end
    cpu_ranges = _cpu_ranges(ranges, gtid, ws, we)
    counts = _range_counts(ranges, gtid, ws, we)
    nesting = nesting_facts(ranges, gtid, ws, we)
    with attribution_context(trace, mapping, context) as shared:
        index = shared.phase_index(ranges=ranges)
        if context is not None:  # the decode-step tables read them (metrics/steps.py)
            shared.frames[driver_ranges_key(gtid, ws, we)] = driver_ranges(ranges, gtid, ws, we)
        del ranges
        breakdown = _breakdown(trace, mapping, pid, (ws, we), gtid, cpu_ranges, index, shared)
    breakdown = replace(
        breakdown, range_counts=counts, window_source=window_source, nesting=nesting,
        window_rule=choice.rule, window_dropped=choice.dropped or None,
    )  # fmt: skip
    trace.store_derived("phase_breakdown", key, breakdown.to_dict())
    return breakdown


def driver_ranges_key(gtid: int | None, ws: int, we: int) -> tuple[object, ...]:
    """The key of :func:`driver_ranges`'s frame in an attribution context's ``frames``."""
    return ("driver_ranges", gtid, ws, we)


def driver_ranges(ranges: pl.DataFrame, gtid: int | None, ws: int, we: int) -> pl.DataFrame:
    """The counted phase ranges of the driver thread *gtid* starting in the window ``[ws,
    we)``, unclosed ones ended at *we* (``s, e, phase``): what the decode-step tables are
    built from. Left in the analysis's context by the breakdown, which has read every phase
    range, so that those tables do not derive the phase ranges again in SQL (about 1 s each
    on the 2M-kernel bench export; docs/performance.md#attribution-and-metrics)."""
    if gtid is None:
        return pl.DataFrame(schema={"s": _I64, "e": _I64, "phase": pl.String})
    return ranges.filter(
        (pl.col("gtid") == gtid) & pl.col("counted") & (pl.col("s") >= ws) & (pl.col("s") < we)
    ).select(
        pl.col("s").cast(_I64),
        pl.col("e").fill_null(we).cast(_I64),
        pl.col("phase").cast(pl.String),
    )


def _process_ops(
    trace: Trace, index: PhaseIndex, pid: int | None, window: tuple[int, int],
    shared: AttributionContext,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """The process's GPU ops with their launch phase (``op_kind, start, end, phase, name``)
    and its launch calls per phase in the window (``phase, launches``).

    Launch attribution for this process only: its runtime calls get a phase once, and serve
    both the launch counts and the ops' phases; the context keeps them for the analysis's
    other passes over the process's GPU work (its largest kernels per phase)."""
    ws, we = window
    launches = pl.DataFrame(schema={"phase": pl.String, "launches": _I64})
    ops = pl.DataFrame(
        schema={"op_kind": OP_KIND, "start": _I64, "end": _I64, "phase": pl.Categorical}
    )
    if pid is not None:
        runtime = shared.runtime(pid, details=False)
        launches = (
            runtime.filter(
                pl.col("is_launch") & (pl.col("api_start") >= ws) & (pl.col("api_start") < we)
            )
            .group_by("phase")  # by code; NULL (outside every range) named below
            .agg(pl.len().cast(_I64).alias("launches"))
        )
        ops = attributed_gpu_ops(trace, index, pid=pid, runtime=runtime, names=True)
    return ops, launches


def _in_window(window: tuple[int, int]) -> pl.Expr:
    ws, we = window
    return (pl.col("start") < we) & (pl.col("end") > ws) & (pl.col("end") > pl.col("start"))


def _islands(ops: pl.DataFrame, window: tuple[int, int]) -> pl.DataFrame:
    """Per phase, the disjoint intervals (``phase, a, b``) its ops cover in the window (clipped
    inside the islands' own plan: no second copy of the ops)."""
    ws, we = window
    mine = ops.lazy().filter(_in_window(window)).select(
        "phase",
        pl.max_horizontal("start", pl.lit(ws, _I64)).alias("s"),
        pl.min_horizontal("end", pl.lit(we, _I64)).alias("e"),
    )
    return islands_frame(mine, "phase")


def _driver_points(index: PhaseIndex, gtid: int | None) -> pl.DataFrame:
    """The driver thread's change points (none without a driver thread)."""
    if gtid is None:
        return index.change_points.clear()
    return index.change_points.filter(pl.col("gtid") == gtid)


def _gpu_part(
    islands: pl.DataFrame, segments: pl.DataFrame
) -> tuple[pl.DataFrame, dict[str, Fraction], int]:
    """Per phase its GPU busy time and the floor of its GPU share; the exact shares; the
    union of GPU activity."""
    # the busy segments' total, not a filtered copy of every segment (at 2M kernels that
    # copy was the cold analysis's high-water mark)
    gpu_union = int(segments.select(pl.col("len").filter(pl.col("n") > 0).sum()).item())
    shares = _gpu_shares(islands, segments)
    floors = {phase: math.floor(share) for phase, share in shares.items()}
    gpu = islands.group_by("phase").agg(
        (pl.col("b") - pl.col("a")).sum().cast(_I64).alias("gpu_busy_ns")
    ).with_columns(
        pl.col("phase").cast(pl.String).replace_strict(floors, default=0, return_dtype=_I64)
        .alias("floor_ns")
    )  # fmt: skip
    return gpu, shares, gpu_union


def _cpu_part(segments: pl.DataFrame, driver_points: pl.DataFrame) -> pl.DataFrame:
    """Per phase: the idle-GPU segments it owns (``cpu_wall_ns``) and the time it is the
    driver thread's innermost phase (``cpu_exclusive_ns``)."""
    return (
        lookup_phase(segments.filter(pl.col("len") > 0), driver_points, t="t", gtid=None)
        .group_by("phase")  # by code: a string per segment would cost a GB on 40M segments
        .agg(
            pl.col("len").filter(pl.col("n") == 0).sum().cast(_I64).alias("cpu_wall_ns"),
            pl.col("len").sum().cast(_I64).alias("cpu_exclusive_ns"),
        )
    )


_COUNT_COLUMNS = (
    "gpu_busy_ns", "cpu_wall_ns", "cpu_exclusive_ns", "cpu_inclusive_ns", "unclosed",
    "launches", "kernels",
)  # fmt: skip


def _assemble(
    mapping: PhaseRules,
    parts: dict[str, pl.DataFrame],
    shares: dict[str, Fraction],
    gpu_union: int,
    window: tuple[int, int],
    has_unattributed: bool,
) -> pl.DataFrame:
    """The breakdown's frame from its per-phase parts (gpu, cpu, inclusive, launches,
    kernels): one row per phase in :func:`_phase_order`, GPU shares rounded by largest
    remainder so the walls sum to the window."""
    named = {
        key: part.with_columns(pl.col("phase").cast(pl.String).fill_null(UNANNOTATED))
        .group_by("phase", maintain_order=True)
        .agg(pl.all().sum())
        if key != "inclusive" else part
        for key, part in parts.items()
    }  # fmt: skip
    order_parts = [named[k] if k != "inclusive" else named[k].drop("unclosed") for k in named]
    frame = pl.DataFrame(
        {"phase": _phase_order(mapping, order_parts, has_unattributed)},
        schema={"phase": pl.String},
    )
    for part in named.values():
        frame = frame.join(part, on="phase", how="left", maintain_order="left")
    frame = frame.with_columns(pl.col(c).fill_null(0).cast(_I64) for c in _COUNT_COLUMNS)
    gpu_wall = _largest_remainder(
        [shares.get(p, Fraction(0)) for p in frame["phase"].to_list()], gpu_union
    )
    window_ns = window[1] - window[0]
    frame = frame.with_columns(pl.Series("gpu_wall_ns", gpu_wall, dtype=_I64)).with_columns(
        (pl.col("gpu_wall_ns") + pl.col("cpu_wall_ns")).alias("wall_ns")
    )
    return frame.with_columns(
        (pl.col("wall_ns") / window_ns if window_ns > 0 else pl.lit(0.0)).alias("share")
    )


def _breakdown(
    trace: Trace,
    mapping: PhaseRules,
    pid: int | None,
    window: tuple[int, int],
    gtid: int | None,
    cpu_ranges: pl.DataFrame,
    index: PhaseIndex,
    shared: AttributionContext,
) -> PhaseBreakdown:
    ws, we = window
    # a range inside another of the same phase adds no time of its own: counted once (every
    # range still bounds the segments: the innermost phase changes at its ends)
    inclusive = cpu_ranges.group_by("phase").agg(
        (pl.col("e") - pl.col("s")).filter(pl.col("counted")).sum().cast(_I64)
        .alias("cpu_inclusive_ns"),
        pl.col("unclosed").sum().cast(_I64).alias("unclosed"),
    )
    ops, launches = _process_ops(trace, index, pid, window, shared)
    has_unattributed = bool(ops.select((pl.col("phase") == UNATTRIBUTED_GPU).any()).item())
    kernels = (
        ops.lazy()
        .filter(_in_window(window) & (pl.col("op_kind") == "kernel"))
        .group_by("phase")
        .agg(pl.len().cast(_I64).alias("kernels"))
        .collect()
    )
    kernel_names = (
        _kernel_names(ops, _in_window(window), ws, we) if "name" in ops.columns else []
    )
    islands = _islands(ops, window)
    del ops
    segments = _segments(islands, cpu_ranges, ws, we)
    gpu, shares, gpu_union = _gpu_part(islands, segments)
    del islands
    cpu = _cpu_part(segments, _driver_points(index, gtid))
    del segments
    parts = {"gpu": gpu, "cpu": cpu, "inclusive": inclusive, "launches": launches,
             "kernels": kernels}  # fmt: skip
    frame = _assemble(mapping, parts, shares, gpu_union, window, has_unattributed)
    unclosed = int(frame["unclosed"].sum())
    notes = graph_notes(trace, pid, window) if pid is not None else []
    return PhaseBreakdown(
        ws, we, frame.select(list(FRAME_SCHEMA)), pid, gtid, gpu_union, mapping.name, unclosed,
        graph_notes=notes, kernel_names=kernel_names,
    )  # fmt: skip


SEGMENT_SCHEMA = {
    "start": _I64, "end": _I64, "phase": pl.String, "share": pl.Float64, "gpu": pl.Boolean,
}  # fmt: skip
"""Columns of :func:`exclusive_segments`."""


def exclusive_segments(
    trace: Trace,
    *,
    rules: PhaseRules | str | None = None,
    pid: int | None = None,
    window: WindowSpec | str | None = None,
    context: AttributionContext | None = None,
) -> pl.DataFrame:
    """The exclusive timeline itself, as the breakdown sums it (rule 2): every elementary
    segment ``[start, end)`` of the window with the phase it belongs to and that phase's
    ``share`` of it (1 while the GPU is idle, when it is the driver thread's innermost phase;
    ``1 / n`` to each of the *n* phases whose GPU work runs), ``gpu`` telling which.
    Summed per phase, ``(end - start) * share`` is the breakdown's ``wall_ns`` before its
    rounding to integer ns (:data:`SEGMENT_SCHEMA` columns, by start then phase;
    :func:`exclusive_slices` is the same timeline with adjacent segments merged)."""
    mapping = rules_for(PHASES, DOMAIN, rules)
    b = exclusive_phase_times(trace, rules=mapping, pid=pid, window=window, context=context)
    if b.window_ns <= 0:
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    with attribution_context(trace, mapping, context) as shared:
        parts = _owned_segments(trace, b, shared, None)
    return (
        parts.with_columns(
            pl.col("phase").cast(pl.String),
            pl.when(pl.col("n") > 0).then(1.0 / pl.col("n")).otherwise(1.0).alias("share"),
            (pl.col("n") > 0).alias("gpu"),
        )
        .select(pl.col(c).cast(t) for c, t in SEGMENT_SCHEMA.items())
        .sort("start", "phase")
    )  # fmt: skip


SLICE_SCHEMA = {"phase": pl.String, "start": _I64, "end": _I64, "sharing": _I64}
"""Columns of :func:`exclusive_slices`."""


def exclusive_slices(
    trace: Trace, b: PhaseBreakdown, context: AttributionContext, ops: pl.DataFrame | None = None
) -> pl.DataFrame:
    """:func:`exclusive_segments` of breakdown *b* (computed under *context*'s rules) with
    adjacent segments of one phase and the same split merged: ``phase, start, end, sharing``
    (*n*: the slice carries ``1 / n`` of its length), by phase, then start; what a timeline
    export's phase tracks draw. *ops*: the process's attributed GPU ops
    (:func:`~specnsys.attribution.launch.attributed_gpu_ops`) when the caller has them.

    The merge runs on the phases' codes, ranked by name: ``exclusive_segments`` (a string per
    segment, sorted) and a merge after it took 3.4 of an export's 9.4 s at 2M kernels, this
    1.8 s (docs/performance.md#issue-35-seventeenth-session-the-exports-phase-slices-and-its-
    gzip)."""
    if b.window_ns <= 0:
        return pl.DataFrame(schema=SLICE_SCHEMA)
    owned = _owned_segments(trace, b, context, ops)
    names = owned.select(pl.col("phase").unique())["phase"]
    rank = dict(zip(names.to_physical().to_list(), _name_ranks(names.cast(pl.String)), strict=True))
    ordered = owned.select(
        pl.col("phase").to_physical().replace_strict(rank, return_dtype=_I64).alias("rank"),
        "phase", "start", "end", pl.max_horizontal("n", 1).cast(_I64).alias("sharing"),
    )  # fmt: skip
    del owned
    band = b.window_ns + 1  # every start lies in [window start, window end)
    if len(rank) * band < 2**62:  # one integer key: a third of a two-column sort's time
        key = pl.col("rank") * band + (pl.col("start") - b.window_start_ns)
        ordered = ordered.sort(key)
    else:
        ordered = ordered.sort("rank", "start")
    new = (
        (pl.col("rank") != pl.col("rank").shift(1))
        | (pl.col("sharing") != pl.col("sharing").shift(1))
        | (pl.col("start") != pl.col("end").shift(1))
    ).fill_null(True)
    # within a phase the segments are disjoint: a merged slice runs from its first segment's
    # start to its last one's end
    marked = ordered.select("phase", "start", "end", "sharing", new.alias("new"))
    last = marked["new"].shift(-1).fill_null(True)
    first = marked.filter(pl.col("new"))
    return first.select(
        pl.col("phase").cast(pl.String), "start", marked["end"].filter(last).alias("end"),
        "sharing",
    )  # fmt: skip


def _name_ranks(names: pl.Series) -> list[int]:
    """Each of *names* (distinct strings) ranked in the order a sort by the string gives."""
    order = names.arg_sort().to_list()
    ranks = [0] * len(order)
    for r, i in enumerate(order):
        ranks[i] = r
    return ranks


def _owned_segments(
    trace: Trace, b: PhaseBreakdown, shared: AttributionContext, ops: pl.DataFrame | None
) -> pl.DataFrame:
    """Every elementary segment of *b*'s window once per phase owning it: ``phase``
    (Categorical), ``start``, ``end``, ``n`` (the phases whose GPU work runs in it; 0: the GPU
    is idle and the driver thread's innermost phase owns it), GPU-idle segments first."""
    span = (b.window_start_ns, b.window_end_ns)
    ranges = phase_ranges(trace.connection, shared.rules)
    cpu_ranges = _cpu_ranges(ranges, b.driver_global_tid, *span)
    index = shared.phase_index(ranges=ranges)
    del ranges
    if ops is None:
        ops, _launches = _process_ops(trace, index, b.pid, span, shared)
    islands = _islands(ops, span)
    del ops
    segments = _segments(islands, cpu_ranges, *span).filter(pl.col("len") > 0)
    idle = lookup_phase(
        segments.filter(pl.col("n") == 0), _driver_points(index, b.driver_global_tid),
        t="t", gtid=None,
    )  # fmt: skip
    picked = _island_rows(islands, segments["t"])
    rows = segments[picked["i"]]
    gpu = pl.DataFrame([picked["phase"], rows["t"], rows["len"], rows["n"]]).filter(pl.col("n") > 0)
    unannotated = pl.lit(UNANNOTATED, pl.Categorical)
    return pl.concat([
        part.select(
            pl.col("phase").cast(pl.Categorical).fill_null(unannotated), pl.col("t").alias("start"),
            (pl.col("t") + pl.col("len")).alias("end"), pl.col("n").cast(pl.Int32),
        )
        for part in (idle, gpu)
    ])  # fmt: skip


def _island_rows(islands: pl.DataFrame, starts: pl.Series) -> pl.DataFrame:
    """Per island (``phase, a, b``) the row numbers ``i`` of the elementary segments inside it
    (*starts*: theirs, sorted; an island's bounds are segment bounds), with its ``phase``."""
    import numpy as np

    t = starts.to_numpy()
    first = np.searchsorted(t, islands["a"].to_numpy()).astype(np.int64)
    count = np.maximum(np.searchsorted(t, islands["b"].to_numpy()) - first, 0).astype(np.int64)
    owner, i = run_rows(first, count)
    return pl.DataFrame([islands["phase"].gather(owner), pl.Series("i", i)])


def _kernel_names(
    ops: pl.DataFrame, in_window: pl.Expr, ws: int, we: int
) -> list[KernelNameRow]:
    """Count and clipped time of the window's kernels per (phase, name), as rows."""
    clipped = pl.min_horizontal("end", pl.lit(we, _I64)) - pl.max_horizontal(
        "start", pl.lit(ws, _I64)
    )
    # Grouped by the codes first (the ops carry their names as categories), named after:
    # a missing name and a kernel called "(unnamed kernel)" are one row, as they always were.
    sums = (pl.col("count").sum(), pl.col("ns").sum())
    frame = (
        ops.lazy()
        .filter(in_window & (pl.col("op_kind") == "kernel"))
        .group_by("phase", "name")
        .agg(pl.len().cast(_I64).alias("count"), clipped.sum().cast(_I64).alias("ns"))
        .group_by(
            pl.col("phase").cast(pl.String).fill_null(UNANNOTATED),
            pl.col("name").cast(pl.String).fill_null("(unnamed kernel)"),
        )
        .agg(*sums)
        .sort(["phase", "name"])
        .collect()
    )
    return [
        {"phase": phase, "name": name, "count": count, "ns": ns}
        for phase, name, count, ns in frame.iter_rows()
    ]


def _phase_order(
    rules: PhaseRules, parts: Sequence[pl.DataFrame], has_unattributed: bool
) -> list[str]:
    """Rows of the breakdown: declared phases, then ``unannotated`` (and ``unattributed_gpu``),
    then phases found only in this trace (``{name}`` rules) by descending wall time."""
    names = list(dict.fromkeys([*rules.phases, UNANNOTATED]))
    if has_unattributed:
        names.append(UNATTRIBUTED_GPU)
    seen = set(names)
    found: dict[str, int] = {}
    for part in parts:  # every phase with any figure gets a row: never drop time
        cols = [c for c in ("floor_ns", "cpu_wall_ns", "cpu_inclusive_ns") if c in part.columns]
        for row in part.iter_rows(named=True):
            phase = row["phase"]
            if phase in seen:
                continue
            found[phase] = found.get(phase, 0) + sum(int(row[c] or 0) for c in cols)
    extra = sorted(found, key=lambda p: (-found[p], p))
    return names + extra
