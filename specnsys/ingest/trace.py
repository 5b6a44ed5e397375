"""``open(path) -> Trace``: a trace as DuckDB views and Polars LazyFrames over one model.

The trace's reader (:func:`specnsys.readers.reader_for`: an nsys export's, a Chrome trace's)
opens its model; both engines then read the same columnar data: the Parquet files of the
cache entry (or, when no cache can be written, the same Arrow tables in memory). Nothing
passes through Python rows.
"""

from __future__ import annotations

import shutil
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import polars as pl

from specnsys.errors import SpecnsysWarning, UsageError
from specnsys.ingest import cache
from specnsys.ingest.arrow_values import arrow_frame
from specnsys.ingest.connection import (
    SCRATCH_PREFIXES,
    SPILL_PREFIX,
    analysis_connection,
    model_views,
)
from specnsys.ingest.memory_limits import explicit_memory_limit
from specnsys.ingest.readonly_sql import check_read_only
from specnsys.ingest.sqlite_reader import quote_identifier
from specnsys.ingest.summary import TraceSummary, require_plausible_times
from specnsys.model import MODEL_TABLES

if TYPE_CHECKING:  # DuckDB and pyarrow load where they are used (a warm run needs neither)
    import duckdb
    import pyarrow as pa

# analysis_connection and the scratch prefixes are here too: where they were defined first.
__all__ = [
    "SCRATCH_PREFIXES", "SPILL_PREFIX", "Trace", "analysis_connection", "open_trace",
    "rebuilt_once",
]  # fmt: skip


class Trace:
    """One ingested trace: an nsys export, or a file of another reader (``specnsys.readers``).

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
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        if (parquet_folder is None) == (arrow_tables is None):
            raise ValueError("give exactly one of parquet_folder and arrow_tables")
        require_plausible_times(summary, path)
        self.path = path
        self.summary = summary
        self.from_cache = from_cache
        self.open_seconds = open_seconds
        self.cache_folder = parquet_folder
        self._arrow = arrow_tables
        try:
            self._export_bytes: int | None = path.stat().st_size
        except OSError:
            self._export_bytes = None
        # the connection that summarized a model just built (its views on this model), else
        # opened on first use
        self._con: duckdb.DuckDBPyConnection | None = connection
        self._closed = False
        self._removals: list[weakref.finalize[..., object]] = []

    @property
    def tables(self) -> tuple[str, ...]:
        return MODEL_TABLES

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection holding the model's views (for relation chaining), opened on
        first use: a command that only reads results stored in the cache never loads DuckDB.

        specnsys's analyses run on this connection too, and DuckDB refuses a connection's next
        statement while a result of ``execute`` is not fetched to the end: fetch what you
        execute (``fetchall``, ``pl()``), or use :meth:`sql`, whose relations run when read."""
        if self._con is None:
            if self._closed:
                raise UsageError(f"the trace {self.path} is closed")
            con = analysis_connection(self._export_bytes)
            self._con = model_views(con, self.cache_folder, self._arrow)
        return self._con

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """Run one read-only DuckDB statement over the model tables; return the (lazy) relation.

        Statements that could write (COPY, ATTACH, CREATE, SET, ...) raise
        :class:`~specnsys.ingest.readonly_sql.ReadOnlyQueryError`; see that module. Temporary
        tables on the connection (which an earlier statement could only have made by a way
        the check does not know of, and which would shadow the model's tables) are dropped
        first, with a warning: the relation runs when it is read, so before the next query
        is the first time what it made can be seen.
        """
        check_read_only(query)
        con = self.connection
        _drop_temporary_tables(con, self.path)
        return con.sql(query)

    def table(self, name: str) -> pl.LazyFrame:
        """One model table as a Polars LazyFrame over the same columnar data as ``sql()``."""
        self._check_name(name)
        if self._arrow is not None:
            return arrow_frame(self._arrow[name]).lazy()
        return pl.scan_parquet(self._parquet_file(name))

    def arrow(self, name: str) -> pa.Table:
        """One model table as an Arrow table."""
        self._check_name(name)
        if self._arrow is not None:
            return self._arrow[name]
        import pyarrow.parquet as pq

        return pq.read_table(self._parquet_file(name), memory_map=True)

    def _parquet_file(self, name: str) -> Path:
        """The cached Parquet file of table *name*, for a trace without Arrow tables."""
        # __init__ sets exactly one of cache_folder and _arrow
        return cast(Path, self.cache_folder) / f"{name}.parquet"

    def load_derived(self, kind: str, key: Mapping[str, object]) -> dict[str, Any] | None:
        """A result of *kind* stored for *key* by :meth:`store_derived` from this same export
        (None when the trace has no cache entry or nothing was stored). Its values are as
        JSON read them back, in the shape the caller stored: left unchecked here, as each
        caller knows its own result's fields, which one type here could not say."""
        if self.cache_folder is None:
            return None
        return cache.read_derived(self.cache_folder, kind, key)

    def store_derived(
        self, kind: str, key: Mapping[str, object], value: Mapping[str, object]
    ) -> None:
        """Keep a JSON-able result computed from this trace beside its cached model, so the
        next run on the unchanged export skips the computation (nothing without a cache)."""
        if self.cache_folder is not None:
            cache.write_derived(self.cache_folder, kind, key, value)

    def _check_name(self, name: str) -> None:
        if name not in MODEL_TABLES:
            raise UsageError(f"no table {name!r}; the model has: {', '.join(MODEL_TABLES)}")

    def remove_when_closed(self, folder: Path) -> None:
        """Delete *folder* (a private export of an ``.nsys-rep``) when the trace is closed,
        collected or the interpreter exits, whichever comes first."""
        self._removals.append(weakref.finalize(self, shutil.rmtree, str(folder), True))

    def close(self) -> None:
        self._closed = True
        if self._con is not None:
            self._con.close()
        for removal in self._removals:
            removal()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Trace({str(self.path)!r}, {self.summary.version.label})"


def _drop_temporary_tables(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Drop every temporary table of *con*, saying which (see :meth:`Trace.sql`). specnsys
    itself makes none on a trace's connection: its Arrow tables are registered (temporary
    views), and users' SQL cannot CREATE."""
    names = [
        str(name)
        for (name,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary ORDER BY table_name"
        ).fetchall()
    ]
    if not names:
        return
    for name in names:
        con.execute(f"DROP TABLE IF EXISTS temp.main.{quote_identifier(name)}")
    shadowed = [n for n in names if n in MODEL_TABLES]
    warnings.warn(
        f"{path}: an earlier query made temporary table(s) {', '.join(names)}"
        + (f", which shadowed the model's {', '.join(shadowed)}" if shadowed else "")
        + "; dropped",
        SpecnsysWarning,
        stacklevel=3,
    )




def open_trace(path: str | Path, *, use_cache: bool = True) -> Trace:
    """Open an nsys ``.sqlite`` export (or ``.nsys-rep`` report, with ``nsys`` on PATH), or
    a trace another reader recognizes by its content (``specnsys.readers``: a PyTorch-profiler
    Chrome trace, ``.json`` or ``.json.gz``).

    Raises :class:`specnsys.errors.BadInputError` with a one-line message for anything that is
    not a usable export. The export is opened read-only and never modified.
    """
    started = time.perf_counter()
    explicit_memory_limit()  # a bad SPECNSYS_MEMORY_LIMIT is refused warm or cold alike
    root = cache.usable_root() if use_cache and not cache.cache_disabled() else None
    from specnsys.readers import reader_for

    opened = reader_for(Path(path)).open(Path(path), root)
    try:
        trace = Trace(
            opened.path or Path(path), opened.summary, parquet_folder=opened.folder,
            arrow_tables=opened.tables, from_cache=opened.from_cache,
            open_seconds=time.perf_counter() - started, connection=opened.connection,
        )  # fmt: skip
    except BaseException:
        opened.release()
        raise
    if opened.scratch is not None:
        trace.remove_when_closed(opened.scratch)
    return trace


T = TypeVar("T")


def rebuilt_once(run: Callable[[], T], before_retry: Callable[[], None] | None = None) -> T:
    """``run()``; when it fails as a damaged cache file would make it fail, and an entry it
    reused does not read to its end, drop that entry and ``run()`` once more, which rebuilds
    it from the export (calling *before_retry* first; a warning says what happened).

    The manifest's check at open covers a file's ends only (reading whole files would cost
    every warm run), so damage in the middle of a cached Parquet shows when a query decodes
    that page: DuckDB, Polars or Arrow fail, and the command blamed its query or exited 3.
    Only the failures an unreadable file causes are looked into (DuckDB's I/O, invalid-input
    and bare errors, Polars' compute errors, Arrow's errors and OSError, also as the cause of
    a specnsys error), and only the entries the failed run reused are read through; when all
    of them read, the failure is the run's own and propagates unchanged."""
    cache.ENTRIES_READ.clear()
    try:
        return run()
    except Exception as exc:
        damaged = _damaged_entries(exc)
        if not damaged:
            raise
    for folder, _export, _file, _why in damaged:
        cache.drop_entry(folder)
    if before_retry is not None:
        before_retry()
    for _folder, export, file, why in damaged:
        warnings.warn(
            f"{export}: its cache entry was damaged ({file} does not read: {why}); "
            "built again from the export",
            SpecnsysWarning,
            stacklevel=2,
        )
    cache.ENTRIES_READ.clear()
    return run()


def _damaged_entries(exc: BaseException) -> list[tuple[Path, Path, str, str]]:
    """``(folder, export, file, why)`` of each reused entry that does not read, when *exc*
    is a failure that an unreadable file causes (else nothing is read)."""
    if not cache.ENTRIES_READ or not any(_reads_fail(e) for e in _chain(exc)):
        return []
    found = []
    for folder, export in list(cache.ENTRIES_READ.items()):
        unreadable = cache.unreadable_file(folder) if folder.is_dir() else None
        if unreadable is not None:
            found.append((folder, export, *unreadable))
    return found


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """*exc* and its causes and contexts (``raise ... from None`` keeps the context)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _reads_fail(exc: BaseException) -> bool:
    """Whether *exc* is of a kind a file that does not read raises."""
    import sys

    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and (
        type(exc) is duckdb.Error
        or isinstance(exc, (duckdb.IOException, duckdb.InvalidInputException,
                            duckdb.InternalException))
    ):  # fmt: skip
        return True
    pa = sys.modules.get("pyarrow")
    if pa is not None and isinstance(exc, pa.ArrowException):
        return True
    return isinstance(exc, (pl.exceptions.ComputeError, OSError))
