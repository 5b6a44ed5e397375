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

It runs in Polars and numpy (:func:`_projection_frame`): the calls sorted by thread and start
are numbered once, the runs come from two as-of joins, and a run's calls and each
call's ops are gathered by row number (``numpy.repeat``), not hash-joined. The same method in
DuckDB SQL (:data:`_PROJECTION_SQL`) serves an export with an op lacking a time or ending
before it starts, where the union's handling of such an interval is the SQL's; the tests hold
the two frames equal on generated traces and the hostile corpus
(docs/performance.md#issue-35-seventeenth-session-ranges-in-polars).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.intervals import islands_frame, islands_sql, run_rows
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

    The method of the module docs in Polars and numpy (:func:`_projection_frame`): the call
    runs are row numbers of the calls sorted by thread and start, so a range's calls are
    gathered, not joined. An export with an op without both times, or ending before it
    starts (which the union below would treat differently), takes :data:`_PROJECTION_SQL`,
    the same method in DuckDB SQL, which the tests hold the frame equal to.
    """
    if _odd_op_times(trace):
        # through the Arrow C stream, not ``.pl()``: that imports pyarrow, a large part of a
        # warm ``specnsys ranges`` (docs/performance.md#attribution-and-metrics)
        return pl.DataFrame(trace.connection.sql(_PROJECTION_SQL))
    return _projection_frame(trace)


_OP_TABLES = ("kernels", "memcpy", "memset", "graphs")
_I64 = pl.Int64


def _ops(trace: Trace) -> pl.LazyFrame:
    return pl.concat([
        trace.table(t).select(
            pl.col("start").cast(_I64), pl.col("end").cast(_I64),
            pl.col("correlation_id").cast(_I64).alias("corr"), pl.col("pid").cast(_I64),
        )
        for t in _OP_TABLES
    ])  # fmt: skip


def _odd_op_times(trace: Trace) -> bool:
    """Whether some GPU op lacks a time or ends before it starts."""
    odd = pl.col("start").is_null() | pl.col("end").is_null() | (pl.col("end") < pl.col("start"))
    return bool(_ops(trace).select(odd.any()).collect().item())


def _projection_frame(trace: Trace) -> pl.DataFrame:
    """:data:`_PROJECTION_SQL`'s rows, computed in Polars (every op has both times)."""
    import numpy as np

    ops = _ops(trace)
    calls = (
        trace.table("runtime")
        .filter(
            pl.col("start").is_not_null() & pl.col("end").is_not_null()
            & pl.col("global_tid").is_not_null()
        )
        .select(
            pl.col("global_tid").cast(_I64).alias("gtid"), pl.col("start").cast(_I64).alias("a_s"),
            pl.col("end").cast(_I64).alias("a_e"), pl.col("correlation_id").cast(_I64).alias("corr"),
            pl.col("pid").cast(_I64),
        )
        .join(ops.select("corr", "pid").unique(), on=["corr", "pid"], how="semi")
        # A run covers every call of its first and last start, so the order within one start
        # does not matter; nor do repeated calls (the SQL's DISTINCT): the sums below are a
        # min, a max, a count of distinct ids and a union, which a repeat leaves as they are.
        .sort("gtid", "a_s")
        .with_row_index("g")
        .collect()
    )  # fmt: skip
    ranges = _ranges(trace, calls)
    if ranges.height == 0:
        return _empty_projection()
    # each range's run of calls [i0, i1], expanded: (range row, call row)
    first = ranges["i0"].to_numpy().astype(np.int64)
    owner, g = run_rows(first, ranges["i1"].to_numpy().astype(np.int64) - first + 1)
    inside = calls["a_e"].to_numpy()[g] <= ranges["e"].to_numpy()[owner]  # the call ends inside
    owner, g = owner[inside], g[inside]
    # each call's ops, by call row: (range row, op)
    per_call = calls.lazy().select("g", "corr", "pid").join(ops, on=["corr", "pid"]).sort("g").collect()
    n_ops = np.bincount(per_call["g"].to_numpy().astype(np.int64), minlength=calls.height)
    run, op = run_rows((np.cumsum(n_ops) - n_ops)[g], n_ops[g])
    row = owner[run]
    hits = pl.DataFrame({"r": row}, schema={"r": _I64}).with_columns(
        per_call["corr"].gather(op), per_call["start"].gather(op).alias("s"),
        per_call["end"].gather(op).alias("e"),
    )  # fmt: skip
    return _projection_rows(ranges, hits)


def _ranges(trace: Trace, calls: pl.DataFrame) -> pl.DataFrame:
    """The module docs' ranges with their run of calls ``i0, i1`` (row numbers of *calls*:
    the first call starting at or after the range's start, the last starting at or before
    its end, on its thread); only those with a call in their run."""
    nvtx = trace.table("nvtx")
    plausible = pl.lit(-MAX_ABS_TIME_NS), pl.lit(MAX_ABS_TIME_NS)
    last = nvtx.select(
        pl.max_horizontal(
            pl.col("start").filter(pl.col("start").is_between(*plausible)).max(),
            pl.col("end").filter(pl.col("end").is_between(*plausible)).max(),
        )
    ).collect().item()  # fmt: skip
    ranges = (
        nvtx.filter(
            pl.col("kind").is_in(["push_pop", "start_end"]) & pl.col("end_global_tid").is_null()
            & pl.col("start").is_not_null() & pl.col("global_tid").is_not_null()
        )
        .select(
            "id", pl.col("global_tid").cast(_I64).alias("gtid"), "pid", "tid", "kind", "depth",
            pl.col("start").cast(_I64).alias("s"),
            pl.col("end").cast(_I64).fill_null(pl.lit(last, _I64)).alias("e"),
            pl.when(pl.col("domain").is_not_null())
            .then(pl.col("domain") + ":" + pl.col("text")).otherwise(pl.col("text")).alias("name"),
        )
        .collect()
    )  # fmt: skip
    starts = calls.lazy().group_by("gtid", "a_s").agg(
        pl.col("g").min().alias("i0"), pl.col("g").max().alias("i1")
    ).sort("a_s").collect()  # fmt: skip
    lo = ranges.lazy().select("id", "gtid", "s").sort("s").join_asof(
        starts.lazy().select("gtid", "a_s", "i0"), left_on="s", right_on="a_s", by="gtid",
        strategy="forward", check_sortedness=False,  # sorted just above: by time, not by thread
    ).select("id", "i0")  # fmt: skip
    hi = ranges.lazy().select("id", "gtid", "e").drop_nulls("e").sort("e").join_asof(
        starts.lazy().select("gtid", "a_s", "i1"), left_on="e", right_on="a_s", by="gtid",
        strategy="backward", check_sortedness=False,
    ).select("id", "i1")  # fmt: skip
    return (
        ranges.lazy().join(lo, on="id").join(hi, on="id")
        .filter(pl.col("i0").is_not_null() & pl.col("i1").is_not_null()
                & (pl.col("i0") <= pl.col("i1")))
        .collect()
    )  # fmt: skip


def _projection_rows(ranges: pl.DataFrame, hits: pl.DataFrame) -> pl.DataFrame:
    """The rows of :func:`nvtx_gpu_projection` from the ranges and their ops (``r``: the range
    row, ``corr``, ``s``, ``e``)."""
    proj = hits.group_by("r").agg(
        pl.col("s").min().alias("proj_start"), pl.col("e").max().alias("proj_end"),
        pl.col("corr").n_unique().alias("gpu_ops"),
    )  # fmt: skip
    busy = islands_frame(hits.lazy().select("r", "s", "e"), "r").group_by("r").agg(
        (pl.col("b") - pl.col("a")).sum().alias("gpu_busy_ns")
    )  # fmt: skip
    return (
        ranges.with_row_index("r").with_columns(pl.col("r").cast(_I64))
        .join(proj, on="r").join(busy, on="r")
        .sort("s", "id")
        .select(
            pl.col("id").alias("range_id"), "name",
            pl.when(pl.col("kind") == "push_pop").then(pl.lit("PushPop"))
            .otherwise(pl.lit("StartEnd")).alias("style"),
            "pid", "tid", "depth", pl.col("s").alias("start"),
            (pl.col("e") - pl.col("s")).alias("duration"), "proj_start",
            (pl.col("proj_end") - pl.col("proj_start")).alias("proj_duration"),
            "gpu_ops", "gpu_busy_ns",
        )
        .cast(_SCHEMA)
    )  # fmt: skip


def _empty_projection() -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMA)


_SCHEMA = pl.Schema({
    "range_id": _I64, "name": pl.String, "style": pl.String, "pid": _I64, "tid": _I64,
    "depth": pl.Int32, "start": _I64, "duration": _I64, "proj_start": _I64, "proj_duration": _I64,
    "gpu_ops": _I64, "gpu_busy_ns": _I64,
})  # fmt: skip


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
