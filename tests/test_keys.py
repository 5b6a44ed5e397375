"""The join-key helpers of specnsys.ingest.keys: :func:`all_distinct` answers exactly what a
hash count (``n_unique() == len``) answers, whatever the order, NULLs and frame kind."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnsys.ingest.keys import all_distinct


def _counted(values: list[int | None]) -> bool:
    frame = pl.DataFrame({"c": values}, schema={"c": pl.Int64})
    return bool(frame.select(pl.col("c").n_unique()).item() == frame.height)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], True),
        ([7], True),
        ([None], True),
        ([1, 2, 5, 9], True),  # increasing: the one-pass answer
        ([9, 5, 2, 1], True),  # distinct, not increasing: counted
        ([1, 2, 2, 3], False),  # equal neighbours are not increasing
        ([3, 1, 2, 1], False),
        ([1, None, 1], False),  # a NULL must not hide the repeat around it
        ([1, None, 2], True),  # one NULL is one value
        ([None, 1, None], False),  # two NULLs are one value twice
        ([0, 5 * 10**18, -5 * 10**18, 0], False),  # differences that overflow Int64
    ],
)
def test_all_distinct_on_chosen_columns(values: list[int | None], expected: bool) -> None:
    frame = pl.DataFrame({"c": values}, schema={"c": pl.Int64})
    assert _counted(values) is expected
    assert all_distinct(frame, "c") is expected
    assert all_distinct(frame.lazy(), "c") is expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-5, 40)), max_size=30), st.booleans())
def test_all_distinct_equals_the_hash_count(values: list[int | None], ordered: bool) -> None:
    if ordered:  # the usual export: ids increasing (NULLs last, where any)
        values = sorted(v for v in values if v is not None) + [v for v in values if v is None]
    frame = pl.DataFrame({"c": values}, schema={"c": pl.Int64})
    assert all_distinct(frame, "c") is _counted(values)
    assert all_distinct(frame.lazy(), "c") is _counted(values)
