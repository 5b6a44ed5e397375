"""The profiler-neutral trace model, declared: every table's columns with their Arrow types,
nullability and meanings (:mod:`.tables`), built of the pieces in :mod:`.columns`.

The single source of the model's shape: every reader builds these tables
(:mod:`specnsys.readers`), ``specnsys schema`` and docs/model.md print them, and the tests
check each reader's output against them. It sits at the ingest level (tests/test_layers.py)
and imports nothing of specnsys but itself.
"""

from __future__ import annotations

from specnsys.model.columns import Column, ColumnType, TableSchema
from specnsys.model.tables import (
    CONVENTIONS,
    MODEL_SCHEMA,
    MODEL_TABLES,
    MODEL_VERSION,
    table_schema,
)

__all__ = [
    "CONVENTIONS",
    "MODEL_SCHEMA",
    "MODEL_TABLES",
    "MODEL_VERSION",
    "Column",
    "ColumnType",
    "TableSchema",
    "table_schema",
]
