"""specnsys: why speculative decoding is slower than promised, from an Nsight Systems trace.

``specnsys.open(path)`` ingests an nsys SQLite export (or ``.nsys-rep`` with nsys on PATH) into a
columnar trace model you can query with DuckDB SQL (``trace.sql``) or Polars (``trace.table``).

The analysis stack (DuckDB, Polars, Arrow) loads on first use, so that ``specnsys.annotate``,
imported into inference processes, costs only the ``nvtx`` import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specnsys.errors import BadInputError, SpecnsysError

if TYPE_CHECKING:
    from specnsys.ingest import MODEL_TABLES, Trace
    from specnsys.ingest import open_trace as open  # noqa: A004

__version__ = "0.1.0"

__all__ = ["MODEL_TABLES", "BadInputError", "SpecnsysError", "Trace", "__version__", "open"]

_LAZY = {"open": "open_trace", "Trace": "Trace", "MODEL_TABLES": "MODEL_TABLES"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from specnsys import ingest

        return getattr(ingest, _LAZY[name])
    raise AttributeError(f"module 'specnsys' has no attribute {name!r}")
