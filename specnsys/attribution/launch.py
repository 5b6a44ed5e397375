"""Launch attribution (DESIGN.md section 4, rule 1): every GPU op gets the phase of its launch.

A GPU activity (kernel, memcpy, memset) is joined to the CUDA runtime call that launched it by
``(correlation_id, pid)``; its phase is the innermost phase range (``push_pop`` range of the
given NVTX domain whose text is a phase) open on the launching thread when that call started.

How "innermost open range at time t on thread g" is found (no interval join, no recursion)
-----------------------------------------------------------------------------------------
Push/pop ranges of one thread and domain nest properly (and any subset of them -- here the
phase-named ones -- nests too). Sweep each thread's range boundaries in time order, +1 at a
start, -1 at an end (ends before starts at equal times, since ranges are half-open
``[start, end)``; unclosed ranges have no end event, i.e. stay open to +infinity); the running
sum is the number of open phase ranges, the *level*. For properly nested ranges, the innermost
range open at ``t`` is the **last range started at or before t whose level right after its
start equals the level at t**: every range started later and still before ``t`` lies inside
it and has closed again, and those have a deeper level. So the lookup is two ASOF joins:

1. level at ``t`` = the level after the last boundary ``<= t`` of thread ``g``;
2. the innermost range = the last start ``<= t`` of thread ``g`` with exactly that level.

The found range is checked to really contain ``t`` (a safety net for malformed, crossing
ranges; a miss gives no phase). Zero-length ranges contain no instant and are ignored.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from specnsys.annotate import DOMAIN, PHASES
from specnsys.attribution.rules import REQUEST, PhaseRules, default_rules, resolve_rules

if TYPE_CHECKING:
    import duckdb

    from specnsys.ingest import Trace

__all__ = [
    "PhaseIndex",
    "UNANNOTATED",
    "UNATTRIBUTED_GPU",
    "gpu_ops_sql",
    "create_phase_index",
    "drop_phase_index",
    "gpu_ops_with_phase",
    "mapped_nvtx_sql",
    "phase_lookup_sql",
    "phase_ranges_sql",
    "rules_for",
]

UNANNOTATED = "unannotated"
"""Phase of time (or a launch) outside every phase range."""

UNATTRIBUTED_GPU = "unattributed_gpu"
"""Phase of a GPU op whose launching runtime call is not in the trace."""


def mapped_nvtx_sql(rules: PhaseRules) -> str:
    """SELECT of the NVTX ranges with their mapped ``phase`` (NULL when no rule matches)."""
    return f"""
        SELECT id, global_tid AS gtid, pid, start AS s, "end" AS e, kind, depth,
               {rules.phase_sql()} AS phase
        FROM nvtx
        WHERE kind IN ('push_pop', 'start_end') AND start IS NOT NULL
    """


def phase_ranges_sql(rules: PhaseRules) -> str:
    """SELECT of the phase ranges under *rules*: mapped push/pop ranges of known threads."""
    return f"""
        SELECT id, gtid, pid, s, e, phase, depth
        FROM ({mapped_nvtx_sql(rules)})
        WHERE kind = 'push_pop' AND phase IS NOT NULL AND phase <> '{REQUEST}'
          AND gtid IS NOT NULL AND (e IS NULL OR e > s)
    """


@dataclass(frozen=True)
class PhaseIndex:
    """The two lookup relations of the innermost-range search (see the module docs), as
    names of tables built once by :func:`create_phase_index` and read by many lookups."""

    levels: str
    """(gtid, t, lvl): the open-range level on thread gtid after its boundaries at time t."""
    starts: str
    """(gtid, t, lvl, s, e, phase): every phase range start with the level right after it."""


def _boundary_ctes(rules: PhaseRules) -> str:
    return f"""
    pr AS ({phase_ranges_sql(rules)}),
    ev AS (
        SELECT gtid, s AS t, 1 AS d, 1 AS is_start, s, e, phase, depth, id FROM pr
        UNION ALL
        SELECT gtid, e AS t, -1 AS d, 0 AS is_start, s, e, phase, depth, id FROM pr
        WHERE e IS NOT NULL
    ),
    ev_ord AS (
        SELECT *, row_number() OVER w AS rn, sum(d) OVER (w ROWS UNBOUNDED PRECEDING) AS lvl
        FROM ev
        WINDOW w AS (
            PARTITION BY gtid ORDER BY t, is_start,
                -- starts at one instant: outer first; ends at one instant: inner first
                CASE WHEN is_start = 1 THEN depth ELSE -depth END NULLS LAST,
                CASE WHEN is_start = 1 THEN -coalesce(e, 9223372036854775807) ELSE -s END,
                CASE WHEN is_start = 1 THEN id ELSE -id END
        )
    )"""


def _levels_sql(rules: PhaseRules) -> str:
    return (
        f"WITH {_boundary_ctes(rules)} "
        "SELECT gtid, t, arg_max(lvl, rn) AS lvl FROM ev_ord GROUP BY gtid, t"
    )


def _starts_sql(rules: PhaseRules) -> str:
    return (
        f"WITH {_boundary_ctes(rules)} "
        "SELECT gtid, t, lvl, s, e, phase FROM ev_ord WHERE is_start = 1"
    )


def create_phase_index(con: duckdb.DuckDBPyConnection, rules: PhaseRules) -> PhaseIndex:
    """Materialize the lookup relations once, for several lookups on one trace; the caller
    drops them with :func:`drop_phase_index`."""
    stem = f"_specnsys_phase_index_{uuid.uuid4().hex}"
    index = PhaseIndex(f"{stem}_levels", f"{stem}_starts")
    con.execute(f"CREATE TEMP TABLE {index.levels} AS {_levels_sql(rules)}")
    con.execute(f"CREATE TEMP TABLE {index.starts} AS {_starts_sql(rules)}")
    return index


def drop_phase_index(con: duckdb.DuckDBPyConnection, index: PhaseIndex) -> None:
    for name in (index.levels, index.starts):
        con.execute(f"DROP TABLE IF EXISTS {name}")


def phase_lookup_sql(points: str, rules: PhaseRules, index: PhaseIndex | None = None) -> str:
    """SQL adding ``phase`` (innermost open phase range, NULL if none) to every row of *points*.

    *points* is a SELECT with columns ``_gtid`` (thread) and ``_t`` (time) among others; the
    result has all of its columns plus ``phase``, under the name-mapping *rules* (read from
    the prebuilt *index* when given).
    """
    levels = index.levels if index else f"({_levels_sql(rules)})"
    starts = index.starts if index else f"({_starts_sql(rules)})"
    # Each ASOF LEFT JOIN keeps every left row exactly once, so the point columns ride along
    # (no row numbering and join back).
    return f"""
    WITH q_lvl AS (
        SELECT q.*, l.lvl AS _lvl
        FROM ({points}) q ASOF LEFT JOIN {levels} l ON q._gtid = l.gtid AND q._t >= l.t
    )
    SELECT q.* EXCLUDE (_lvl),
           CASE WHEN q._lvl > 0 AND st.s <= q._t AND (st.e IS NULL OR q._t < st.e)
                THEN st.phase END AS phase
    FROM q_lvl q ASOF LEFT JOIN {starts} st
      ON q._gtid = st.gtid AND q._lvl = st.lvl AND q._t >= st.t
    """


def gpu_ops_sql(rules: PhaseRules, index: PhaseIndex | None = None) -> str:
    """SELECT of every GPU op with its launch call and phase under *rules*."""
    points = """
        WITH ops AS (
            SELECT 'kernel' AS op_kind, start, "end", device_id, stream_id, correlation_id,
                   pid, short_name AS name FROM kernels
            UNION ALL
            SELECT 'memcpy', start, "end", device_id, stream_id, correlation_id, pid,
                   coalesce(copy_kind_name, 'memcpy') FROM memcpy
            UNION ALL
            SELECT 'memset', start, "end", device_id, stream_id, correlation_id, pid, 'memset'
            FROM memset
            UNION ALL
            -- whole-graph rows (--cuda-graph-trace=graph): the replay is one op of its launch
            SELECT 'graph', start, "end", device_id, stream_id, correlation_id, pid,
                   'graph ' || graph_id FROM graphs
        ),
        rt AS (
            SELECT pid AS rt_pid, correlation_id AS rt_corr, start AS api_start,
                   "end" AS api_end, name AS api_name, tid AS api_tid, global_tid AS _gtid
            FROM runtime
            WHERE event_class IN (0, 1) AND NOT coalesce(is_backtrace, false)
              AND correlation_id IS NOT NULL
            -- one launching call per (pid, correlation id): a duplicate can never double count
            QUALIFY row_number() OVER (
                PARTITION BY pid, correlation_id ORDER BY start, "end", global_tid) = 1
        )
        SELECT ops.*, rt.api_start, rt.api_end, rt.api_name, rt.api_tid,
               rt._gtid, rt.api_start AS _t
        FROM ops LEFT JOIN rt ON ops.correlation_id = rt.rt_corr AND ops.pid = rt.rt_pid
    """
    return f"""
        SELECT * EXCLUDE (_gtid, _t, phase), _gtid AS api_global_tid,
               CASE WHEN api_start IS NULL THEN '{UNATTRIBUTED_GPU}'
                    ELSE coalesce(phase, '{UNANNOTATED}') END AS phase
        FROM ({phase_lookup_sql(points, rules, index)})
    """


def gpu_ops_with_phase(
    trace: Trace,
    phases: Sequence[str] = PHASES,
    domain: str = DOMAIN,
    *,
    rules: PhaseRules | str | None = None,
) -> pl.DataFrame:
    """Every kernel, memcpy and memset of *trace* with the phase it was launched in.

    Columns: ``op_kind`` (``kernel``/``memcpy``/``memset``/``graph``: a whole-graph execution
    row of ``--cuda-graph-trace=graph``; with ``=node`` its kernels are ordinary rows), ``start``, ``end``, ``device_id``,
    ``stream_id``, ``correlation_id``, ``pid``, ``name``, the launching call's ``api_start``,
    ``api_end``, ``api_name``, ``api_tid``, ``api_global_tid`` (NULL when it is missing), and
    ``phase``: the innermost phase range open on the launching thread when the call started,
    ``unannotated`` when none was open, ``unattributed_gpu`` when the runtime row is missing.
    Runtime rows are restricted to ``event_class IN (0, 1)`` and not ``is_backtrace``, and one
    call is taken per ``(pid, correlation_id)``, so every op appears exactly once.

    Phases are *rules* (a :class:`PhaseRules`, a built-in set's name or a TOML path) when
    given, else specnsys's own convention: ranges of *domain* named one of *phases*.
    """
    mapping = rules_for(phases, domain, rules)
    sql = f'SELECT * FROM ({gpu_ops_sql(mapping)}) ORDER BY start, "end", op_kind, correlation_id'
    return trace.connection.sql(sql).pl()


def rules_for(phases: Sequence[str], domain: str, rules: PhaseRules | str | None) -> PhaseRules:
    """The rules in force: explicit *rules*, else the specnsys convention for *phases*/*domain*."""
    if rules is None:
        return default_rules(phases, domain)
    return resolve_rules(rules)
