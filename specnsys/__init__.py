"""specnsys: why speculative decoding is slower than promised, from an Nsight Systems trace.

``specnsys.open(path)`` ingests an nsys SQLite export (or ``.nsys-rep`` with nsys on PATH) into a
columnar trace model you can query with DuckDB SQL (``trace.sql``) or Polars (``trace.table``).
"""

from specnsys.errors import BadInputError, SpecnsysError
from specnsys.ingest import MODEL_TABLES, Trace
from specnsys.ingest import open_trace as open  # noqa: A001 - the library's front door

__version__ = "0.1.0"

__all__ = ["MODEL_TABLES", "BadInputError", "SpecnsysError", "Trace", "__version__", "open"]
