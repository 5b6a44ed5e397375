"""Interval unions in SQL: the gaps-and-islands step shared by the timeline and the projection.

GPU busy time is an interval *union* (docs/design.md#attribution, rule 4), never a sum: overlapping
ops on several streams would otherwise count twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["islands_frame", "islands_sql", "run_rows"]


def run_rows(first: npt.NDArray[np.int64], count: npt.NDArray[np.int64]) -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.int64]
]:
    """Every row of the runs ``[first[i], first[i] + count[i])`` (counts >= 0), run after run:
    the run each belongs to and the row. numpy's repeat and arange, where a list per run
    exploded (or a join on row numbers) cost several times more on millions of rows (the
    export's phase slices, the NVTX projection; docs/performance.md, seventeenth session)."""
    import numpy as np

    owner = np.repeat(np.arange(first.size, dtype=np.int64), count)
    start = np.cumsum(count) - count  # each run's first position in the output
    rows = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(first - start, count)
    return owner, rows


def islands_sql(source: str, key: str) -> str:
    """SELECT ``key, a, b``: per *key*, the intervals ``[s, e)`` of *source* merged into
    disjoint islands.

    *source* is a relation (a name or a parenthesized SELECT) with columns *key*, ``s`` and
    ``e``. Sorted by start within each key, an interval opens a new island when it starts
    after every earlier interval ended (a running max of ``e``); touching intervals merge.
    """
    return f"""
    SELECT {key}, min(s) AS a, max(e) AS b FROM (
        SELECT *, sum(CASE WHEN prev_max IS NULL OR s > prev_max THEN 1 ELSE 0 END)
            OVER (PARTITION BY {key} ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp
        FROM (
            SELECT {key}, s, e, max(e) OVER (PARTITION BY {key} ORDER BY s, e
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
            FROM {source}
        )
    )
    GROUP BY {key}, grp
    """


def islands_frame(frame: pl.DataFrame | pl.LazyFrame, key: str) -> pl.DataFrame:
    """Polars twin of :func:`islands_sql` for a materialized frame: per *key*, the intervals
    ``[s, e)`` merged into disjoint islands ``a, b`` (touching intervals merge).

    One sort and a running max; far faster than SQL window functions on tens of millions of
    intervals (the running max is a sorted scan, not a framed window). A LazyFrame is read
    within the same plan (e.g. a filter and clip of a bigger frame).

    When the times fit, every key's intervals are shifted into a band of their own on one
    time axis (``key code x span``), so a single sort on start and a single running max serve
    all keys at once: no per-key window, which is what the memory peak of a 20M-op timeline
    was. Otherwise (or for an empty input) the per-key version runs.

    Intervals of one key (the findings' busy and queued ops) need no band and no key code:
    only their times are sorted (at 20M ops the key code was a dense rank, a sort of its own,
    and the key and its code went through the main sort beside the times)."""
    lazy = frame.lazy()
    key_type = lazy.collect_schema()[key]
    physical = pl.col(key).to_physical()
    lo, hi, least, most, missing, value = lazy.select(
        pl.col("s").min(), pl.col("e").max(), physical.min().alias("_least"),
        physical.max().alias("_most"), pl.col(key).null_count().alias("_missing"),
        pl.col(key).first().alias("_value"),
    ).collect().row(0)  # fmt: skip
    if lo is None or hi is None:
        return _islands_per_key(lazy, key, key_type)
    if least == most and missing == 0:
        return _islands_of_one_key(lazy, key, pl.lit(value, key_type))
    if isinstance(key_type, pl.Categorical):  # its codes are the band numbers
        code, top = physical, most
    else:
        code = pl.col(key).rank("dense")
        top = lazy.select(code.max().cast(pl.Int64)).collect().item()
    if top is None:
        return _islands_per_key(lazy, key, key_type)
    band = int(hi) - int(lo) + 1
    if (int(top) + 1) * band >= 2**62:
        return _islands_per_key(lazy, key, key_type)
    offset = pl.col("_code").cast(pl.Int64) * band - int(lo)
    prev = pl.col("_run").shift(1)
    opens = prev.is_null() | (pl.col("_s") > prev)
    return (
        lazy.select(key, code.alias("_code"), "s", "e")
        .select(key, "_code", (pl.col("s") + offset).alias("_s"), (pl.col("e") + offset).alias("_e"))
        .sort("_s")  # ties on start need no order: a later equal start never opens an island
        .select(key, "_code", "_s", pl.col("_e").cum_max().alias("_run"))
        .with_columns(opens.alias("_opens"))
        .with_columns(pl.when("_opens").then(pl.col("_s")).forward_fill().alias("_a"))
        .filter(pl.col("_opens").shift(-1).fill_null(True))
        .select(key, (pl.col("_a") - offset).alias("a"), (pl.col("_run") - offset).alias("b"))
        .collect()
    )


def _islands_of_one_key(lazy: pl.LazyFrame, key: str, value: pl.Expr) -> pl.DataFrame:
    """:func:`islands_frame` of intervals whose *key* is *value* for all (none NULL): the same
    sort on start and running max, over the times alone; the key is added to the islands.
    The times come out as the banded path's do (shifted by an Int64 offset, here 0)."""
    zero = pl.lit(0, pl.Int64)
    prev = pl.col("_run").shift(1)
    opens = prev.is_null() | (pl.col("_s") > prev)
    return (
        lazy.select((pl.col("s") + zero).alias("_s"), (pl.col("e") + zero).alias("_e"))
        .sort("_s")  # ties on start need no order: a later equal start never opens an island
        .select("_s", pl.col("_e").cum_max().alias("_run"))
        .with_columns(opens.alias("_opens"))
        .with_columns(pl.when("_opens").then(pl.col("_s")).forward_fill().alias("_a"))
        .filter(pl.col("_opens").shift(-1).fill_null(True))
        .select(value.alias(key), pl.col("_a").alias("a"), pl.col("_run").alias("b"))
        .collect()
    )


def _islands_per_key(lazy: pl.LazyFrame, key: str, key_type: pl.DataType) -> pl.DataFrame:
    sort_key = pl.col(key)
    if isinstance(key_type, pl.Categorical):
        sort_key = sort_key.to_physical()  # any order of keys will do; codes sort fastest
    # An interval opens an island when it starts after every earlier one of its key ended; an
    # island ends at the row before the next opening (or its key's last row), where the
    # running max of ``e`` is the island's end, and its start is the opening row's ``s``
    # (carried forward).
    running = pl.col("e").cum_max().over(key)
    opens = (pl.col("_prev").is_null() | (pl.col("s") > pl.col("_prev"))).alias("_opens")
    closes = pl.col("_opens").shift(-1).over(key).fill_null(True)
    return (
        lazy.select(key, "s", "e")
        .sort([sort_key, "s", "e"])
        .with_columns(running.alias("_run"))
        .with_columns(pl.col("_run").shift(1).over(key).alias("_prev"))
        .with_columns(opens)
        .with_columns(pl.when("_opens").then(pl.col("s")).forward_fill().alias("a"))
        .filter(closes)
        .select(key, "a", pl.col("_run").alias("b"))
        .collect()
    )
