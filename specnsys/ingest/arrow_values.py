"""Arrow arrays made, coded and looked up without pandas, for the model's Arrow normalizations.

pyarrow converts Python objects (``pa.array``, a bare ``67`` given to a compute function) by
importing pandas when it is installed, which costs a cold run more than the few constants it
converts (see docs/performance.md#import-costs): constants are made by Polars here. Strings are
dictionary-coded (a kernel or API name repeats over millions of rows), and Arrow's missing
multi-column look-up is built from single-column ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import polars as pl

if TYPE_CHECKING:  # DuckDB and pyarrow load when a model is built: a warm run skips both
    import duckdb
    import pyarrow as pa


def arrow_values(values: list[object], dtype: pl.DataType | type[pl.DataType]) -> pa.Array:
    """Python *values* as an Arrow array, made by Polars: pyarrow's own conversion of Python
    objects (``pa.array``, a bare ``67`` given to a compute function) imports pandas when it
    is installed, which costs a cold run more than the constants are worth
    (docs/performance.md#import-costs)."""
    import pyarrow as pa

    array = pl.Series(values, dtype=dtype).to_arrow()
    return array.cast(pa.string()) if dtype == pl.String else array


def arrow_frame(table: pa.Table) -> pl.DataFrame:
    """*table* as a Polars DataFrame: ``pl.from_arrow`` is typed to return a Series too, which
    only an Arrow array gives."""
    return cast(pl.DataFrame, pl.from_arrow(table))


def int64(value: int) -> pa.Scalar:
    """*value* as an Arrow int64 scalar (see :func:`arrow_values`)."""
    return arrow_values([value], pl.Int64)[0]


class StringLookup:
    """``StringIds`` as two aligned Arrow arrays, to resolve a column of string ids in Arrow:
    the position of each id in :attr:`ids` (a hash look-up), then a gather of
    :attr:`values`. An id that is not there resolves to NULL, as the LEFT JOIN does."""

    def __init__(self, ids: pa.Array, values: pa.Array) -> None:
        self.ids = ids
        self.values = values

    def resolve(self, ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
        """The string of each id in *ids*."""
        import pyarrow.compute as pc

        return pc.take(self.values, pc.index_in(ids, self.ids))

    def resolve_coded(self, ids: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
        """The strings of *ids* as a dictionary array: each distinct id of the slice resolved
        once (a kernel or API name repeats over millions of rows).

        The strings are never copied per row, and Parquet takes the dictionary as its own
        instead of hashing every string again, which makes the kernels' normalization and
        write cheaper (docs/performance.md#normalization)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        # a NULL id is a value like any other here, looked up as resolve() looks it up
        distinct = pc.dictionary_encode(ids, null_encoding="encode")
        return coded(distinct.indices, self.resolve(distinct.dictionary))


def coded(indices: pa.Array, values: pa.Array) -> pa.DictionaryArray:
    """*values* at *indices* as a dictionary array whose dictionary holds no NULL (Parquet's
    writer refuses one that does): an index of a NULL value becomes a NULL index."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if values.null_count:
        # (scalars made in Arrow: pyarrow imports pandas to convert a Python value)
        present = pc.take(pc.is_valid(values), indices)
        indices = pc.if_else(present, indices, pa.nulls(1, indices.type)[0])
        values = pc.fill_null(values, arrow_values([""], pl.String)[0])  # never looked up
    return pa.DictionaryArray.from_arrays(indices, values)


def decoded(table: pa.Table) -> pa.Table:
    """*table* with its dictionary columns as plain strings: the model's columns as readers
    see them (the cache's Parquet files store no Arrow schema, see
    :func:`specnsys.ingest.parquet_writer.write_parquet`)."""
    import pyarrow as pa

    schema = pa.schema(
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    )
    return table if schema == table.schema else table.cast(schema)


def lookup_by_keys(
    keys: Sequence[tuple[pa.ChunkedArray, pa.ChunkedArray, bool]], values: pa.ChunkedArray
) -> pa.ChunkedArray:
    """``values`` of the row of a small table whose key columns equal each row's keys (NULL
    where none does). *keys* gives per key: the rows' column, the table's column (the
    table's keys are unique together) and whether a NULL equals a NULL (``IS NOT DISTINCT
    FROM``) or matches nothing (``=``).

    Arrow has no multi-column look-up: each key becomes its rank among the table's distinct
    values of that column, and the ranks one integer code, on both sides.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    code: pa.ChunkedArray | None = None
    table_code: pa.ChunkedArray | None = None
    for key, table_key, nulls_equal in keys:
        distinct = pc.unique(table_key)
        skip = not nulls_equal
        rank = pc.cast(pc.index_in(key, distinct, skip_nulls=skip), pa.int64())
        table_rank = pc.cast(pc.index_in(table_key, distinct, skip_nulls=skip), pa.int64())
        width = int64(len(distinct))
        code = rank if code is None else pc.add(pc.multiply(code, width), rank)
        table_code = (
            table_rank if table_code is None else pc.add(pc.multiply(table_code, width), table_rank)
        )
    # a NULL code is a key that matched nothing, or a NULL under "=": never a match
    return pc.take(values, pc.index_in(code, table_code, skip_nulls=True))


def to_arrow(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    """A DuckDB relation as one Arrow table (the method's name changed in DuckDB 1.4)."""
    method = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
    return method()

