"""Per-NVTX-range GPU projection, the semantics of NVIDIA's ``nsys stats -r nvtxgpuproj``.

This is the view of a trace *without* a phase vocabulary: for every NVTX range, which GPU work
its CPU code launched and where that work ran. It follows NVIDIA's report so the numbers can be
checked against it (tests/test_projection.py does, on the real corpus):

* ranges: push/pop and start/end ranges that end on the thread that started them
  (``end_global_tid IS NULL``); a range with no end runs to the last NVTX timestamp
  (definition rows included, as in nsys; a time beyond the ingest's +-2**60 ns bound, which
  only a definition row can have, is ignored);
* a GPU op (kernel, memcpy, memset) is *in* a range when the runtime call that launched it
  (same correlation id, same process) lies fully inside the range on the same thread;
  GPU execution time does not matter (the kernel may run long after the range closed);
* projected start/end = first op start / last op end of the range's ops (a span, not busy
  time), ``gpu_ops`` = distinct correlation ids; an op counts for every enclosing range;
* ranges without GPU ops are not listed.

One deliberate difference: whole-graph rows (``--cuda-graph-trace=graph``) count as GPU ops of
their launch call here; nsys 2022.4's report ignores them (its SQL reads only kernel, memcpy
and memset rows), which would make graph-launched work invisible. None of the corpus exports
has such rows, so the comparison with nsys is unaffected.

Beyond NVIDIA's report each range also gets ``gpu_busy_ns``: the union of its ops' intervals,
which is the time the GPU actually worked for it (the span can hide idle gaps).

Method (no interval-pair join): calls of a thread are numbered in start order, so the calls
inside ``[s, e]`` are a contiguous index run ``[i0, i1]`` found by two ASOF joins over the
distinct start times of the thread's calls (``i0``: the first index at the first start >= s,
``i1``: the last index at the last start <= e), so calls with tied starts are all taken, the
same on every run, as nsys does; the (range, call) pairs come from expanding that run with
``range(i0, i1 + 1)`` and an equi-join on (thread, index). The work is linear in the number
of pairs -- the number of (call, enclosing range) incidences, which NVIDIA's definition has to
count anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.intervals import islands_sql
from specnsys.attribution.rules import TORCH_OP_DECORATION
from specnsys.ingest.summary import MAX_ABS_TIME_NS

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["GROUP_BY", "nvtx_gpu_projection", "nvtx_gpu_projection_summary"]

_PLAUSIBLE = f"BETWEEN -{MAX_ABS_TIME_NS} AND {MAX_ABS_TIME_NS}"

_PROJECTION_SQL = f"""
WITH maxts AS (
    -- the last NVTX timestamp, as nsys takes it (definition rows included), of the times
    -- within the ingest's bound: it checks event times only, and a definition row at
    -- 2**63 - 1 overflowed ``end - start`` of every range without an end
    SELECT greatest(max(start) FILTER (WHERE start {_PLAUSIBLE}),
                    max("end") FILTER (WHERE "end" {_PLAUSIBLE})) AS m
    FROM nvtx
),
ops AS (
    SELECT start, "end", correlation_id, pid FROM kernels
    UNION ALL SELECT start, "end", correlation_id, pid FROM memcpy
    UNION ALL SELECT start, "end", correlation_id, pid FROM memset
    UNION ALL SELECT start, "end", correlation_id, pid FROM graphs
),
calls AS (
    -- runtime rows that launched GPU work, numbered per thread in start order
    SELECT DISTINCT r.global_tid AS gtid, r.start AS a_s, r."end" AS a_e,
           r.correlation_id AS corr, r.pid
    FROM runtime r SEMI JOIN ops o ON o.correlation_id = r.correlation_id AND o.pid = r.pid
    WHERE r.start IS NOT NULL AND r."end" IS NOT NULL AND r.global_tid IS NOT NULL
),
calls_i AS (
    SELECT *, row_number() OVER (PARTITION BY gtid ORDER BY a_s, a_e, corr) AS idx FROM calls
),
ranges AS (
    SELECT n.id, n.global_tid AS gtid, n.pid, n.tid, n.kind, n.depth, n.start AS s,
           coalesce(n."end", maxts.m) AS e,
           CASE WHEN n.domain IS NOT NULL THEN n.domain || ':' || n.text ELSE n.text END
               AS name
    FROM nvtx n, maxts
    WHERE n.kind IN ('push_pop', 'start_end') AND n.end_global_tid IS NULL
      AND n.start IS NOT NULL AND n.global_tid IS NOT NULL
),
starts AS (
    -- one row per (thread, start time): calls with tied starts share it, so each ASOF
    -- lookup below has exactly one match (on calls_i it took any one of the tied rows)
    SELECT gtid, a_s, min(idx) AS first_idx, max(idx) AS last_idx
    FROM calls_i GROUP BY gtid, a_s
),
lo AS (
    -- the first call starting at or after the range's start
    SELECT r.id, c.first_idx AS i0 FROM ranges r
    ASOF JOIN starts c ON r.gtid = c.gtid AND r.s <= c.a_s
),
hi AS (
    -- the last call starting at or before the range's end
    SELECT r.id, c.last_idx AS i1 FROM ranges r
    ASOF JOIN starts c ON r.gtid = c.gtid AND r.e >= c.a_s
),
pairs AS (
    SELECT r.id, r.gtid, r.e, unnest(range(lo.i0, hi.i1 + 1)) AS idx
    FROM ranges r JOIN lo USING (id) JOIN hi USING (id)
    WHERE lo.i0 <= hi.i1
),
inside AS (
    -- (range, op) incidences: the op's launching call lies fully inside the range
    SELECT DISTINCT p.id, c.corr, o.start AS s, o."end" AS e
    FROM pairs p JOIN calls_i c ON c.gtid = p.gtid AND c.idx = p.idx
    JOIN ops o ON o.correlation_id = c.corr AND o.pid = c.pid
    WHERE c.a_e <= p.e
),
busy AS (
    SELECT id, sum(b - a)::BIGINT AS gpu_busy_ns
    FROM ({islands_sql("(SELECT id, s, e FROM inside)", "id")}) GROUP BY id
),
proj AS (
    SELECT id, min(s) AS proj_start, max(e) AS proj_end, count(DISTINCT corr) AS gpu_ops
    FROM inside GROUP BY id
)
SELECT r.id AS range_id, r.name, CASE r.kind WHEN 'push_pop' THEN 'PushPop'
       ELSE 'StartEnd' END AS style, r.pid, r.tid, r.depth,
       r.s AS start, r.e - r.s AS duration,
       p.proj_start, p.proj_end - p.proj_start AS proj_duration, p.gpu_ops, busy.gpu_busy_ns
FROM proj p JOIN ranges r USING (id) JOIN busy USING (id)
ORDER BY r.s, r.id
"""


def nvtx_gpu_projection(trace: Trace) -> pl.DataFrame:
    """One row per NVTX range with GPU work, as ``nsys stats -r nvtxgpuproj`` defines it.

    Columns: ``range_id`` (the NVTX_EVENTS rowid, NVIDIA's RangeId), ``name`` (``domain:text``
    for named domains), ``style`` (PushPop/StartEnd), ``pid``, ``tid``, ``depth`` (push/pop
    nesting per thread and domain), ``start``/``duration`` (the CPU range), ``proj_start``/
    ``proj_duration`` (span of its GPU ops), ``gpu_ops`` (distinct correlation ids), and
    ``gpu_busy_ns`` (union of its ops' intervals).
    """
    # through the Arrow C stream, not ``.pl()``: that imports pyarrow, a large part of a warm
    # ``specnsys ranges`` (docs/performance.md#attribution-and-metrics)
    return pl.DataFrame(trace.connection.sql(_PROJECTION_SQL))


GROUP_BY = ("text", "name")
"""What ``ranges`` aggregates over: ``text``, the range's full text (nsys's own grouping), or
``name``, the text less per-call decoration (:data:`~specnsys.attribution.rules.
TORCH_OP_DECORATION`: torch's ``, seq = N`` / ``, op_id = N``), so the calls of one operator
are one row instead of one row each."""


def nvtx_gpu_projection_summary(projection: pl.DataFrame, group_by: str = "text") -> pl.DataFrame:
    """Per range name: instances, CPU time, projected GPU span and busy time, GPU ops.

    Sorted by total projected span, largest first; the summary NVIDIA's ``nvtx_gpu_proj_sum``
    recipe gives, plus busy time. The time sums are 128-bit integers: one duration fits int64
    (times lie within +-2**60 ns), a sum of eight need not, and Polars wraps an Int64 sum
    silently. *group_by* ``"name"`` strips the per-call decoration first (:data:`GROUP_BY`).
    """
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {GROUP_BY}, not {group_by!r}")
    if group_by == "name":
        projection = projection.with_columns(
            pl.col("name").str.replace_all(TORCH_OP_DECORATION, "")
        )
    return (
        projection.group_by("name", "style")
        .agg(
            pl.len().alias("instances"),
            _exact_sum("duration").alias("cpu_ns"),
            _exact_sum("proj_duration").alias("proj_ns"),
            _exact_sum("gpu_busy_ns").alias("gpu_busy_ns"),
            pl.col("gpu_ops").sum().alias("gpu_ops"),
        )
        .sort(["proj_ns", "name"], descending=[True, False])
    )


def _exact_sum(column: str) -> pl.Expr:
    """Sum of an int64 nanosecond column that cannot wrap."""
    return pl.col(column).cast(pl.Int128).sum()
