"""Depth and parent of every NVTX push/pop range, for the ``nvtx`` table's ``depth``/``parent``.

Pure Polars over a narrow read of the ranges (gathered before the NVTX rows are built, see
:func:`specnsys.ingest.build.build_model`), so that each slice of rows only looks its ranges up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import pyarrow as pa

INT64_MAX = 9223372036854775807


def nvtx_nesting(raw: pl.LazyFrame) -> pa.Table:
    """``(id, depth, parent)`` of every push/pop range of a raw ``NVTX_EVENTS`` frame, in id
    order.

    NVTX keeps one range stack per (thread, domain). depth = ranges of the same stack open
    when this one starts: one sorted sweep over start (+1) and end (-1) events, ends first at
    equal times (back-to-back ranges are siblings), a zero-length range's end after the
    starts at its instant, unclosed ranges open to the end. Start events sort among
    themselves by (start, -end, id), so the same pass numbers the ranges in start order
    (``ord``); parent = the latest range before this one in that order one level up (true
    for any properly nested set of intervals): an as-of join. Polars, not SQL: window
    functions over one huge partition were much slower (docs/performance.md#nvtx-nesting).
    """
    pp = raw.filter(pl.col("eventType").is_in([59, 70])).select(
        pl.col("__rowid").alias("id"),
        pl.col("globalTid").fill_null(-1).alias("g"),
        pl.col("domainId").fill_null(0).alias("d"),
        pl.col("start"),
        pl.col("end").fill_null(INT64_MAX).alias("end_key"),
    )
    # Running sums over the whole sorted frame, not per (g, d) group: every range has its end
    # event (unclosed ones at INT64_MAX) in its own group, so each group's deltas sum to zero
    # and the global running depth is the group's; ``ord`` then numbers all starts in sorted
    # order, which orders the starts of each group the same way and needs no re-sort below.
    nested = (
        _stack_events(pp)
        .sort(["g", "d", "t", "typ", "tie", "id"])
        .with_columns(
            (pl.col("delta").cast(pl.Int64).cum_sum() - pl.col("delta"))
            .cast(pl.Int32)
            .alias("depth"),
            (pl.col("delta") == 1).cast(pl.Int64).cum_sum().alias("ord"),
        )
        .filter(pl.col("delta") == 1)
        .select("id", "g", "d", "depth", "ord")
        .collect()
    )
    children = nested.with_columns((pl.col("depth") - 1).alias("up")).set_sorted("ord")
    candidates = nested.select(
        "g",
        "d",
        pl.col("depth").alias("up"),
        pl.col("ord").alias("parent_ord"),
        pl.col("id").alias("parent"),
    ).set_sorted("parent_ord")
    return (
        # Tie-safe: ``parent_ord`` is unique (a start's rank in the total order of the sort).
        children.join_asof(
            candidates,
            left_on="ord",
            right_on="parent_ord",
            by=["g", "d", "up"],
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .select("id", "depth", "parent")
        .sort("id")
        .to_arrow()
    )


def _stack_events(pp: pl.LazyFrame) -> pl.LazyFrame:
    """One start (+1) and one end (-1) event per range of *pp* (``id, g, d, start,
    end_key``), with the sort keys :func:`nvtx_nesting` orders them by: ``typ`` puts ends
    first at equal times, a zero-length range's end after the starts at its instant;
    ``tie`` orders starts by -end."""
    starts = pp.select(
        "id",
        "g",
        "d",
        pl.col("start").alias("t"),
        pl.lit(1, pl.Int8).alias("typ"),
        (-pl.col("end_key")).alias("tie"),
        pl.lit(1, pl.Int8).alias("delta"),
    )
    ends = pp.select(
        "id",
        "g",
        "d",
        pl.col("end_key").alias("t"),
        pl.when(pl.col("end_key") == pl.col("start"))
        .then(2)
        .otherwise(0)
        .cast(pl.Int8)
        .alias("typ"),
        pl.lit(0, pl.Int64).alias("tie"),
        pl.lit(-1, pl.Int8).alias("delta"),
    )
    return pl.concat([starts, ends])
