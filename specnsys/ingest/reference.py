"""The model reference: every table and column of the trace model, its types and its meaning.

``specnsys schema`` prints it and ``docs/model.md`` holds it. Everything in it comes from the
model's declaration (:mod:`specnsys.model`: names, Arrow types, nullability, meanings) and the
nsys source tables each table is built from (:data:`specnsys.ingest.model.MODEL`); the DuckDB
and Polars type names are what those engines call the declared Arrow types, asked of them on
empty tables of the declared schema (no trace is built). tests/test_model_schema.py checks
that every reader builds exactly the declared schema, and tests/test_schema_command.py that
the reference says what a real trace's DuckDB and Polars views show.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from specnsys.model import CONVENTIONS, TableSchema
from specnsys.model import MODEL_SCHEMA as _MODEL_SCHEMA

__all__ = ["CONVENTIONS", "ColumnReference", "TableReference", "model_reference"]


@dataclass(frozen=True)
class ColumnReference:
    """One column: its name, its DuckDB type (what ``DESCRIBE`` and ``specnsys sql`` show),
    its Polars type (what ``Trace.table`` gives), its meaning, and whether it may be NULL."""

    name: str
    type: str
    polars_type: str
    meaning: str
    nullable: bool


@dataclass(frozen=True)
class TableReference:
    """One model table: the nsys table(s) it is built from, what a row is, its columns."""

    name: str
    sources: tuple[str, ...]
    meaning: str
    columns: tuple[ColumnReference, ...]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def model_reference() -> tuple[TableReference, ...]:
    """Every model table, in the model's order, as declared (:mod:`specnsys.model`), with
    the nsys source tables it is built from and its types as DuckDB and Polars name them."""
    from specnsys.ingest.model import MODEL

    sources = {t.name: tuple(dict.fromkeys(s.table for s in t.sources)) for t in MODEL}
    engine_types = _engine_types(_MODEL_SCHEMA)
    return tuple(
        TableReference(
            table.name,
            sources[table.name],
            table.meaning,
            tuple(
                ColumnReference(c.name, *engine_types[table.name][c.name], c.meaning, c.nullable)
                for c in table.columns
            ),
        )
        for table in _MODEL_SCHEMA
    )


def _engine_types(
    tables: tuple[TableSchema, ...],
) -> dict[str, dict[str, tuple[str, str]]]:
    """``{table: {column: (DuckDB type, Polars type)}}``: what each engine calls the declared
    Arrow types, asked of it on an empty table of each stored schema (as a trace's views and
    frames are over tables of that schema)."""
    import duckdb
    import polars as pl

    from specnsys.ingest.arrow_values import arrow_frame

    found: dict[str, dict[str, tuple[str, str]]] = {}
    con = duckdb.connect()
    try:
        for table in tables:
            empty = table.stored_schema().empty_table()
            con.register("declared", empty)
            described = con.execute("DESCRIBE declared").fetchall()
            con.unregister("declared")
            polars: pl.Schema = arrow_frame(empty).schema
            found[table.name] = {
                str(name): (str(sql_type), str(polars[str(name)]))
                for name, sql_type, *_ in described
            }
    finally:
        con.close()
    return found
