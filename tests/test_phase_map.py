"""The flattened phase map and the Polars interval union against brute force on random input.

The timeline's exactness rests on two steps that are easy to get subtly wrong: "innermost
phase range open at t" from change points (one as-of join), and the gaps-and-islands union.
Both are checked here against direct computations (a scan over every range at every instant,
DuckDB's SQL islands) on hypothesis-generated input, including ties, touching ranges,
unclosed ranges and zero-length intervals.
"""

from __future__ import annotations

import duckdb
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from specnsys.attribution.intervals import _islands_per_key, islands_frame, islands_sql
from specnsys.attribution.phase_map import lookup_phase, phase_change_points


@st.composite
def nested_ranges(draw: st.DrawFn) -> list[tuple[int, int, int | None, str, int]]:
    """Properly nested push/pop ranges on 1-2 threads: (gtid, start, end|None, phase, depth)."""
    out: list[tuple[int, int, int | None, str, int]] = []
    for gtid in range(draw(st.integers(1, 2))):
        stack: list[tuple[int, str, int]] = []  # (start, phase, depth) of open ranges
        t = 0
        for _ in range(draw(st.integers(0, 14))):
            t += draw(st.integers(0, 3))  # 0: ties between boundaries
            if bool(stack) and draw(st.booleans()):  # bool(): no list type context for draw
                s, phase, depth = stack.pop()
                if t > s:  # zero-length ranges are never phases (phase_ranges_sql drops them)
                    out.append((gtid, s, t, phase, depth))
            else:
                stack.append((t, draw(st.sampled_from("abc")), len(stack)))
        for s, phase, depth in stack:  # still open at the end of the trace: unclosed
            out.append((gtid, s, None, phase, depth))
    return out


def _innermost(ranges: list[tuple[int, int, int | None, str, int]], gtid: int, t: int) -> str | None:
    """The phase of the deepest range of *gtid* containing *t* (brute force)."""
    best = None
    for g, s, e, phase, depth in ranges:
        if g == gtid and s <= t and (e is None or t < e) and (best is None or depth > best[0]):
            best = (depth, phase)
    return None if best is None else best[1]


@settings(max_examples=300, deadline=None)
@given(nested_ranges(), st.lists(st.tuples(st.integers(0, 1), st.integers(-1, 50)), max_size=30))
def test_lookup_equals_the_deepest_open_range(ranges, points) -> None:
    frame = pl.DataFrame(
        [(i, g, s, e, p, d) for i, (g, s, e, p, d) in enumerate(ranges)],
        schema={"id": pl.Int64, "gtid": pl.Int64, "s": pl.Int64, "e": pl.Int64,
                "phase": pl.String, "depth": pl.Int64},
        orient="row",
    )  # fmt: skip
    change_points = phase_change_points(frame)
    queries = pl.DataFrame(points, schema={"g": pl.Int64, "t": pl.Int64}, orient="row")
    found = lookup_phase(queries, change_points, t="t", gtid="g")
    assert found.height == queries.height
    for g, t, phase in found.iter_rows():
        assert phase == _innermost(ranges, g, t), (g, t)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("xyz"), st.integers(0, 40), st.integers(0, 8)), max_size=40
    )
)
def test_polars_islands_equal_the_sql_islands(intervals) -> None:
    frame = pl.DataFrame(
        [(k, s, s + n) for k, s, n in intervals],
        schema={"k": pl.String, "s": pl.Int64, "e": pl.Int64},
        orient="row",
    )
    ours = sorted(islands_frame(frame, "k").iter_rows())
    coded = islands_frame(frame.with_columns(pl.col("k").cast(pl.Categorical)), "k")
    assert sorted(coded.with_columns(pl.col("k").cast(pl.String)).iter_rows()) == ours
    # the per-key fallback (taken when key bands would not fit in 64 bits) agrees too
    assert sorted(_islands_per_key(frame.lazy(), "k", pl.String()).iter_rows()) == ours
    con = duckdb.connect()
    con.register("src", frame.to_arrow())
    theirs = sorted(con.execute(islands_sql("src", "k")).fetchall())
    assert ours == theirs
    # and they are a union: disjoint, non-touching islands per key covering every interval
    for _k, a, b in ours:
        assert a <= b
    for (k1, _, b1), (k2, a2, _) in zip(ours, ours[1:], strict=False):
        assert k1 != k2 or b1 < a2


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 8)), max_size=40),
    st.sampled_from([(pl.Int8, 1), (pl.String, "x"), (pl.Categorical, "y")]),
)
def test_islands_of_one_key_equal_the_sql_and_banded_islands(intervals, key) -> None:
    """Every interval of one key (the findings' busy and queued ops: an Int8 literal): the
    one-key path gives the SQL's islands, in the banded path's types."""
    dtype, value = key
    frame = pl.DataFrame(
        [(value, s, s + n) for s, n in intervals],
        schema={"k": dtype, "s": pl.Int64, "e": pl.Int64},
        orient="row",
    )
    ours = islands_frame(frame, "k")
    con = duckdb.connect()
    con.register("src", frame.with_columns(pl.col("k").cast(pl.String)).to_arrow())
    theirs = sorted(con.execute(islands_sql("src", "k")).fetchall())
    assert sorted(ours.with_columns(pl.col("k").cast(pl.String)).iter_rows()) == theirs
    # a second key sends the same intervals through the banded path: same islands, same types
    other = pl.lit(2 if dtype == pl.Int8 else "z", dtype)
    banded = islands_frame(pl.concat([frame, frame.head(1).with_columns(other.alias("k"))]), "k")
    assert banded.filter(pl.col("k") == pl.lit(value, dtype)).sort("a").equals(ours.sort("a"))
    assert ours.schema == banded.schema


@st.composite
def nvtx_rows(draw: st.DrawFn) -> list[tuple[int, int, int, int | None, str, int | None]]:
    """NVTX push/pop rows on 1-2 threads, nested or not (a malformed trace's crossing ranges
    too), with ties, unclosed and empty ranges, and depths missing: (id, gtid, start,
    end|None, text, depth|None)."""
    rows = []
    for i in range(draw(st.integers(0, 24))):
        s = draw(st.integers(0, 30))
        length = draw(st.one_of(st.none(), st.integers(0, 12)))
        text = draw(st.sampled_from(["decode", "draft", "verify", "forward", "prefill",
                                     "draft_prefill", "sample", "request", "other"]))
        rows.append((i, draw(st.integers(0, 1)), s, None if length is None else s + length,
                     text, draw(st.one_of(st.none(), st.integers(0, 3)))))  # fmt: skip
    return rows


def _nvtx_connection(rows: list[tuple[int, int, int, int | None, str, int | None]]) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose ``nvtx`` table holds *rows* (:func:`nvtx_rows`) as push/pop
    ranges of process 7 in the specnsys domain."""
    con = duckdb.connect()
    con.execute(
        'CREATE TABLE nvtx (id BIGINT, global_tid BIGINT, pid BIGINT, start BIGINT, "end" BIGINT, '
        "kind VARCHAR, depth BIGINT, text VARCHAR, domain VARCHAR)"
    )
    if rows:
        con.executemany(
            "INSERT INTO nvtx VALUES (?, ?, 7, ?, ?, 'push_pop', ?, ?, 'specnsys')",
            [(i, g, s, e, d, text) for i, g, s, e, text, d in rows],
        )
    return con


@settings(max_examples=150, deadline=None)
@given(nvtx_rows())
def test_phase_ranges_frame_equals_its_sql(rows) -> None:
    """:func:`phase_ranges` computes the nesting (boundary order, spans, roles, effective
    phase) and the ``counted`` and ``leaf`` flags in Polars (the SQL's window functions and
    as-of join were 9 s of the 20M-kernel analysis); the lanes and step tables still read
    :func:`phase_ranges_sql`: both must give every range the same columns, types and values."""
    from specnsys.attribution.phase_map import PHASE_RANGE_COLUMNS, phase_ranges, phase_ranges_sql
    from specnsys.attribution.rules import default_rules

    con = _nvtx_connection(rows)
    rules = default_rules()
    ours = phase_ranges(con, rules).sort("id")
    theirs = con.sql(f"SELECT {PHASE_RANGE_COLUMNS} FROM ({phase_ranges_sql(rules)})").pl()
    assert ours.schema == theirs.schema
    assert ours.rows() == theirs.sort("id").rows()


@settings(max_examples=150, deadline=None)
@given(nvtx_rows())
def test_change_points_placed_by_rank_equal_the_sorted_ones(rows) -> None:
    """:func:`phase_change_points` places :func:`phase_ranges`'s boundaries by their ranks
    (``srn``/``ern``) instead of sorting them: on nested, crossing, tied, unclosed and
    depth-less ranges of two threads it gives what the sort gives, and so does a subset of
    the ranges (whose ranks have gaps: it sorts)."""
    from specnsys.attribution.phase_map import phase_ranges
    from specnsys.attribution.rules import default_rules

    con = _nvtx_connection(rows)
    ranges = phase_ranges(con, default_rules())
    placed = phase_change_points(ranges)
    assert placed.equals(phase_change_points(ranges.drop("srn", "ern")))
    subset = ranges.filter(pl.col("id") % 3 != 0)
    assert phase_change_points(subset).equals(phase_change_points(subset.drop("srn", "ern")))


def test_run_rows_lists_every_row_of_each_run_in_order() -> None:
    """run_rows expands runs [first, first + count) row by row, an empty run giving none."""
    import numpy as np

    from specnsys.attribution.intervals import run_rows

    owner, rows = run_rows(np.array([5, 0, 9, 2], dtype=np.int64), np.array([2, 0, 3, 1]))
    assert owner.tolist() == [0, 0, 2, 2, 2, 3] and rows.tolist() == [5, 6, 9, 10, 11, 2]
    owner, rows = run_rows(np.array([], dtype=np.int64), np.array([], dtype=np.int64))
    assert owner.size == rows.size == 0
