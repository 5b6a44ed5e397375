"""``step_table``: one row per decode step, the unit of a speculative step's cost model.

A step is one range of the run's step phase (``decode``; else ``verify`` in a speculative run
and ``forward`` in a baseline: :func:`~specnsys.attribution.timeline.step_phase`) on the
analysis's driver thread inside its window. Per step:

* ``duration_ns``: the step range's wall time;
* ``draft_ns``, ``verify_ns``, ``forward_ns``, ``sample_ns``: the wall time of that phase's
  ranges on the driver thread inside the step (ranges starting in the step, clipped to its end),
  so a step's parts never exceed its duration;
* ``proposed``/``accepted``: the sums of those marks emitted in the step, ``sequences`` their
  count (one ``accepted`` mark per sequence per step, DESIGN.md §3);
* ``batch``: the sequences decoded in the step: ``sequences`` where acceptance marks exist,
  else the ``request`` ranges open at the step's start (null without either);
* ``tokens``: the sum of ``tokens`` marks in the step (null without them).

A sum of marks that does not fit 64 bits (each payload does; a hostile export's may add up
past it) is null: not available for that step.

Everything is SQL over the model (ASOF joins place ranges and marks in their step), so the
cost is linear in ranges and marks.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.phase_map import mapped_nvtx_sql, phase_ranges_sql
from specnsys.attribution.timeline import driver_ranges_key
from specnsys.metrics.events import MARKS_WHERE, Scope
from specnsys.vocabulary import (
    ACCEPTED_MARK,
    DOMAIN,
    PROPOSED_MARK,
    REQUEST_PHASE,
    TOKENS_MARK,
)

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "STEP_COLUMNS",
    "STEP_PARTS",
    "STEP_PHASE_COLUMNS",
    "step_phase_times",
    "step_table",
]

#: The phases whose time inside each step is a column ``<phase>_ns``.
STEP_PARTS = ("draft", "verify", "forward", "sample")

STEP_COLUMNS = {
    "step": pl.Int64,
    "start_ns": pl.Int64,
    "duration_ns": pl.Int64,
    **{f"{p}_ns": pl.Int64 for p in STEP_PARTS},
    "sequences": pl.Int64,
    "proposed": pl.Int64,
    "accepted": pl.Int64,
    "batch": pl.Int64,
    "tokens": pl.Int64,
}


def step_table(trace: Trace, scope: Scope, step_phase: str) -> pl.DataFrame:
    """The steps of *scope* (see the module docs); :data:`STEP_COLUMNS`, ordered by start.

    Queried once per attribution context: the analysis's tails and ``collect``'s kept steps
    are the same table (the query is about 7 % of a small trace's analysis)."""
    if scope.driver_gtid is None:
        return pl.DataFrame(schema=STEP_COLUMNS)
    context = scope.context
    if context is None or context.trace is not trace or context.rules != scope.rules:
        return _step_query(trace, scope, step_phase)
    key = ("step_table", scope.pid, scope.driver_gtid, scope.start_ns, scope.end_ns, step_phase)
    if key not in context.frames:
        context.frames[key] = _step_query(trace, scope, step_phase)
    return context.frames[key]


def _step_query(trace: Trace, scope: Scope, step_phase: str) -> pl.DataFrame:
    """:func:`step_table`'s query, on the trace's connection."""
    con = trace.connection
    prm = {
        "gtid": scope.driver_gtid,
        "pid": scope.pid,
        "ws": scope.start_ns,
        "we": scope.end_ns,
        "step": step_phase,
        "parts": list(STEP_PARTS),
    }
    prm["domain"] = DOMAIN
    prm["names"] = [PROPOSED_MARK, ACCEPTED_MARK, TOKENS_MARK]
    mark_rows = f"""
        SELECT text AS name, payload_int AS v, start AS t, global_tid AS g FROM nvtx
        WHERE {MARKS_WHERE}
    """
    part_sums = ", ".join(
        f"coalesce(sum(p.ns) FILTER (WHERE p.phase = '{p}'), 0) AS {p}_ns" for p in STEP_PARTS
    )
    with _driver_sql(trace, scope) as driver:
        sql = f"""
    WITH driver AS ({driver}),
    steps AS (
        SELECT row_number() OVER (ORDER BY s, e) - 1 AS step, s, least(e, $we) AS e
        FROM driver WHERE phase = $step
    ),
    parts AS (
        SELECT st.step, r.phase, least(r.e, st.e) - r.s AS ns
        FROM (SELECT * FROM driver WHERE list_contains($parts, phase)) r
        ASOF JOIN steps st ON r.s >= st.s
        WHERE r.s < st.e
    ),
    mk AS (
        SELECT st.step, m.name, m.v
        FROM ({mark_rows}) m
        ASOF JOIN steps st ON m.t >= st.s
        WHERE m.t <= st.e AND m.g = $gtid
    ),
    requests AS (
        SELECT s, coalesce(e, $we) AS e FROM ({mapped_nvtx_sql(scope.rules)})
        WHERE phase = '{REQUEST_PHASE}' AND pid = $pid
    ),
    request_level AS (
        SELECT t, sum(sum(d)) OVER (ORDER BY t ROWS UNBOUNDED PRECEDING) AS n
        FROM (SELECT s AS t, 1 AS d FROM requests
              UNION ALL SELECT greatest(s, e) AS t, -1 AS d FROM requests)
        GROUP BY t
    ),
    per_part AS (SELECT step, {part_sums} FROM parts p GROUP BY step),
    per_mark AS (
        SELECT step,
               count(*) FILTER (WHERE name = '{ACCEPTED_MARK}') AS sequences,
               {_fitting_sum(PROPOSED_MARK)} AS proposed,
               {_fitting_sum(ACCEPTED_MARK)} AS accepted,
               {_fitting_sum(TOKENS_MARK)} AS tokens
        FROM mk GROUP BY step
    ),
    open_requests AS (
        SELECT st.step, o.n FROM steps st ASOF JOIN request_level o ON st.s >= o.t
    )
    SELECT st.step, st.s AS start_ns, st.e - st.s AS duration_ns,
           {", ".join(f"coalesce(pp.{p}_ns, 0) AS {p}_ns" for p in STEP_PARTS)},
           coalesce(pm.sequences, 0) AS sequences, pm.proposed, pm.accepted,
           CASE WHEN pm.sequences > 0 THEN pm.sequences
                WHEN o.n > 0 THEN o.n END AS batch,
           pm.tokens
    FROM steps st
    LEFT JOIN per_part pp USING (step)
    LEFT JOIN per_mark pm USING (step)
    LEFT JOIN open_requests o USING (step)
    ORDER BY st.step
    """
        frame: pl.DataFrame = con.sql(sql, params=_used(sql, prm)).pl()
    return frame.select(pl.col(c).cast(t) for c, t in STEP_COLUMNS.items())


def _fitting_sum(mark: str) -> str:
    """The step's sum of the *mark*'s payloads, NULL where it does not fit 64 bits: each
    payload does, their sum may not (a hostile export), and the step's value is then not
    available rather than an error or a wrapped number."""
    return f"TRY_CAST(sum(v) FILTER (WHERE name = '{mark}') AS BIGINT)"


STEP_PHASE_COLUMNS = {"step": pl.Int64, "phase": pl.String, "ns": pl.Int64}
"""Columns of :func:`step_phase_times`: one row per (decode step, phase inside it)."""


def step_phase_times(trace: Trace, scope: Scope, step_phase: str) -> pl.DataFrame:
    """Per decode step of *scope* (the steps of :func:`step_table`, numbered the same way),
    the time of every phase whose ranges start in it on the driver thread, clipped to the
    step's end (nested ranges of one phase once): :data:`STEP_PHASE_COLUMNS`, by step then
    phase. A phase with no range in a step has no row (its time there is 0)."""
    if scope.driver_gtid is None:
        return pl.DataFrame(schema=STEP_PHASE_COLUMNS)
    prm = {
        "gtid": scope.driver_gtid,
        "ws": scope.start_ns,
        "we": scope.end_ns,
        "step": step_phase,
    }
    with _driver_sql(trace, scope) as driver:
        sql = f"""
    WITH driver AS ({driver}),
    steps AS (
        SELECT row_number() OVER (ORDER BY s, e) - 1 AS step, s, least(e, $we) AS e
        FROM driver WHERE phase = $step
    )
    SELECT st.step, r.phase, sum(least(r.e, st.e) - r.s) AS ns
    FROM (SELECT * FROM driver WHERE phase <> $step) r
    ASOF JOIN steps st ON r.s >= st.s
    WHERE r.s < st.e
    GROUP BY ALL ORDER BY st.step, r.phase
    """
        frame: pl.DataFrame = trace.connection.sql(sql, params=_used(sql, prm)).pl()
    return frame.select(pl.col(c).cast(t) for c, t in STEP_PHASE_COLUMNS.items())


@contextlib.contextmanager
def _driver_sql(trace: Trace, scope: Scope) -> Iterator[str]:
    """SQL of the driver thread's counted phase ranges in the window (``s, e, phase``;
    unclosed ones ended at the window's end): the frame the breakdown left in the analysis's
    context (:func:`~specnsys.attribution.timeline.driver_ranges`), registered for the
    block, else derived from the model (a context of other rules, or none)."""
    context = scope.context
    key = driver_ranges_key(scope.driver_gtid, scope.start_ns, scope.end_ns)
    frame = None
    if context is not None and context.trace is trace and context.rules == scope.rules:
        frame = context.frames.get(key)
    if frame is None:
        yield f"""
        SELECT s, coalesce(e, $we) AS e, phase FROM ({phase_ranges_sql(scope.rules)})
        WHERE gtid = $gtid AND counted AND s >= $ws AND s < $we
        """
        return
    name = f"_specnsys_driver_{uuid.uuid4().hex}"
    trace.connection.register(name, frame.to_arrow())
    try:
        yield f"SELECT s, e, phase FROM {name}"
    finally:
        trace.connection.unregister(name)


def _used(sql: str, prm: Mapping[str, object]) -> dict[str, object]:
    """The parameters of *prm* that *sql* names (DuckDB refuses unused ones)."""
    return {k: v for k, v in prm.items() if f"${k}" in sql}
