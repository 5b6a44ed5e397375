"""``open(path) -> Trace``: an nsys export as DuckDB views and Polars LazyFrames over one model.

Both engines read the same columnar data: the Parquet files of the cache entry (or, when no
cache can be written, the same Arrow tables in memory). Nothing passes through Python rows.
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from specnsys.errors import UsageError
from specnsys.ingest import cache
from specnsys.ingest.model import MODEL_TABLES, build_model
from specnsys.ingest.nsys_rep import export_report_if_needed
from specnsys.ingest.schema import detect_version, require_events, require_nsys_tables
from specnsys.ingest.sqlite_reader import SqliteExport, file_identity
from specnsys.ingest.summary import TraceSummary, summarize


class Trace:
    """One ingested nsys export.

    ``sql()`` runs DuckDB SQL over the model tables (``threads``, ``processes``, ``nvtx``,
    ``runtime``, ``kernels``, ``memcpy``, ``memset``, ``sync``, ``gpu_metrics``, ``gpus``);
    ``table()`` gives one of them as a Polars LazyFrame.
    """

    def __init__(
        self,
        path: Path,
        summary: TraceSummary,
        *,
        parquet_folder: Path | None = None,
        arrow_tables: dict[str, pa.Table] | None = None,
        from_cache: bool = False,
        open_seconds: float = 0.0,
    ) -> None:
        if (parquet_folder is None) == (arrow_tables is None):
            raise ValueError("give exactly one of parquet_folder and arrow_tables")
        self.path = path
        self.summary = summary
        self.from_cache = from_cache
        self.open_seconds = open_seconds
        self.cache_folder = parquet_folder
        self._arrow = arrow_tables
        self._con = duckdb.connect()
        for name in MODEL_TABLES:
            if parquet_folder is not None:
                source = str(parquet_folder / f"{name}.parquet").replace("'", "''")
                self._con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{source}')")
            else:
                self._con.register(name, arrow_tables[name])

    @property
    def tables(self) -> tuple[str, ...]:
        return MODEL_TABLES

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the model's views (for relation chaining)."""
        return self._con

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run DuckDB SQL over the model tables and return the (lazy) relation."""
        return self._con.sql(query)

    def table(self, name: str) -> pl.LazyFrame:
        """One model table as a Polars LazyFrame over the same columnar data as ``sql()``."""
        self._check_name(name)
        if self.cache_folder is not None:
            return pl.scan_parquet(self.cache_folder / f"{name}.parquet")
        return pl.from_arrow(self._arrow[name]).lazy()  # type: ignore[union-attr]

    def arrow(self, name: str) -> pa.Table:
        """One model table as an Arrow table."""
        self._check_name(name)
        if self._arrow is not None:
            return self._arrow[name]
        import pyarrow.parquet as pq

        return pq.read_table(self.cache_folder / f"{name}.parquet", memory_map=True)

    def _check_name(self, name: str) -> None:
        if name not in MODEL_TABLES:
            raise UsageError(f"no table {name!r}; the model has: {', '.join(MODEL_TABLES)}")

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, {self.summary.version.label})"


def open_trace(path: str | Path, *, use_cache: bool = True) -> Trace:
    """Open an nsys ``.sqlite`` export (or ``.nsys-rep`` report, with ``nsys`` on PATH).

    Raises :class:`specnsys.errors.BadInputError` with a one-line message for anything that is
    not a usable export. The export is opened read-only and never modified.
    """
    started = time.perf_counter()
    sqlite_path = export_report_if_needed(Path(path))
    with SqliteExport(sqlite_path) as export:
        require_nsys_tables(export)
        version = detect_version(export)
        size, mtime_ns, fingerprint = file_identity(sqlite_path)
        key = cache.CacheKey(
            str(sqlite_path.resolve()), size, mtime_ns, fingerprint, version.schema_version,
            version.product_version,
        )
        use_cache = use_cache and not cache.cache_disabled()
        folder = key.folder(cache.cache_root())
        if use_cache:
            manifest = cache.load_manifest(folder, key)
            if manifest is not None:
                summary = TraceSummary.from_dict(manifest["summary"])
                return Trace(
                    sqlite_path, summary, parquet_folder=folder, from_cache=True,
                    open_seconds=time.perf_counter() - started,
                )
        require_events(export)
        tables = build_model(export)
        source_counts = _source_counts(tables, export)
        source_tables = export.tables
    summary = _summarize(tables, version, source_tables, source_counts)
    if use_cache and cache.store(folder, key, tables, summary.to_dict()):
        return Trace(
            sqlite_path, summary, parquet_folder=folder,
            open_seconds=time.perf_counter() - started,
        )
    return Trace(
        sqlite_path, summary, arrow_tables=tables, open_seconds=time.perf_counter() - started
    )


def _source_counts(tables: dict[str, pa.Table], export: SqliteExport) -> dict[str, int]:
    """Row counts of the source tables read, as seen by SQLite itself (for ``info``)."""
    from specnsys.ingest.model import MODEL

    counts: dict[str, int] = {}
    for table in MODEL:
        if table.counts_source and export.has_table(table.counts_source):
            counts[table.counts_source] = tables[table.name].num_rows
    return counts


def _summarize(
    tables: dict[str, pa.Table], version, source_tables: list[str], source_counts: dict[str, int]
) -> TraceSummary:
    con = duckdb.connect()
    try:
        for name, table in tables.items():
            con.register(name, table)
        return summarize(con, version, source_tables, source_counts, list(tables))
    finally:
        con.close()
