"""Read a run-set dataset with SQL: ``specnsys sql DATASET "SELECT ..."``.

The four tables are DuckDB views over the dataset's Parquet files (hive partitioning gives
``run_id``). Queries go through the same read-only check as a trace's (DuckDB's own parser),
and the CLI locks the connection to the dataset folder, as it does a trace's cache folder.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

import duckdb

from specnsys.errors import BadInputError
from specnsys.ingest.interrupts import interruptible
from specnsys.ingest.readonly_sql import check_read_only
from specnsys.runset.dataset import TABLES, is_dataset, table_glob

__all__ = ["DatasetReader"]


class DatasetReader:
    """A DuckDB connection with the dataset's tables as views (``runs``, ``phases``,
    ``steps``, ``requests``; a table no run wrote is absent)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        if not is_dataset(self.root):
            raise BadInputError(f"{self.root}: not a dataset written by specnsys collect")
        self.connection = interruptible(duckdb.connect())
        self.tables: list[str] = []
        for table in TABLES:
            if any((self.root / table).glob("run_id=*/*.parquet")):
                glob = table_glob(self.root, table).replace("'", "''")
                self.connection.execute(
                    f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{glob}', "
                    "hive_partitioning = true, union_by_name = true)"
                )
                self.tables.append(table)

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """One read-only statement over the tables (see :meth:`specnsys.ingest.Trace.sql`)."""
        check_read_only(query)
        return self.connection.sql(query)

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> DatasetReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
