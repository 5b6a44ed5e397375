"""The pieces a model table is declared with: a column's type, a column, a table.

A type names its Arrow type only; what DuckDB and Polars call it is asked of them
(:func:`specnsys.ingest.reference.model_reference`), so no second mapping can drift. pyarrow
loads when an Arrow schema is asked for, not when the declaration is imported (a warm run
needs neither pyarrow nor DuckDB).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Column", "ColumnType", "TableSchema"]


class ColumnType(Enum):
    """The Arrow types the model uses (every reader builds exactly these, none other)."""

    INT64 = "int64"
    INT32 = "int32"
    FLOAT64 = "double"
    BOOL = "bool"
    STRING = "string"

    def arrow(self) -> pa.DataType:
        """The pyarrow type (plain ``string``, not ``large_string``: what Parquet reads back)."""
        import pyarrow as pa

        factories = {
            ColumnType.INT64: pa.int64,
            ColumnType.INT32: pa.int32,
            ColumnType.FLOAT64: pa.float64,
            ColumnType.BOOL: pa.bool_,
            ColumnType.STRING: pa.string,
        }
        return factories[self]()


@dataclass(frozen=True)
class Column:
    """One column: its name, Arrow type, whether it may hold NULL, and what a value is.

    *nullable* False is a promise about the values every reader builds (checked on each
    reader's output by tests/test_model_schema.py), not an Arrow flag: the stored fields
    all stay nullable (see :meth:`TableSchema.stored_schema`)."""

    name: str
    type: ColumnType
    meaning: str
    nullable: bool = True


@dataclass(frozen=True)
class TableSchema:
    """One model table: its name, what one row is, and its columns in order."""

    name: str
    meaning: str
    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(names) != len(set(names)):
            raise ValueError(f"{self.name}: a column is declared twice")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def arrow_schema(self) -> pa.Schema:
        """The declared schema: names, Arrow types and nullability."""
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.type.arrow(), c.nullable) for c in self.columns])

    def stored_schema(self) -> pa.Schema:
        """The schema every reader's Arrow table has, and the cache's Parquet file: the
        declared names and types, every field nullable. The cache has always written
        optional columns (a required one would change its files, and every entry would be
        rebuilt); a NOT NULL column is a promise about values instead."""
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.type.arrow(), True) for c in self.columns])
