"""The data of the timeline figure: one decode step (or any window) as lanes.

A performance engineer looks at one step of the loop to see *why* the GPU is idle: the CPU
phase ranges on the driver thread, the CUDA API calls it makes, and the GPU work those calls
launched (coloured by the phase they were launched in, docs/design.md#attribution rule 1), side by
side, so the asynchronous overlap and the idle gaps are visible. This module computes that
data from the trace (DuckDB SQL over the model tables); the renderer in
:mod:`specnsys.render.plots.timeline` only draws it.

Window: by default the decode step of median duration on the driver thread (a typical step,
not the first one, which pays warm-up), extended to the end of the last GPU op launched inside
it, so work that outlives the step on the host is shown whole. Decode steps are what
``analyze`` counts as ``steps`` (:func:`~specnsys.attribution.timeline.step_phase`): ``decode``
ranges, else the ``verify`` ranges of a speculative run or the ``forward`` ranges of a
baseline. ``step`` picks another decode step; ``start_ns``/``end_ns`` pick any window on the
session clock. All times in the result are nanoseconds relative to the window start.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from specnsys.attribution.context import AttributionContext, attribution_context
from specnsys.attribution.launch import (
    UNANNOTATED,
    attributed_gpu_ops,
    rules_for,
)
from specnsys.attribution.phase_map import phase_ranges_sql
from specnsys.attribution.timeline import PhaseBreakdown, exclusive_phase_times, step_phase
from specnsys.errors import BadInputError, UsageError
from specnsys.vocabulary import API_CALL_SQL, DOMAIN, PHASES, STEP_PHASE

if TYPE_CHECKING:
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace

__all__ = ["STEP_PHASE", "TimelineLanes", "timeline_lanes"]

_OPEN_END = 9_223_372_036_854_775_807  # an unclosed range stays open (to +infinity)


@dataclass(frozen=True)
class TimelineLanes:
    """Everything the timeline figure draws, for one window of one process.

    * ``cpu`` -- phase ranges on the driver thread clipped to the window: ``phase``,
      ``start_ns``, ``end_ns``, ``level`` (0 = outermost phase range, 1 = nested in one, ...);
    * ``api`` -- CUDA runtime/driver calls on the driver thread: ``name``, ``phase`` (the
      innermost phase open when the call started), ``start_ns``, ``end_ns``;
    * ``gpu`` -- kernels, memcpys and memsets of the process: ``lane`` ("GPU d · stream s"),
      ``op_kind``, ``name``, ``phase`` (launch phase), ``start_ns``, ``end_ns``;
    * ``gpu_gaps`` -- the window minus the union of all GPU work: ``start_ns``, ``end_ns``,
      ``cpu_phase`` (the driver thread's innermost phase for most of the gap);
    * ``cpu_exclusive_ns`` -- per phase, time it is the innermost open range on the driver
      thread within the window (sums to the window with ``unannotated``);
    * ``gpu_busy_ns`` -- union of GPU work within the window (None when the trace has none);
    * ``not_available`` -- lane -> reason, for lanes the capture cannot fill.
    """

    pid: int
    driver_tid: int | None
    window_start_ns: int
    window_end_ns: int
    label: str
    steps: int
    cpu: pl.DataFrame
    api: pl.DataFrame
    gpu: pl.DataFrame
    gpu_gaps: pl.DataFrame
    cpu_exclusive_ns: dict[str, int]
    gpu_busy_ns: int | None
    gpu_busy_by_phase_ns: dict[str, int] = field(default_factory=dict)
    not_available: dict[str, str] = field(default_factory=dict)
    data_warnings: tuple[str, ...] = ()
    """What the export's data-quality checks found (filled in by :func:`specnsys.timeline`)."""

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-able data (what :func:`specnsys.render.plots.timeline_data` takes)."""
        return {
            "pid": self.pid,
            "driver_tid": self.driver_tid,
            "window_start_ns": self.window_start_ns,
            "window_end_ns": self.window_end_ns,
            "window_ns": self.window_ns,
            "label": self.label,
            "steps": self.steps,
            "cpu": self.cpu.to_dicts(),
            "api": self.api.to_dicts(),
            "gpu": self.gpu.to_dicts(),
            "gpu_gaps": self.gpu_gaps.to_dicts(),
            "cpu_exclusive_ns": self.cpu_exclusive_ns,
            "gpu_busy_ns": self.gpu_busy_ns,
            "gpu_busy_by_phase_ns": self.gpu_busy_by_phase_ns,
            "not_available": self.not_available,
        }


def _rows(trace: Trace, sql: str, prm: Mapping[str, object]) -> list[tuple[Any, ...]]:
    """The rows of a DuckDB query (untyped tuples: each caller knows its columns' types)."""
    return trace.connection.execute(sql, prm).fetchall()


def _choose_window(
    trace: Trace,
    rules: PhaseRules,
    gtid: int,
    ws: int,
    we: int,
    step: int | None,
    ops_of: Callable[..., pl.DataFrame],
    phase: str = STEP_PHASE,
) -> tuple[int, int, str, int]:
    """(start, end, label, number of steps) of the step window; see the module docs."""
    steps = _rows(
        trace,
        f"""SELECT s, coalesce(e, $we) FROM ({phase_ranges_sql(rules)})
            WHERE gtid = $gtid AND phase = $phase AND s >= $ws AND s < $we
            ORDER BY s""",
        {"gtid": gtid, "ws": ws, "we": we, "phase": phase},
    )
    n = len(steps)
    if n == 0:
        if step is not None:
            raise UsageError(f"--step {step}: the trace has no decode steps (no '{phase}' ranges)")
        return ws, we, f"whole window (no decode steps: no '{phase}' ranges)", 0
    if step is None:
        by_length = sorted(range(n), key=lambda i: (steps[i][1] - steps[i][0], i))
        index, how = by_length[(n - 1) // 2], "median duration"
    elif 0 <= step < n:
        index, how = step, "chosen"
    else:
        raise UsageError(f"--step {step}: the trace has {n} decode steps (0 to {n - 1})")
    s, e = int(steps[index][0]), int(steps[index][1])
    launched = ops_of(launched_between=(s, e))
    tail = int(launched["end"].max()) if launched.height else e  # type: ignore[arg-type]
    if phase != STEP_PHASE:  # as analyze counts steps without decode ranges
        how += f"; steps are the '{phase}' ranges, there are no '{STEP_PHASE}' ranges"
    label = f"decode step {index + 1} of {n} ({how})"
    if tail > e:
        label += ", with the GPU work it launched"
    return s, max(e, tail), label, n


def timeline_lanes(
    trace: Trace,
    *,
    step: int | None = None,
    start_ns: int | None = None,
    end_ns: int | None = None,
    window_ms: tuple[float, float] | None = None,
    pid: int | None = None,
    rules: PhaseRules | str | None = None,
    phases: Sequence[str] = PHASES,
    domain: str = DOMAIN,
    context: AttributionContext | None = None,
) -> TimelineLanes:
    """Lanes of one window of *trace* (see the module docs and :class:`TimelineLanes`).

    *start_ns*/*end_ns* (session clock) override *step*, and *window_ms* (milliseconds
    from the start of the analysis window, e.g. ``(120.0, 125.5)``) overrides both; the
    process and its driver thread are the ones :func:`exclusive_phase_times` analyzes.
    *context* (an :class:`~specnsys.attribution.context.AttributionContext` of the same
    rules) supplies the phase index and the attributed calls when the caller has one.
    """
    mapping = rules_for(phases, domain, rules)
    breakdown = exclusive_phase_times(trace, pid=pid, rules=mapping, context=context)
    gtid = breakdown.driver_global_tid
    if breakdown.pid is None or gtid is None or breakdown.window_ns <= 0:
        raise BadInputError(
            f"{trace.path}: no phase ranges on any thread, so there is no timeline to draw"
        )
    pid = breakdown.pid
    with attribution_context(trace, mapping, context) as shared:
        index, runtime = shared.phase_index(), shared.runtime(pid)

        def ops_of(
            *, window: tuple[int, int] | None = None,
            launched_between: tuple[int, int] | None = None,
        ) -> pl.DataFrame:
            return attributed_gpu_ops(
                trace, index, pid=pid, details=True, runtime=runtime, window=window,
                launched_between=launched_between,
            )

        return _lanes(
            trace, mapping, breakdown, ops_of, step=step, start_ns=start_ns, end_ns=end_ns,
            window_ms=window_ms,
        )  # fmt: skip


def _lanes(
    trace: Trace,
    mapping: PhaseRules,
    breakdown: PhaseBreakdown,
    ops_of: Callable[..., pl.DataFrame],
    *,
    step: int | None,
    start_ns: int | None,
    end_ns: int | None,
    window_ms: tuple[float, float] | None,
) -> TimelineLanes:
    pid, gtid = breakdown.pid, breakdown.driver_global_tid
    assert pid is not None and gtid is not None
    ws, we, label, n_steps = _lane_window(
        trace, mapping, breakdown, ops_of, step, start_ns, end_ns, window_ms
    )
    caps = trace.summary.capabilities
    not_available: dict[str, str] = {}
    if not caps["cuda_api"].available:
        not_available["api"] = caps["cuda_api"].reason
        api_raw = pl.DataFrame(schema={"name": pl.String, "start": pl.Int64, "end": pl.Int64})
    else:
        api_raw = _api_calls(trace, gtid, ws, we)
    ranges = _ranges_with_levels(trace, mapping, gtid, api_raw, ws, we)
    cpu = (
        ranges.filter((pl.col("s") < we) & (pl.col("e") > ws))
        .select(
            "phase",
            (pl.max_horizontal("s", pl.lit(ws)) - ws).cast(pl.Int64).alias("start_ns"),
            (pl.min_horizontal("e", pl.lit(we)) - ws).cast(pl.Int64).alias("end_ns"),
            "level",
        )
        .sort("start_ns", "level")
    )
    segments, api = _segments_and_api(trace, ranges, api_raw, ws, we)
    cpu_exclusive = {
        str(r["phase"]): int(r["ns"])
        for r in segments.group_by("phase")
        .agg((pl.col("e") - pl.col("s")).sum().alias("ns"))
        .sort("ns", "phase", descending=[True, False])
        .iter_rows(named=True)
    }
    if not caps["gpu_activity"].available:
        not_available["gpu"] = caps["gpu_activity"].reason
        return TimelineLanes(
            pid, _tid(trace, gtid), ws, we, label, n_steps, cpu, api,
            pl.DataFrame(schema=_GPU_SCHEMA), pl.DataFrame(schema=_GAP_SCHEMA), cpu_exclusive,
            None, {}, not_available,
        )  # fmt: skip
    gpu = ops_of(window=(ws, we)).select(
        pl.format("GPU {} · stream {}", "device_id", "stream_id").alias("lane"),
        pl.col("op_kind").cast(pl.String),
        pl.col("name").cast(pl.String),
        pl.col("phase").cast(pl.String),
        (pl.max_horizontal("start", pl.lit(ws)) - ws).cast(pl.Int64).alias("start_ns"),
        (pl.min_horizontal("end", pl.lit(we)) - ws).cast(pl.Int64).alias("end_ns"),
    )
    gpu = gpu.sort("lane", "start_ns", "end_ns")
    busy, gaps = _gpu_busy_and_gaps(trace, gpu, segments, we - ws)
    return TimelineLanes(
        pid, _tid(trace, gtid), ws, we, label, n_steps, cpu, api, gpu, gaps, cpu_exclusive,
        busy, _busy_by_phase(gpu), not_available,
    )  # fmt: skip


_API_SCHEMA = {"name": pl.String, "phase": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}
_GPU_SCHEMA = {
    "lane": pl.String,
    "op_kind": pl.String,
    "name": pl.String,
    "phase": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}
_GAP_SCHEMA = {"start_ns": pl.Int64, "end_ns": pl.Int64, "cpu_phase": pl.String}


def _lane_window(
    trace: Trace,
    mapping: PhaseRules,
    breakdown: PhaseBreakdown,
    ops_of: Callable[..., pl.DataFrame],
    step: int | None,
    start_ns: int | None,
    end_ns: int | None,
    window_ms: tuple[float, float] | None,
) -> tuple[int, int, str, int]:
    """(start, end, label, steps in it) of the lanes: milliseconds of the analysis window,
    given ns bounds, or one decode step (:func:`_choose_window`)."""
    if window_ms is not None:
        a, b = window_ms
        start_ns = breakdown.window_start_ns + round(a * 1e6)
        end_ns = breakdown.window_start_ns + round(b * 1e6)
    if start_ns is not None or end_ns is not None:
        ws = breakdown.window_start_ns if start_ns is None else int(start_ns)
        we = breakdown.window_end_ns if end_ns is None else int(end_ns)
        if we <= ws:
            raise UsageError(f"empty timeline window: {ws} to {we} ns")
        return ws, we, f"{(we - ws) / 1e6:.3f} ms window", 0
    gtid = breakdown.driver_global_tid
    assert gtid is not None
    walls = dict(zip(breakdown.frame["phase"], breakdown.frame["wall_ns"], strict=True))
    return _choose_window(
        trace, mapping, gtid, breakdown.window_start_ns, breakdown.window_end_ns, step,
        ops_of, step_phase(breakdown.range_counts, walls),
    )  # fmt: skip


def _api_calls(trace: Trace, gtid: int, ws: int, we: int) -> pl.DataFrame:
    """The driver thread's CUDA API calls overlapping ``[ws, we)``, by start."""
    calls: pl.DataFrame = trace.connection.sql(
        f"""SELECT name, start, "end" FROM runtime
           WHERE global_tid = $gtid AND start < $we AND "end" > $ws
             AND {API_CALL_SQL}
           ORDER BY start, "end" """,
        params={"gtid": gtid, "ws": ws, "we": we},
    ).pl()
    return calls


def _ranges_with_levels(
    trace: Trace, mapping: PhaseRules, gtid: int, api_raw: pl.DataFrame, ws: int, we: int
) -> pl.DataFrame:
    """The driver thread's phase ranges (``phase, s, e, level``) from the earliest API call
    on (a call may start before the window), so every call finds the phase it started in;
    levels come from one sorted sweep (ranges of one thread nest: the running count of open
    ranges at a start is its level + 1)."""
    lo = min([ws, *api_raw["start"].to_list()[:1]])
    ranges: pl.DataFrame = trace.connection.sql(
        f"""WITH r AS (
                SELECT id, s, coalesce(e, $open) AS e, phase FROM ({phase_ranges_sql(mapping)})
                WHERE gtid = $gtid AND s < $we AND coalesce(e, $open) > $lo
            ),
            ev AS (
                SELECT id, s AS t, 1 AS d, 1 AS is_start, e FROM r
                UNION ALL SELECT id, e, -1, 0, e FROM r
            ),
            lv AS (
                SELECT id, sum(d) OVER (
                    ORDER BY t, is_start, CASE WHEN is_start = 1 THEN -e ELSE 0 END, id
                    ROWS UNBOUNDED PRECEDING) - 1 AS level, is_start
                FROM ev
            )
            SELECT r.phase, r.s, r.e, lv.level::INTEGER AS level
            FROM r JOIN lv ON lv.id = r.id AND lv.is_start = 1""",
        params={"gtid": gtid, "we": we, "lo": lo, "open": _OPEN_END},
    ).pl()
    return ranges


def _segments_and_api(
    trace: Trace, ranges: pl.DataFrame, api_raw: pl.DataFrame, ws: int, we: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(segments, api): the elementary segments between range boundaries, each owned by the
    innermost range covering it (the deepest level; uncovered time is unannotated), and the
    API calls with the phase each started in, both relative to *ws*."""
    con = trace.connection
    ranges_name = f"_specnsys_lanes_ranges_{uuid.uuid4().hex}"
    api_name = f"_specnsys_lanes_api_{uuid.uuid4().hex}"
    con.register(ranges_name, ranges.to_arrow())
    con.register(api_name, api_raw.to_arrow())
    try:
        segments = con.sql(
            f"""WITH b AS (
                    SELECT greatest(s, $ws) AS t FROM {ranges_name} WHERE s < $we AND e > $ws
                    UNION SELECT least(e, $we) FROM {ranges_name} WHERE s < $we AND e > $ws
                    UNION SELECT $ws::BIGINT UNION SELECT $we::BIGINT
                ),
                seg AS (SELECT t AS s, lead(t) OVER (ORDER BY t) AS e FROM b),
                own AS (
                    SELECT seg.s, arg_max(r.phase, r.level) AS phase
                    FROM seg JOIN {ranges_name} r ON r.s <= seg.s AND r.e >= seg.e
                    WHERE seg.e > seg.s GROUP BY seg.s
                )
                SELECT coalesce(own.phase, '{UNANNOTATED}') AS phase,
                       (seg.s - $ws)::BIGINT AS s, (seg.e - $ws)::BIGINT AS e
                FROM seg LEFT JOIN own USING (s) WHERE seg.e > seg.s ORDER BY seg.s""",
            params={"ws": ws, "we": we},
        ).pl()
        api = con.sql(
            f"""WITH own AS (
                    SELECT a.start, a."end", a.name, arg_max(r.phase, r.level) AS phase
                    FROM {api_name} a JOIN {ranges_name} r ON r.s <= a.start AND a.start < r.e
                    GROUP BY ALL
                )
                SELECT a.name, coalesce(own.phase, '{UNANNOTATED}') AS phase,
                       (greatest(a.start, $ws) - $ws)::BIGINT AS start_ns,
                       (least(a."end", $we) - $ws)::BIGINT AS end_ns
                FROM {api_name} a LEFT JOIN own USING (start, "end", name)
                ORDER BY start_ns, end_ns""",
            params={"ws": ws, "we": we},
        ).pl()
    finally:
        con.unregister(ranges_name)
        con.unregister(api_name)
    return segments, (pl.DataFrame(schema=_API_SCHEMA) if api.height == 0 else api)


def _gpu_busy_and_gaps(
    trace: Trace, gpu: pl.DataFrame, segments: pl.DataFrame, length: int
) -> tuple[int, pl.DataFrame]:
    """(busy ns, gaps): the union of the GPU work in the lanes' window of *length* ns
    (gaps-and-islands over a running max of end), and its complement, each gap with the CPU
    phase that overlaps it most."""
    con = trace.connection
    gpu_name = f"_specnsys_lanes_gpu_{uuid.uuid4().hex}"
    seg_name = f"_specnsys_lanes_seg_{uuid.uuid4().hex}"
    con.register(gpu_name, gpu.to_arrow())
    con.register(seg_name, segments.to_arrow())
    try:
        islands = f"""
            WITH o AS (
                SELECT start_ns AS s, end_ns AS e, max(end_ns) OVER (ORDER BY start_ns, end_ns
                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
                FROM {gpu_name} WHERE end_ns > start_ns
            ),
            g AS (SELECT *, sum(CASE WHEN prev_max IS NULL OR s > prev_max THEN 1 ELSE 0 END)
                      OVER (ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp FROM o),
            isl AS (SELECT min(s) AS a, max(e) AS b FROM g GROUP BY grp)
        """
        busy = con.execute(f"{islands} SELECT coalesce(sum(b - a), 0)::BIGINT FROM isl").fetchall()[
            0
        ][0]
        gaps = con.sql(
            f"""{islands},
                edges AS (
                    SELECT a AS t, 1 AS kind FROM isl UNION ALL SELECT b, 0 FROM isl
                    UNION ALL SELECT 0, 0 UNION ALL SELECT $len::BIGINT, 1
                ),
                ordered AS (SELECT t, kind, lead(t) OVER (ORDER BY t, kind) AS t_next,
                                   lead(kind) OVER (ORDER BY t, kind) AS next_kind FROM edges),
                gap AS (SELECT t AS start_ns, t_next AS end_ns FROM ordered
                        WHERE kind = 0 AND next_kind = 1 AND t_next > t),
                owner AS (
                    SELECT gap.start_ns, gap.end_ns, sg.phase,
                           sum(least(gap.end_ns, sg.e) - greatest(gap.start_ns, sg.s)) AS overlap
                    FROM gap JOIN {seg_name} sg ON sg.s < gap.end_ns AND sg.e > gap.start_ns
                    GROUP BY ALL
                )
                SELECT gap.start_ns::BIGINT AS start_ns, gap.end_ns::BIGINT AS end_ns,
                       first(owner.phase ORDER BY owner.overlap DESC, owner.phase) AS cpu_phase
                FROM gap LEFT JOIN owner USING (start_ns, end_ns)
                GROUP BY ALL ORDER BY start_ns""",
            params={"len": length},
        ).pl()
    finally:
        con.unregister(gpu_name)
        con.unregister(seg_name)
    return int(busy), gaps


def _busy_by_phase(gpu: pl.DataFrame) -> dict[str, int]:
    """Per launch phase, the union of its GPU op intervals (overlaps counted once)."""
    if gpu.height == 0:
        return {}
    merged = (
        gpu.sort("phase", "start_ns", "end_ns")
        .with_columns(
            pl.col("end_ns").cum_max().shift(1).over("phase").alias("prev_max"),
        )
        .with_columns(
            (pl.col("prev_max").is_null() | (pl.col("start_ns") > pl.col("prev_max")))
            .cum_sum()
            .over("phase")
            .alias("grp")
        )
        .group_by("phase", "grp")
        .agg(pl.col("start_ns").min().alias("a"), pl.col("end_ns").max().alias("b"))
        .group_by("phase")
        .agg((pl.col("b") - pl.col("a")).sum().alias("ns"))
        .sort("ns", descending=True)
    )
    return {str(r["phase"]): int(r["ns"]) for r in merged.iter_rows(named=True)}


def _tid(trace: Trace, gtid: int) -> int | None:
    rows = _rows(trace, "SELECT any_value(tid) FROM nvtx WHERE global_tid = $g", {"g": gtid})
    return None if not rows or rows[0][0] is None else int(rows[0][0])
