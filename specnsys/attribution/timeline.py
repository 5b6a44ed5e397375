"""Exclusive phase timeline (DESIGN.md section 4, rules 2-4): phase times that sum to the window.

Method (one sorted sweep, all in DuckDB SQL; no per-event Python, no interval-pair joins):

* GPU ops of the analyzed process (with their launch phase, see :mod:`.launch`) are clipped to
  the window and merged, per phase, into disjoint *islands* (gaps-and-islands with a running
  max of ``end``). The islands give each phase's GPU busy time (an interval union).
* Every island start/end (+1/-1), every driver-thread phase-range start/end and both window
  ends are boundaries; consecutive boundaries bound elementary segments ``[t_i, t_{i+1})``.
  The running sum of the +1/-1 is ``n``, the number of distinct phases with GPU work running.
* A segment with ``n > 0`` is split evenly among the ``n`` running phases. To stay exact, time
  is counted in units of ``1/D`` ns with ``D = lcm(1..P)`` (``P`` = number of GPU phases), so a
  segment gives ``len * D / n`` units (an integer) to each; with ``F(t)`` the running total of
  those per-phase units, a phase's share of GPU-busy time is ``sum(F(b) - F(a))`` over its
  islands (an equi-join on boundary times). The per-phase totals sum to the union of GPU
  activity times ``D`` exactly; they are rounded to integer ns by largest remainder (ties in
  phase order), so the rounded GPU parts sum to the GPU-busy union exactly.
* A segment with ``n = 0`` belongs to the innermost phase range open on the driver thread at
  its start (the same level/ASOF lookup as launch attribution), else to ``unannotated``.

So ``sum(wall_ns) == window_ns`` exactly and every share lies in ``[0, 1]``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from specnsys.annotate import DOMAIN, PHASES
from specnsys.attribution.intervals import islands_sql
from specnsys.attribution.launch import (
    UNANNOTATED,
    UNATTRIBUTED_GPU,
    PhaseIndex,
    create_phase_index,
    drop_phase_index,
    gpu_ops_sql,
    mapped_nvtx_sql,
    phase_lookup_sql,
    phase_ranges_sql,
    rules_for,
)
from specnsys.attribution.rules import REQUEST, PhaseRules

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["PhaseBreakdown", "exclusive_phase_times"]

_I64 = pl.Int64


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

    @property
    def window_ns(self) -> int:
        return self.window_end_ns - self.window_start_ns


def _one(trace: Trace, sql: str, prm: dict[str, Any] | None = None) -> tuple | None:
    rows = trace.connection.execute(sql, prm).fetchall()
    return rows[0] if rows else None


def _choose_pid(trace: Trace, ops_name: str, rules: PhaseRules) -> int | None:
    row = _one(
        trace,
        f"SELECT pid FROM ({phase_ranges_sql(rules)}) WHERE pid IS NOT NULL "
        "GROUP BY pid ORDER BY count(*) DESC, pid LIMIT 1",
    )
    if row is None:
        row = _one(
            trace,
            f"SELECT pid FROM {ops_name} WHERE pid IS NOT NULL "
            "GROUP BY pid ORDER BY count(*) DESC, pid LIMIT 1",
        )
    if row is None:
        row = _one(trace, "SELECT min(pid) FROM nvtx WHERE kind IN ('push_pop', 'start_end')")
    return None if row is None or row[0] is None else int(row[0])


def _window(trace: Trace, ops_name: str, pid: int | None, rules: PhaseRules) -> tuple[int, int]:
    if pid is None:
        return 0, 0
    span = _one(
        trace,
        f"""SELECT min(s), max(e) FROM (
                SELECT start AS s, coalesce("end", start) AS e FROM nvtx
                WHERE pid = $pid AND kind IN ('push_pop', 'start_end') AND start IS NOT NULL
                  AND coalesce("end", start) >= start  -- backwards rows are ignored everywhere
                UNION ALL
                SELECT start, "end" FROM {ops_name} WHERE pid = $pid AND "end" >= start)""",
        {"pid": pid},
    )
    if span is None or span[0] is None:
        return 0, 0
    span_start, span_end = int(span[0]), int(span[1])
    req = _one(
        trace,
        f"""SELECT min(s), max(coalesce(e, $span_end)), count(*)
            FROM ({mapped_nvtx_sql(rules)}) WHERE pid = $pid AND phase = '{REQUEST}'""",
        {"pid": pid, "span_end": span_end},
    )
    if req is not None and req[2]:
        return int(req[0]), max(int(req[0]), int(req[1]))
    return span_start, span_end


def _islands_sql(ops_name: str) -> str:
    """Per phase, its GPU ops (clipped to the window) merged into disjoint islands ``[a, b)``."""
    clipped = f"""(
        SELECT phase, greatest(start, $ws) AS s, least("end", $we) AS e
        FROM {ops_name}
        WHERE pid = $pid AND start < $we AND "end" > $ws AND "end" > start
    )"""
    return islands_sql(clipped, "phase")


def _segments_sql(islands_name: str, rules: PhaseRules) -> str:
    """Elementary segments ``[t, t_next)`` between all boundaries, with ``n`` (GPU phases
    running) and ``len``; see the module docs."""
    return f"""
    WITH cpu_r AS (
        SELECT greatest(s, $ws) AS s, least(coalesce(e, $we), $we) AS e
        FROM ({phase_ranges_sql(rules)})
        WHERE gtid = $gtid AND s < $we AND coalesce(e, $we) > $ws
    ),
    bnd AS (
        SELECT a AS t, 1 AS d FROM {islands_name}
        UNION ALL SELECT b, -1 FROM {islands_name}
        UNION ALL SELECT s, 0 FROM cpu_r
        UNION ALL SELECT e, 0 FROM cpu_r
        UNION ALL SELECT $ws::BIGINT, 0
        UNION ALL SELECT $we::BIGINT, 0
    ),
    pts AS (SELECT t, sum(d) AS d FROM bnd GROUP BY t),
    seg0 AS (
        SELECT t, lead(t) OVER (ORDER BY t) AS t_next,
               sum(d) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING) AS n
        FROM pts
    )
    SELECT t, n, coalesce(t_next - t, 0) AS len FROM seg0
    """


def _largest_remainder(floor: pl.Series, rem: pl.Series, target: int) -> pl.Series:
    """Add 1 to the ``target - sum(floor)`` entries with the largest remainders (ties: order)."""
    deficit = target - int(floor.sum())
    if deficit <= 0 or floor.len() == 0:
        return floor
    order = pl.DataFrame({"rem": rem, "i": range(rem.len())}).with_row_index("pos")
    chosen = order.sort(["rem", "i"], descending=[True, False]).head(deficit)["pos"]
    bump = pl.Series([0] * floor.len(), dtype=_I64).scatter(chosen, 1)
    return floor + bump


def exclusive_phase_times(
    trace: Trace,
    phases: Sequence[str] = PHASES,
    domain: str = DOMAIN,
    pid: int | None = None,
    *,
    rules: PhaseRules | str | None = None,
) -> PhaseBreakdown:
    """Exclusive wall time per phase of process *pid* (DESIGN.md section 4, rule 2).

    Phases are named by *rules* (a :class:`PhaseRules`, a built-in set's name or a TOML path;
    see :mod:`.rules`) or, by default, by specnsys's convention: push/pop ranges of *domain*
    named one of *phases*. *pid* defaults to the process with the most phase ranges (or,
    without any, the most GPU ops). The window runs from its first ``request`` start to its
    last ``request`` end, or spans its NVTX ranges and GPU ops when it has no ``request``
    range. The driver thread is its thread with the most phase ranges. See
    :class:`PhaseBreakdown` for the columns.
    """
    con = trace.connection
    mapping = rules_for(phases, domain, rules)
    # GPU ops with their launch phase stay inside DuckDB (a temp table of five columns): on a
    # trace with tens of millions of kernels nothing per-op is materialized in Python.
    ops_name = f"_specnsys_ops_{uuid.uuid4().hex}"
    index = create_phase_index(con, mapping)  # built once, read by every lookup below
    try:
        con.execute(
            f"""CREATE TEMP TABLE {ops_name} AS
                SELECT op_kind, start, "end", pid, phase FROM ({gpu_ops_sql(mapping, index)})"""
        )
        return _breakdown(trace, ops_name, mapping, pid, index)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {ops_name}")
        drop_phase_index(con, index)


def _breakdown(
    trace: Trace, all_ops: str, mapping: PhaseRules, pid: int | None, index: PhaseIndex
) -> PhaseBreakdown:
    con = trace.connection
    if pid is None:
        pid = _choose_pid(trace, all_ops, mapping)
    ws, we = _window(trace, all_ops, pid, mapping)
    row = None
    if pid is not None:
        row = _one(
            trace,
            f"SELECT gtid FROM ({phase_ranges_sql(mapping)}) WHERE pid = $pid "
            "GROUP BY gtid ORDER BY count(*) DESC, gtid LIMIT 1",
            {"pid": pid},
        )
    gtid = None if row is None else int(row[0])

    ops_name = f"{all_ops}_mine"
    con.execute(
        f"""CREATE TEMP TABLE {ops_name} AS SELECT * FROM {all_ops}
            WHERE pid = $pid AND start < $we AND "end" > $ws AND "end" > start""",
        {"pid": pid, "ws": ws, "we": we},
    )
    islands, segments = f"{ops_name}_islands", f"{ops_name}_seg"
    try:
        # The sweep is materialized once (two temp tables) and read by every query below.
        con.execute(
            f"CREATE TEMP TABLE {islands} AS {_islands_sql(ops_name)}",
            {"pid": pid, "ws": ws, "we": we},
        )
        con.execute(
            f"CREATE TEMP TABLE {segments} AS {_segments_sql(islands, mapping)}",
            {"gtid": gtid, "ws": ws, "we": we},
        )
        union_row = con.execute(
            f"""SELECT coalesce(sum(len) FILTER (WHERE n > 0), 0)::BIGINT,
                       coalesce(max(n), 0)::BIGINT FROM {segments}"""
        ).fetchall()
        gpu_union, max_running = int(union_row[0][0]), int(union_row[0][1])
        # Exact even splits need a common denominator of every running-phase count n that
        # occurs: lcm(1..max n), not lcm(1..number of phases) (which overflows for many phases).
        denom = math.lcm(*range(1, max_running + 1)) if max_running else 1
        # 64-bit running sums suffice (and are much faster) while window x D fits in them
        wide = "BIGINT" if (we - ws + 1) * denom < 2**62 else "HUGEINT"
        gpu = con.sql(
            f"""WITH u AS (
                    SELECT t, CASE WHEN n > 0 THEN len::{wide} * $D // n
                                   ELSE 0::{wide} END AS u
                    FROM {segments}
                ),
                seg AS (
                    SELECT t, coalesce(sum(u) OVER (ORDER BY t ROWS BETWEEN UNBOUNDED
                                                    PRECEDING AND 1 PRECEDING), 0)::{wide} AS f
                    FROM u
                ),
                isl_f AS (
                    SELECT i.phase, i.b - i.a AS busy, fb.f - fa.f AS units
                    FROM {islands} i JOIN seg fa ON fa.t = i.a JOIN seg fb ON fb.t = i.b
                ),
                per AS (SELECT phase, sum(busy)::BIGINT AS gpu_busy_ns,
                               sum(units)::{wide} AS units FROM isl_f GROUP BY phase)
                SELECT phase, gpu_busy_ns, (units // $D)::BIGINT AS floor_ns,
                       (units % $D)::BIGINT AS rem
                FROM per""",
            params={"D": denom},
        ).pl()
        points = f"SELECT $gtid::BIGINT AS _gtid, t AS _t, len, n FROM {segments} WHERE len > 0"
        cpu = con.sql(
            f"""SELECT coalesce(phase, '{UNANNOTATED}') AS phase,
                       sum(len) FILTER (WHERE n = 0)::BIGINT AS cpu_wall_ns,
                       sum(len)::BIGINT AS cpu_exclusive_ns
                FROM ({phase_lookup_sql(points, mapping, index)}) GROUP BY 1""",
            params={"gtid": gtid},
        ).pl()
        kernels = con.sql(
            f"""SELECT phase, count(*)::BIGINT AS kernels FROM {ops_name}
                WHERE op_kind = 'kernel' GROUP BY phase"""
        ).pl()
        has_unattributed = bool(
            con.execute(
                f"SELECT count(*) FROM {all_ops} WHERE pid = $pid AND phase = '{UNATTRIBUTED_GPU}'",
                {"pid": pid},
            ).fetchall()[0][0]
        )
    finally:
        for name in (ops_name, islands, segments):
            con.execute(f"DROP TABLE IF EXISTS {name}")

    window_prm = {"gtid": gtid, "ws": ws, "we": we}
    inclusive = con.sql(
        f"""SELECT phase, sum(least(coalesce(e, $we), $we) - greatest(s, $ws))::BIGINT
                   AS cpu_inclusive_ns,
                   count(*) FILTER (WHERE e IS NULL)::BIGINT AS unclosed
            FROM ({phase_ranges_sql(mapping)})
            WHERE gtid = $gtid AND s < $we AND coalesce(e, $we) > $ws GROUP BY phase""",
        params=window_prm,
    ).pl()
    launch_points = """
        SELECT global_tid AS _gtid, start AS _t FROM runtime
        WHERE pid = $pid AND event_class IN (0, 1) AND NOT coalesce(is_backtrace, false)
          AND name ILIKE '%launch%' AND start >= $ws AND start < $we
    """
    launches = con.sql(
        f"""SELECT coalesce(phase, '{UNANNOTATED}') AS phase, count(*)::BIGINT AS launches
            FROM ({phase_lookup_sql(launch_points, mapping, index)}) GROUP BY 1""",
        params={"pid": pid, "ws": ws, "we": we},
    ).pl()
    parts = (gpu, cpu, inclusive, launches, kernels)
    frame = pl.DataFrame(
        {"phase": _phase_order(mapping, parts, has_unattributed)},
        schema={"phase": pl.String},
    )
    for part in parts:
        frame = frame.join(part, on="phase", how="left", maintain_order="left")
    frame = frame.with_columns(
        pl.col(c).fill_null(0).cast(_I64)
        for c in (
            "gpu_busy_ns",
            "floor_ns",
            "rem",
            "cpu_wall_ns",
            "cpu_exclusive_ns",
            "cpu_inclusive_ns",
            "unclosed",
            "launches",
            "kernels",
        )
    )
    gpu_wall = _largest_remainder(frame["floor_ns"], frame["rem"], gpu_union)
    window_ns = we - ws
    frame = frame.with_columns(gpu_wall.alias("gpu_wall_ns")).with_columns(
        (pl.col("gpu_wall_ns") + pl.col("cpu_wall_ns")).alias("wall_ns")
    )
    unclosed = int(frame["unclosed"].sum())
    frame = frame.with_columns(
        (pl.col("wall_ns") / window_ns if window_ns > 0 else pl.lit(0.0)).alias("share")
    ).select(
        "phase",
        "wall_ns",
        "share",
        "gpu_wall_ns",
        "cpu_wall_ns",
        "gpu_busy_ns",
        "kernels",
        "launches",
        "cpu_inclusive_ns",
        "cpu_exclusive_ns",
    )
    return PhaseBreakdown(ws, we, frame, pid, gtid, gpu_union, mapping.name, unclosed)


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
