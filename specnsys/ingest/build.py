"""Building the model: the export's source tables read slice by slice, normalized, written.

:func:`build_model` streams every model table of :data:`~specnsys.ingest.model.BUILD_ORDER`
from the export (:meth:`SqliteExport.iter_reads`) through its normalization (an Arrow function
of :mod:`specnsys.ingest.normalize`, or the table's DuckDB query over the slice and its small
side tables) into a Parquet file (:mod:`specnsys.ingest.parquet_writer`) or into memory. DuckDB
and the strings are set up, and what NVTX rows need from the whole table gathered, on a thread
of their own while the reader starts.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import os
import shutil
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specnsys.errors import BadInputError
from specnsys.ingest.arrow_values import StringLookup, arrow_frame, decoded, to_arrow
from specnsys.ingest.interrupts import interruptible
from specnsys.ingest.memory_limits import (
    BUILD_MEMORY_FRACTION,
    BUILD_MEMORY_MIN,
    duckdb_memory_limit,
)
from specnsys.ingest.model import (
    BUILD_ORDER,
    NAME_REFERENCES,
    NVTX,
    NVTX_CATEGORIES,
    NVTX_DEFINITION_COLUMNS,
    NVTX_DOMAINS,
    NVTX_RANGE_COLUMNS,
    ROW_LOCAL_SOURCE,
    STRINGS,
    ModelTable,
    SourceRead,
)
from specnsys.ingest.normalize import NormalizeContext, NvtxContext, ValuesOutOfRange
from specnsys.ingest.nvtx_nesting import nvtx_nesting
from specnsys.ingest.parquet_writer import write_parquet
from specnsys.ingest.sqlite_reader import RawColumn, SliceRead, SqliteExport, quote_identifier

if TYPE_CHECKING:  # DuckDB and pyarrow load when a model is built: a warm run skips both
    import duckdb
    import pyarrow as pa


class BuildNotes:
    """What a build found in the rows it normalized, for the data-quality notes: the rows
    whose string id is set but resolves to nothing (a dangling ``StringIds`` reference), per
    model ``table.column`` of :data:`~specnsys.ingest.model.NAME_REFERENCES` and per
    ``table`` (rows with any). Counted on the reader's threads, slice by slice."""

    def __init__(self) -> None:
        self._dangling: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.rows: dict[str, int] = {}
        """Rows of each model table built: the summary's row counts without a query of its
        own (a statement costs 1-3 ms on a small trace; the counts of 14 tables, 4.5 ms)."""

    def count_dangling(self, table: str, raw: pa.Table, model: pa.Table) -> None:
        import pyarrow.compute as pc

        found: dict[str, int] = {}
        any_lost = None
        for raw_column, column in NAME_REFERENCES.get(table, ()):
            if raw_column not in raw.column_names or column not in model.column_names:
                continue
            lost = pc.and_(pc.is_valid(raw.column(raw_column)), pc.is_null(model.column(column)))
            n = pc.sum(lost).as_py() or 0
            if n:
                found[f"{table}.{column}"] = int(n)
                any_lost = lost if any_lost is None else pc.or_(any_lost, lost)
        if any_lost is None:
            return
        found[table] = int(pc.sum(any_lost).as_py() or 0)
        with self._lock:
            self._dangling.update(found)

    def dangling(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dangling)


#: A DuckDB configuration, as ``duckdb.connect(config=...)`` takes it.
DuckdbConfig = dict[str, str | bool | int | float | list[str]]


def duckdb_config(export_bytes: int, scratch: Path | None) -> DuckdbConfig:
    """DuckDB settings for building a model: bounded memory, spilling only into *scratch*.

    Without a scratch folder spilling is off: DuckDB's default (``.tmp`` in the working
    directory) would write beside whatever the user ran from.
    """
    return {
        # One thread per query: the reader's threads run one slice query each, in parallel,
        # and a query on one thread emits its rows in the slice's order (with more threads
        # DuckDB moved rows of a slice, so the model's order changed from run to run).
        "threads": "1",
        "memory_limit": duckdb_memory_limit(export_bytes, BUILD_MEMORY_FRACTION, BUILD_MEMORY_MIN),
        "temp_directory": str(scratch) if scratch is not None else "",
        "preserve_insertion_order": "true",
        # Keep the source on the probe side of every join (it is the left side of all the
        # model's LEFT JOINs): DuckDB would otherwise build the hash table on a source slice
        # smaller than ``strings`` and emit rows in the other table's order, so a model
        # table's row order would change from run to run.
        "disabled_optimizers": "build_side_probe_side",
    }


class DatabaseHandover:
    """Where :func:`build_model` leaves its DuckDB database instead of closing it, for the
    trace's analyses to go on with (``connection``; None when the build could not hand it
    over). A new DuckDB database costs 15-20 ms of CPU (its catalog of built-in functions is
    made anew) and its close 3-4 ms: a cold open of a small trace made two, a build's and
    an analysis's, about 8 % of what ``collect`` spends per small trace (docs/performance.md,
    "Issue 35, eighth session").

    The database is handed over empty of what the build made (its tables dropped; what it
    registered went with the cursors that registered it, or was unregistered) and with the
    build's settings reset to DuckDB's defaults: the analysis sets its own on top, as on a
    new database."""

    def __init__(self) -> None:
        self.connection: duckdb.DuckDBPyConnection | None = None


def build_model(
    export: SqliteExport,
    parquet_folder: Path | None = None,
    notes: BuildNotes | None = None,
    handover: DatabaseHandover | None = None,
) -> dict[str, pa.Table] | None:
    """Read the source tables the model needs and build the model's tables.

    With *parquet_folder*, each table is written there as ``<name>.parquet`` as it is built
    and None is returned; otherwise the tables come back as Arrow. Either way the sources are
    streamed (see :data:`ROW_LOCAL_SOURCE`), so memory does not grow with the export beyond
    the model that is returned. An OSError while writing propagates, so the caller can fall
    back to memory. What the rows hold that the model cannot (names whose string id is not
    in ``StringIds``) is counted into *notes*. With *handover*, a build that succeeds leaves
    its DuckDB database there (:class:`DatabaseHandover`) instead of closing it.
    """
    notes = notes if notes is not None else BuildNotes()
    import pyarrow as pa

    built_ok = False
    scratch = _scratch_folder(parquet_folder)
    prep_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specnsys-prep")
    # DuckDB (its import, the connection, the strings) is set up on a thread of its own
    # while the reader starts on the runtime calls, whose raw slices need no DuckDB: only
    # their normalization waits for the strings (done in turn, the set-up left one core idle
    # at the start of the build; docs/performance.md#build). The same thread then gathers
    # what NVTX rows need from the whole table, while the calls and kernels are read.
    db_ready = prep_pool.submit(_open_build_db, export, scratch)
    nvtx_ready = prep_pool.submit(_prepare_nvtx_in, db_ready, export)
    cursors = _WorkerCursors(lambda: db_ready.result().con)
    try:
        built: dict[str, pa.Table] = {}

        def reads() -> Iterator[SliceRead]:
            # Pulled by the reader when the previous table's last slice is submitted: each
            # table's small side tables are registered then, before its first slice is read.
            for table in BUILD_ORDER:
                context = _LazyContext(db_ready, nvtx_ready if table is NVTX else None)
                yield _row_local_read(db_ready, export, table, cursors, context, notes)

        try:
            with contextlib.closing(export.iter_reads(reads())) as slices:
                for index, group in itertools.groupby(slices, key=operator.itemgetter(0)):
                    table = BUILD_ORDER[index]
                    parts = (part for _, part in group)
                    if parquet_folder is None:
                        built[table.name] = pa.concat_tables([decoded(p) for p in parts])
                        notes.rows[table.name] = built[table.name].num_rows
                    else:
                        path = parquet_folder / f"{table.name}.parquet"
                        notes.rows[table.name] = write_parquet(parts, path)
                    for src in _side_sources(table):
                        db_ready.result().con.execute(f"DROP TABLE IF EXISTS {src.alias}")
        finally:
            cursors.close()
            # Arrow's allocator keeps the slices' freed buffers for reuse; the analysis that
            # follows allocates in Polars and DuckDB, so they are handed back now (kept, they
            # raised the cold analysis' peak memory; docs/performance.md#build).
            pa.default_memory_pool().release_unused()
        built_ok = True
        return None if parquet_folder is not None else built
    except Exception as exc:
        translated = _build_error(exc, export)
        if translated is None:
            raise
        raise translated from None
    finally:
        prep_pool.shutdown(wait=True, cancel_futures=True)
        if db_ready.done() and not db_ready.cancelled() and db_ready.exception() is None:
            con = db_ready.result().con
            kept = False
            try:
                kept = built_ok and handover is not None and _emptied(con)
            finally:
                if kept and handover is not None:
                    handover.connection = con
                else:
                    con.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _emptied(con: duckdb.DuckDBPyConnection) -> bool:
    """Drop the tables the build made in *con* and reset the settings it gave it
    (:func:`duckdb_config`); False, the database not to be reused, where DuckDB refuses (a
    build that spilled cannot switch its temporary folder)."""
    import duckdb

    try:
        names = con.execute(
            "SELECT table_name FROM duckdb_tables() "
            "WHERE database_name = 'memory' AND schema_name = 'main' AND NOT temporary"
        ).fetchall()
        for (name,) in names:
            con.execute(f"DROP TABLE {quote_identifier(str(name))}")
        for setting in duckdb_config(0, None):
            con.execute(f"RESET {setting}")
    except duckdb.Error:
        return False
    return True




def _build_error(exc: Exception, export: SqliteExport) -> Exception | None:
    """What a failed build raises instead of *exc*: an OSError for DuckDB's I/O errors (the
    caller falls back to memory), a one-line BadInputError for values out of range (e.g.
    timestamps near the int64 limits, whose differences overflow: bad data, not a bug); None
    to let *exc* through."""
    duckdb = sys.modules.get("duckdb")  # imported on the set-up thread, if it got that far
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if duckdb is not None and isinstance(exc, duckdb.IOException):
        return OSError(detail)
    out_of_range: tuple[type[Exception], ...] = (ValuesOutOfRange,)
    if duckdb is not None:
        out_of_range += (duckdb.OutOfRangeException, duckdb.ConversionException)
    if isinstance(exc, out_of_range):
        return BadInputError(f"{export.path}: values out of range: {detail}")
    return None


@dataclass(frozen=True)
class _BuildDb:
    """The build's DuckDB connection (holding ``strings`` and the side tables) and the
    strings for the Arrow normalizations."""

    con: duckdb.DuckDBPyConnection
    strings: StringLookup


def _open_build_db(export: SqliteExport, scratch: Path | None) -> _BuildDb:
    import duckdb

    con = interruptible(
        duckdb.connect(config=duckdb_config(export.path.stat().st_size, scratch))
    )
    try:
        con.execute("SET enable_progress_bar = false")  # a library must not draw on stderr
        strings = export.read_tables([(STRINGS.table, STRINGS.columns, STRINGS.with_rowid)])[0]
        con.register("raw_strings", strings)
        # A real table (not TEMP): the per-slice queries run on cursors, other connections.
        con.execute(
            "CREATE TABLE strings AS SELECT id, any_value(value) AS value "
            "FROM raw_strings GROUP BY id"
        )
        con.unregister("raw_strings")
        return _BuildDb(con, _string_lookup(con))
    except BaseException:
        con.close()
        raise


def _prepare_nvtx_in(db_ready: Future[_BuildDb], export: SqliteExport) -> NvtxContext:
    """:func:`_prepare_nvtx` on a cursor of its own, once the build's DuckDB is set up."""
    cursor = db_ready.result().con.cursor()
    try:
        return _prepare_nvtx(cursor, export)
    finally:
        cursor.close()


class _LazyContext:
    """A table's :class:`NormalizeContext` once the set-up it needs is done: a slice read
    before then waits for it in its normalization, not in its read."""

    def __init__(self, db_ready: Future[_BuildDb], nvtx_ready: Future[NvtxContext] | None) -> None:
        self._db_ready = db_ready
        self._nvtx_ready = nvtx_ready

    def __call__(self) -> NormalizeContext:
        nvtx = self._nvtx_ready.result() if self._nvtx_ready is not None else None
        return NormalizeContext(self._db_ready.result().strings, nvtx)


def _string_lookup(con: duckdb.DuckDBPyConnection) -> StringLookup:
    """The ``strings`` table of *con* (one value per id) for the Arrow normalizations."""
    table = to_arrow(con.sql("SELECT id, value FROM strings"))
    return StringLookup(table.column("id").combine_chunks(), table.column("value").combine_chunks())


#: Named with the pid, so that a later run can sweep the folder of a killed process.
SCRATCH_PREFIX = "specnsys-scratch-"


def _scratch_folder(parquet_folder: Path | None) -> Path | None:
    """A private folder for DuckDB's spills: inside the cache entry being built, else a new
    temporary folder; None when neither can be written (then DuckDB does not spill)."""
    try:
        if parquet_folder is not None:
            scratch = parquet_folder / ".scratch"
            scratch.mkdir()
            return scratch
        return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    except OSError:
        return None


def _register_small(con: duckdb.DuckDBPyConnection, export: SqliteExport, src: SourceRead) -> None:
    """Read a small source whole into a DuckDB table named after its alias."""
    src = src.resolve(export)
    arrow = export.read_tables([(src.table, src.columns, src.with_rowid)])[0]
    con.register("_specnsys_small", arrow)
    con.execute(f"CREATE OR REPLACE TABLE {src.alias} AS SELECT * FROM _specnsys_small")
    con.unregister("_specnsys_small")


def _prepare_nvtx(con: duckdb.DuckDBPyConnection, export: SqliteExport) -> NvtxContext:
    """Gather what each NVTX row needs from the whole table, before the rows are built.

    Two narrow reads that SQLite filters (so only the rows concerned are handed over): the
    domain and category definition rows, whose names are grouped in *con* (it holds the
    ``strings``), and the push/pop ranges, whose depth and parent (:func:`nvtx_nesting`, in
    id order) each slice then takes for its own rowid range.
    """
    table = NVTX.sources[0].table
    has_types = "eventType" in export.columns(table)

    def rows_of(columns: tuple[RawColumn, ...], types: str, with_rowid: bool) -> pa.Table:
        where = f"CAST(eventType AS INTEGER) IN ({types})" if has_types else "0"
        return export.read_tables([(table, columns, with_rowid)], where=where)[0]

    con.register("nvtx_definitions", rows_of(NVTX_DEFINITION_COLUMNS, "33, 75", False))
    try:
        domains = to_arrow(con.sql(NVTX_DOMAINS))
        categories = to_arrow(con.sql(NVTX_CATEGORIES))
    finally:
        con.unregister("nvtx_definitions")
    nesting = nvtx_nesting(arrow_frame(rows_of(NVTX_RANGE_COLUMNS, "59, 70", True)).lazy())
    return NvtxContext(domains, categories, nesting)


class _WorkerCursors:
    """One DuckDB cursor per reader thread (a connection is not to be shared by threads),
    created on first use and closed together."""

    def __init__(self, connection: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        self._connection = connection  # asked for on first use: it may still be set up
        self._local = threading.local()
        self._all: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    def get(self) -> duckdb.DuckDBPyConnection:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._lock:
                cursor = self._local.cursor = self._connection().cursor()
                self._all.append(cursor)
        return cursor

    def close(self) -> None:
        for cursor in self._all:
            cursor.close()


def _side_sources(table: ModelTable) -> list[SourceRead]:
    """The sources of *table* read whole (small), besides the one it is built from."""
    return [src for src in table.sources if src.alias != ROW_LOCAL_SOURCE[table.name]]


def _row_local_read(
    db_ready: Future[_BuildDb],
    export: SqliteExport,
    table: ModelTable,
    cursors: _WorkerCursors,
    context: Callable[[], NormalizeContext],
    notes: BuildNotes,
) -> SliceRead:
    """The read that builds *table* slice by slice: through its Arrow normalization (given
    *context*, asked for by each slice's normalization), or through its query, after its
    side sources are registered in the build's DuckDB; each slice's dangling names are
    counted into *notes*."""
    alias = ROW_LOCAL_SOURCE[table.name]
    (stream,) = [src.resolve(export) for src in table.sources if src.alias == alias]
    if table.arrow is not None:
        arrow = table.arrow

        def normalize_arrow(raw: pa.Table) -> pa.Table:
            built = arrow(raw, context())
            notes.count_dangling(table.name, raw, built)
            return built

        return SliceRead(stream.table, stream.columns, stream.with_rowid, normalize_arrow)
    for src in _side_sources(table):
        _register_small(db_ready.result().con, export, src)
    query = table.sql(export)

    def normalize(raw: pa.Table) -> pa.Table:
        cursor = cursors.get()
        cursor.register(alias, raw)
        try:
            built = to_arrow(cursor.sql(query))
        finally:
            cursor.unregister(alias)
        notes.count_dangling(table.name, raw, built)
        return built

    return SliceRead(stream.table, stream.columns, stream.with_rowid, normalize)

