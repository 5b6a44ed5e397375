"""CUDA graph replays attributed to the phase their nodes were captured in.

NVTX ranges pushed while a graph is captured are CPU events of the capture; a replay emits
none, so by its launch alone every replayed kernel would land on the phase of the launching
``cudaGraphLaunch`` (a decode graph replayed from ``decode`` would be all ``decode``). With
``--cuda-graph-trace=node`` each replayed kernel, copy and memset carries the graph node it ran
as (``graph_node_id``), and ``graph_nodes`` says on which thread and when each node was created
(captured or added), or which node it was cloned from (``cudaGraphInstantiate`` and
``cudaGraphClone`` copy every node). So a node-level op takes the phase that was open on the
creating thread when the node it copies -- followed through ``original_graph_node_id``,
transitively, to a node that is no clone -- was created (:func:`graph_node_phases`).

Attribution stays exactly once per piece of work:

* a node-level op whose node resolves gets the node's phase; when no phase range was open at
  its creation (a graph captured outside every phase), the phase of its launch, as before;
* a node-level op whose node has no creation event in the trace (or whose clone chain breaks
  off) gets the phase of its launch, and :func:`graph_notes` says how many and how much GPU
  time;
* a whole-graph row (``--cuda-graph-trace=graph``) has no node detail: it gets the phase of its
  launch, with a note; if the same launch (process and correlation id) also has node-level ops
  in the trace, the row is not counted at all, since its ops already are
  (:func:`covered_graph_rows`).

All of this is joins: the clone chains are one recursive DuckDB query over the (small) node
table, the creation instants one as-of lookup in the phase index (the lookup the launches
use), the ops one hash join on ``(pid, graph_node_id)``. A trace without graph rows and node
events does none of it (:func:`has_graph_work`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.phase_map import PhaseIndex, lookup_phase

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "NODE_OP_TABLES",
    "covered_graph_rows",
    "graph_node_phases",
    "graph_notes",
    "has_graph_work",
    "resolved_nodes_sql",
]

#: The GPU-op tables whose rows carry ``graph_node_id`` when they ran as a graph node.
NODE_OP_TABLES = ("kernels", "memcpy", "memset")

#: Clone hops followed at most (an instantiated clone of a cloned graph is two): a bound that
#: also ends a cycle in malformed data, whose nodes then count as unresolved.
MAX_CLONE_HOPS = 32

_I64 = pl.Int64


def has_graph_work(trace: Trace) -> bool:
    """Whether *trace* has whole-graph rows or graph node events (from the row counts the
    trace already holds: no query). Node-level ops without any node event are found by
    :func:`graph_notes`, which also looks for them."""
    counts = trace.summary.row_counts
    return bool(counts.get("graphs", 0) or counts.get("graph_nodes", 0))


def resolved_nodes_sql(pid: int | None) -> str:
    """SELECT ``pid, graph_node_id, root_start, root_gtid``: every node of ``graph_nodes`` (of
    process ``$pid`` when *pid* is given) whose clone chain reaches a node that is no clone,
    with that node's creation instant and thread. One event per node is used (the earliest: a
    node is created once); a chain that breaks off (its original absent) or loops is dropped."""
    where = "AND pid = $pid" if pid is not None else ""
    return f"""
    WITH RECURSIVE nodes AS (
        SELECT pid, graph_node_id AS node, original_graph_node_id AS orig, start AS s,
               global_tid AS gtid
        FROM graph_nodes
        WHERE graph_node_id IS NOT NULL {where}
        QUALIFY row_number() OVER (
            PARTITION BY pid, graph_node_id
            ORDER BY start, global_tid, original_graph_node_id NULLS FIRST
        ) = 1
    ),
    chain AS (
        SELECT pid, node, node AS at, orig, 0 AS hops FROM nodes
        UNION ALL
        SELECT c.pid, c.node, n.node, n.orig, c.hops + 1
        FROM chain c JOIN nodes n ON n.pid = c.pid AND n.node = c.orig
        WHERE c.hops < {MAX_CLONE_HOPS}
    )
    SELECT c.pid, c.node AS graph_node_id, n.s AS root_start, n.gtid AS root_gtid
    FROM chain c JOIN nodes n ON n.pid = c.pid AND n.node = c.at
    WHERE c.orig IS NULL
    """


def graph_node_phases(trace: Trace, index: PhaseIndex, pid: int | None) -> pl.DataFrame | None:
    """``pid, graph_node_id, node_phase`` (Categorical) for every resolved node of *pid* (every
    process when None): the innermost phase range open on the thread that created the node's
    original when it was created (NULL when none was open). None when the trace has no node
    events (nothing to join)."""
    if not trace.summary.row_counts.get("graph_nodes", 0):
        return None
    params = {"pid": pid} if pid is not None else None
    roots: pl.DataFrame = trace.connection.sql(resolved_nodes_sql(pid), params=params).pl()
    if roots.height == 0:
        return None
    roots = roots.with_columns(pl.col(c).cast(_I64) for c in roots.columns)
    placed = lookup_phase(
        roots, index.change_points, t="root_start", gtid="root_gtid",
        keep=["pid", "graph_node_id"],
    )  # fmt: skip
    return placed.rename({"phase": "node_phase"})


def covered_graph_rows(trace: Trace, pid: int | None) -> pl.LazyFrame | None:
    """``pid, correlation_id`` of the launches that have node-level ops, when the trace also
    has whole-graph rows (their rows are then not counted: the ops are); None when there are
    no whole-graph rows or no node-level ops."""
    if not trace.summary.row_counts.get("graphs", 0):
        return None
    keys = []
    for table in NODE_OP_TABLES:
        frame = trace.table(table).filter(pl.col("graph_node_id").is_not_null())
        if pid is not None:
            frame = frame.filter(pl.col("pid") == pid)
        keys.append(frame.select(pl.col("pid", "correlation_id").cast(_I64)))
    covered = pl.concat(keys).unique().collect()
    return covered.lazy() if covered.height else None


def _node_ops_sql(pid: int | None) -> str:
    where = "AND pid = $pid" if pid is not None else ""
    return " UNION ALL ".join(
        f'SELECT pid, correlation_id, graph_node_id, start, "end" FROM {t} '
        f"WHERE graph_node_id IS NOT NULL {where}"
        for t in NODE_OP_TABLES
    )


def _has_node_ops(trace: Trace, pid: int | None) -> bool:
    where = "AND pid = $pid" if pid is not None else ""
    exists = " OR ".join(
        f"EXISTS (SELECT 1 FROM {t} WHERE graph_node_id IS NOT NULL {where})"
        for t in NODE_OP_TABLES
    )
    params = {"pid": pid} if pid is not None else None
    return bool(trace.connection.execute(f"SELECT {exists}", params).fetchall()[0][0])


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def graph_notes(trace: Trace, pid: int | None, window: tuple[int, int]) -> list[str]:
    """What graph work of *pid* overlapping *window* (``start, end`` ns) was attributed to the
    phase of its launch instead of the phase its node was captured in, and why, one line each
    (empty when nothing was): node-level ops without a node event, whole-graph rows, whole-graph
    rows not counted because their launch's node-level ops are, node events that no GPU op
    ran as. GPU times are op durations clipped to the window, summed."""
    if not has_graph_work(trace) and not _has_node_ops(trace, pid):
        return []
    ws, we = window
    params: dict[str, int] = {"ws": ws, "we": we}
    if pid is not None:
        params["pid"] = pid
    nodes = trace.summary.row_counts.get("graph_nodes", 0)
    none = "SELECT NULL::BIGINT AS pid, NULL::BIGINT AS graph_node_id WHERE false"
    resolved = resolved_nodes_sql(pid) if nodes else none
    where_pid = "AND pid = $pid" if pid is not None else ""
    clip = 'greatest(least(o."end", $we) - greatest(o.start, $ws), 0)'
    in_window = 'o.start < $we AND o."end" > $ws'
    sql = f"""
    WITH resolved AS ({resolved}),
    ops AS ({_node_ops_sql(pid)}),
    node_keys AS (SELECT DISTINCT pid, correlation_id FROM ops),
    known AS (SELECT DISTINCT pid, graph_node_id FROM graph_nodes WHERE true {where_pid}),
    per_op AS (
        SELECT o.*, r.graph_node_id IS NOT NULL AS found, k.graph_node_id IS NOT NULL AS named
        FROM ops o LEFT JOIN resolved r USING (pid, graph_node_id)
        LEFT JOIN known k USING (pid, graph_node_id)
    ),
    node_side AS (
        SELECT count(*) FILTER (WHERE NOT found AND {in_window}) AS lost_ops,
               COALESCE(sum({clip}) FILTER (WHERE NOT found AND {in_window}), 0) AS lost_ns,
               count(*) FILTER (WHERE named) AS named_ops
        FROM per_op o
    ),
    graph_side AS (
        SELECT count(*) FILTER (WHERE k.pid IS NULL) AS kept,
               COALESCE(sum({clip}) FILTER (WHERE k.pid IS NULL), 0) AS kept_ns,
               count(*) FILTER (WHERE k.pid IS NOT NULL) AS dropped
        FROM graphs o LEFT JOIN node_keys k USING (pid, correlation_id)
        WHERE {in_window} {"AND o.pid = $pid" if pid is not None else ""}
    ),
    node_events AS (
        SELECT count(*) AS n FROM graph_nodes WHERE true {where_pid}
    )
    SELECT lost_ops, lost_ns, named_ops, kept, kept_ns, dropped, node_events.n
    FROM node_side, graph_side, node_events
    """
    row = trace.connection.execute(sql, params).fetchall()[0]
    lost_ops, lost_ns, named_ops, kept, kept_ns, dropped, events = (int(v or 0) for v in row)
    return list(_lines(lost_ops, lost_ns, named_ops, kept, kept_ns, dropped, events))


def _lines(
    lost_ops: int, lost_ns: int, named_ops: int, kept: int, kept_ns: int, dropped: int,
    events: int,
) -> Iterable[str]:  # fmt: skip
    if lost_ops:
        yield (
            f"{lost_ops} CUDA graph node ops ({_ms(lost_ns)} of GPU time) have no graph node "
            "creation event in the trace (none for their node, or for the node it was cloned "
            "from): attributed to the phase of their graph launch, not "
            "to the phase their node was captured in"
        )
    if kept:
        yield (
            f"{kept} whole-graph replays ({_ms(kept_ns)} of GPU time) attributed to the phase "
            "of their graph launch: the trace has no per-node kernels for them (capture with "
            "--cuda-graph-trace=node to split a replay by the phases its nodes were captured in)"
        )
    if dropped:
        yield (
            f"{dropped} whole-graph rows not counted: the same launches' per-node kernels, "
            "copies and memsets are in the trace and are counted instead"
        )
    if events and not named_ops:
        yield (
            f"{events} CUDA graph node events, but no GPU op ran as one of those nodes "
            "(no kernel, copy or memset with a matching graphNodeId): graph work is "
            "attributed to the phase of its launch"
        )
