"""Read-only access to an nsys SQLite export: discovery and bulk reads into Arrow.

The export is never written to: every connection is opened through a ``mode=ro&immutable=1``
URI (SQLite then neither writes nor locks the file), and the file is checked before SQLite sees
it (:mod:`specnsys.ingest.input_file`), so that a truncated copy or a file of another kind gets
a clear one-line error.

Bulk reads use connectorx, which steps SQLite and fills Arrow arrays in Rust without creating a
Python object per value, with the GIL released (so rowid slices read on all cores). It costs
less CPU per value than Arrow's own SQLite driver, ADBC (see
docs/performance.md#reading-the-export). Its connection string carries the whole
``mode=ro&immutable=1`` URI, percent-encoded, so the file is opened ``O_RDONLY`` without locks.
connectorx infers a column's type from the first row, so each query starts with one typed row of
constants (dropped after the read): the Arrow type never depends on the data. Text is read as
``BLOB`` (SQLite hands over its bytes as stored) and decoded here, because a TEXT read of
invalid UTF-8 fails the whole query. Numbers are read as stored; a value of another storage
class than its column's (text or a real in an integer column: SQLite keeps whatever it was
given) fails the read, and that slice is read again with every column through an explicit
``CAST``, kept only where the value is a number: a text holding a number is read as that
number, a text that holds none (SQLite's ``CAST`` makes it 0) and bytes are NULL, and counted
(:meth:`SqliteExport.inexact_values`), so that the data-quality notes can say so.
The ``CAST`` is not in the first read because it costs a good part of the read when no value
needs it (docs/performance.md#reading-the-export).
Each value still costs the reader time, NULL or not, so columns the model only ever coalesces
are coalesced inside SQLite and read as one (see :class:`RawColumn`).

Big tables are never read whole: :meth:`SqliteExport.iter_reads` cuts each table into rowid
slices, reads (and optionally transforms) a few of them ahead on one thread pool shared by
all the tables and hands them over in order, so memory stays at a few slices whatever the size
of the export.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import urllib.parse
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from specnsys.cores import usable_cores
from specnsys.errors import BadInputError
from specnsys.ingest.input_file import validate_sqlite_file

if TYPE_CHECKING:  # pyarrow loads on the first read: opening a cached model never needs it
    import pyarrow as pa

ColumnKind = Literal["int", "real", "text"]

#: What SQLite hands back for one value of a row (its storage classes).
SqliteValue = int | float | str | bytes | None

#: Rows per rowid slice: small enough that a few slices in flight cost little memory and two
#: cores stay balanced, large enough to amortize a query (and to make a good Parquet row group).
SLICE_ROWS = 250_000

#: Slices read ahead of the consumer, beyond one per worker: bounds memory while reading.
PREFETCH_EXTRA = 1


def read_workers() -> int:
    """The reader's threads when the caller names no count: one per usable core (the
    affinity and CPU quota, :mod:`specnsys.cores`; not the host's cores)."""
    return usable_cores()


@dataclass(frozen=True)
class RawColumn:
    """One column to read from a source table: its name there and how to read it.

    With *coalesce*, the column is not in the table: it is ``COALESCE`` of those source
    columns (the ones the table has, in that order), computed by SQLite, so that a row costs
    the reader one value instead of one per source column (NVTX payloads: four integer
    columns of which at most one is set).
    """

    name: str
    kind: ColumnKind = "int"
    coalesce: tuple[str, ...] = ()

    def sources(self) -> tuple[str, ...]:
        """The source table's columns this column is read from."""
        return self.coalesce or (self.name,)


@dataclass(frozen=True)
class SliceQuery:
    """One slice's SQL twice: *plain* reads numbers as stored (fast), *cast* converts every
    column with ``CAST`` (read when *plain* fails on a value of another storage class).

    *inexact* (for the reads of whole tables: the model's rows) counts, per numeric column
    named in *labels*, the slice's values that *cast* read as NULL because they are no
    number; it runs only after *cast* did."""

    plain: str
    cast: str
    inexact: str | None = None
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class SliceRead:
    """One table to read slice by slice: its columns, and what each slice becomes on the
    reader's thread (*transform*); with *where* (an SQLite condition on the source columns),
    only the rows it selects."""

    table: str
    columns: tuple[RawColumn, ...]
    with_rowid: bool = False
    transform: Callable[[pa.Table], pa.Table] | None = None
    where: str | None = None


def _arrow_type(kind: ColumnKind) -> pa.DataType:
    import pyarrow as pa

    return {"int": pa.int64(), "real": pa.float64(), "text": pa.string()}[kind]


def _raw_arrow_type(kind: ColumnKind) -> pa.DataType:
    """The type a column arrives in: text as bytes, decoded by :func:`_valid_utf8`."""
    import pyarrow as pa

    return pa.large_binary() if kind == "text" else _arrow_type(kind)


#: kind -> (the SQLite type each value is cast to, a constant of that type for the typed row)
_SQL_TYPES: dict[ColumnKind, tuple[str, str]] = {
    "int": ("INTEGER", "0"),
    "real": ("REAL", "0.0"),
    "text": ("BLOB", "X''"),
}


def _is_number(value: str) -> str:
    """SQL: whether *value* is a number: stored as one, or a text that holds one (``'5'``,
    ``' 7 '``, ``'5.9'``). A cast has its type's affinity, so the comparison applies numeric
    affinity to *value*: a text equals its cast only when it is the number itself."""
    return (
        f"(typeof({value}) IN ('integer', 'real') OR CAST({value} AS INTEGER) = {value} "
        f"OR CAST({value} AS REAL) = {value})"
    )


def _exact(value: str, sql_type: str) -> str:
    """*value* as *sql_type* where it is a number, else NULL.

    SQLite's ``CAST`` reads any text or blob as a number, and one that holds none as 0
    (``CAST('lots' AS INTEGER)`` is 0): a mark payload stored as text counted as 0 tokens. A
    number stored as text is read as that number; a real in an integer column is cut to its
    integer part, as ``CAST`` does (a fraction of a nanosecond); a text that holds no number
    (``'lots'``, ``'5abc'``) and bytes are NULL, counted by :func:`_inexact_count`."""
    return f"CASE WHEN {_is_number(value)} THEN CAST({value} AS {sql_type}) END"


def _inexact_count(value: str) -> str:
    """The number of rows whose *value* :func:`_exact` reads as NULL though it is not NULL."""
    return f"coalesce(sum(({value}) IS NOT NULL AND NOT coalesce({_is_number(value)}, 0)), 0)"


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):  # SQLite quoted a damaged schema in its message
        return "malformed database schema (names that are not UTF-8)"
    return str(exc)


def readonly_uri(path: Path) -> str:
    """A SQLite URI that opens *path* read-only and immutable (no writes, no locks, no journal)."""
    quoted = urllib.parse.quote(str(path.resolve()), safe="/")
    return f"file:{quoted}?mode=ro&immutable=1"


def quote_identifier(identifier: str) -> str:
    """*identifier* double-quoted, its quotes doubled: a name as SQLite and DuckDB read it."""
    return '"' + identifier.replace('"', '""') + '"'


class SqliteExport:
    """A read-only handle on one SQLite file: table discovery, small queries, bulk Arrow reads."""

    def __init__(self, path: Path) -> None:
        validate_sqlite_file(path)
        self.path = path
        self._uri = readonly_uri(path)
        # connectorx hands what follows ``sqlite://`` to SQLite after one percent-decoding:
        # encoded whole, the read-only URI arrives intact (unencoded, ``file:`` is mangled).
        self._connectorx_uri = "sqlite://" + urllib.parse.quote(self._uri, safe="")
        self._lock = threading.Lock()
        self._inexact: Counter[str] = Counter()
        self._invalid_utf8: Counter[str] = Counter()
        self._inexact_lock = threading.Lock()
        try:
            self._con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            # Names and metadata are whatever bytes were stored (a fuzzed table name crashed
            # the strict decoder): invalid UTF-8 becomes U+FFFD, as in the data columns.
            self._con.text_factory = lambda raw: raw.decode("utf-8", "replace")
            self._tables: dict[str, list[str] | None] = {
                name: None
                for (name,) in self._con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # an error text not UTF-8
            raise BadInputError(f"{path}: unreadable SQLite file: {_reason(exc)}") from None

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> SqliteExport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tables(self) -> list[str]:
        return list(self._tables)

    def has_table(self, name: str) -> bool:
        return name in self._tables

    def columns(self, table: str) -> list[str]:
        """Column names of *table* (empty when the table is absent)."""
        if table not in self._tables:
            return []
        cached = self._tables[table]
        if cached is None:
            rows = self._query(f"PRAGMA table_info({quote_identifier(table)})")
            cached = [str(row[1]) for row in rows]
            self._tables[table] = cached
        return list(cached)

    def inexact_values(self) -> dict[str, int]:
        """Per ``TABLE.column`` (source names), the values of a numeric column that the
        whole-table reads so far found not to be numbers (text that holds none, bytes) and
        read as NULL (see :func:`_exact`)."""
        with self._inexact_lock:
            return dict(self._inexact)

    def invalid_utf8(self) -> dict[str, int]:
        """Per ``TABLE.column``, the text values the slice reads so far found not to be valid
        UTF-8 (their invalid bytes read as U+FFFD). Kept with the cache entry's summary, so
        that every command says it, not only the one that built the model."""
        with self._inexact_lock:
            return dict(self._invalid_utf8)

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[SqliteValue, ...]]:
        """Run a small query (metadata, counts) and return its rows."""
        return self._query(sql, params)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[SqliteValue, ...]]:
        try:
            with self._lock:  # the model is built on several threads
                return self._con.execute(sql, params).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # an error text not UTF-8
            raise BadInputError(f"{self.path}: unreadable SQLite file: {_reason(exc)}") from None

    def read_tables(
        self, requests: Sequence[tuple[str, Sequence[RawColumn], bool]], where: str | None = None
    ) -> list[pa.Table]:
        """Read several ``(table, columns, with_rowid)`` requests whole (for small tables, or
        the few rows of a big one that *where*, an SQLite condition, selects)."""
        import pyarrow as pa

        return [
            pa.concat_tables(list(self.iter_slices(table, columns, with_rowid, where=where)))
            for table, columns, with_rowid in requests
        ]

    def iter_slices(
        self,
        table: str,
        columns: Sequence[RawColumn],
        with_rowid: bool = False,
        transform: Callable[[pa.Table], pa.Table] | None = None,
        *,
        workers: int | None = None,
        where: str | None = None,
    ) -> Iterator[pa.Table]:
        """Yield *table* as Arrow tables of about ``SLICE_ROWS`` rows each, in rowid order.

        One :class:`SliceRead` through :meth:`iter_reads` (see there). With *where* (an SQLite
        condition on the source columns) only the rows it selects are read.
        """
        read = SliceRead(table, tuple(columns), with_rowid, transform, where)
        for _, part in self.iter_reads([read], workers=workers):
            yield part

    def iter_reads(
        self, reads: Iterable[SliceRead], *, workers: int | None = None
    ) -> Generator[tuple[int, pa.Table], None, None]:
        """Yield ``(index of the read, slice)`` for each of *reads* in turn, slices in rowid
        order, every read through one pool of ``workers`` threads (default: one per core).

        At most ``workers + PREFETCH_EXTRA`` slices are in flight ahead of the consumer, so
        memory is bounded by a few slices however large the tables. Each read's *transform*
        runs in the worker on each restored slice (DuckDB and Arrow release the GIL, so it runs
        in parallel with the reads). The next read is taken from *reads* (a generator may
        prepare for it then) as soon as the last slice of the previous one is submitted, so
        the workers go on with it while the consumer still takes the previous one's last
        slices: no core idles between tables. An absent or empty table yields exactly one
        empty slice, so the consumer always learns the schema. Invalid UTF-8 in text columns
        is replaced, and counted per column (:meth:`invalid_utf8`).
        """
        bad_utf8: Counter[str] = Counter()

        def jobs() -> Iterator[tuple[int, Callable[[], pa.Table]]]:
            for index, read in enumerate(reads):
                schema, slices = self._plan(read.table, read.columns, read.with_rowid, read.where)
                queries: Sequence[SliceQuery | None] = slices or [None]
                for query in queries:
                    yield index, functools.partial(self._read_slice, read, schema, query, bad_utf8)

        workers = max(1, workers or read_workers())
        todo = jobs()
        pending: deque[tuple[int, Future[pa.Table]]] = deque()
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="specnsys-read")
        try:
            for index, job in todo:
                pending.append((index, pool.submit(job)))
                if len(pending) >= workers + PREFETCH_EXTRA:
                    break
            while pending:
                index, future = pending.popleft()
                result = future.result()
                following = next(todo, None)
                if following is not None:
                    pending.append((following[0], pool.submit(following[1])))
                yield index, result
        finally:
            for _, future in pending:
                future.cancel()
            pool.shutdown(wait=True)
        with self._inexact_lock:
            self._invalid_utf8.update(bad_utf8)

    def _read_slice(
        self,
        read: SliceRead,
        schema: pa.Schema,
        query: SliceQuery | None,
        bad_utf8: Counter[str],
    ) -> pa.Table:
        """One slice of *read* (*query* None: the empty table), restored and transformed."""
        raw = _empty_table(schema) if query is None else self._read_arrow(query, schema)
        restored = _restore_columns(raw, read.columns, read.with_rowid, read.table, bad_utf8)
        return read.transform(restored) if read.transform is not None else restored

    def _plan(
        self, table: str, columns: Sequence[RawColumn], with_rowid: bool, where: str | None = None
    ) -> tuple[pa.Schema, list[SliceQuery]]:
        """(raw schema, slice queries) for one request.

        Every query starts with one row of typed constants (``UNION ALL`` keeps it first),
        which fixes the type connectorx infers for each column however many NULLs follow; the
        reader drops it (see :meth:`_read_arrow`).
        """
        import pyarrow as pa

        present = set(self.columns(table))
        plain: list[str] = []
        cast: list[str] = []
        typed_row: list[str] = []
        schema_fields: list[pa.Field] = []
        counts: list[str] = []  # per numeric column: its inexact values (see _inexact_count)
        labels: list[str] = []
        if with_rowid:
            plain.append("rowid AS __rowid")
            cast.append("rowid AS __rowid")
            typed_row.append("0 AS __rowid")
            schema_fields.append(pa.field("__rowid", pa.int64()))
        for col in columns:
            sources = [quote_identifier(name) for name in col.sources() if name in present]
            if not sources:
                continue
            value = sources[0] if len(sources) == 1 else f"COALESCE({', '.join(sources)})"
            sql_type, constant = _SQL_TYPES[col.kind]
            if col.kind == "text":
                converted = f"CAST({value} AS {sql_type}) AS {quote_identifier(col.name)}"
                plain.append(converted)
            else:
                converted = f"{_exact(value, sql_type)} AS {quote_identifier(col.name)}"
                plain.append(f"{value} AS {quote_identifier(col.name)}")
                counts.append(_inexact_count(value))
                present_sources = [n for n in col.sources() if n in present]
                labels.append(f"{table}.{'/'.join(present_sources)}")
            cast.append(converted)
            typed_row.append(f"{constant} AS {quote_identifier(col.name)}")  # names come from here
            schema_fields.append(pa.field(col.name, _raw_arrow_type(col.kind)))
        schema = pa.schema(schema_fields)
        if table not in self._tables or not plain:
            return schema, []
        condition = f" AND ({where})" if where else ""

        def query(select: list[str], rowids: str = "") -> str:
            return (
                f"SELECT {', '.join(typed_row)} UNION ALL SELECT {', '.join(select)} "
                f"FROM {quote_identifier(table)} WHERE 1{condition}{rowids}"
            )

        def both(rowids: str = "") -> SliceQuery:
            # only whole-table reads count: a filtered read of rows the model reads again
            # (NVTX definitions, ranges) would count them twice
            inexact = (
                f"SELECT {', '.join(counts)} FROM {quote_identifier(table)} WHERE 1{rowids}"
                if counts and where is None
                else None
            )
            return SliceQuery(
                query(plain, rowids), query(cast, rowids), inexact, tuple(labels) if inexact else ()
            )

        return schema, [both(rowids) for rowids in self._rowid_slices(table)]

    def _rowid_slices(self, table: str) -> list[str]:
        """The rowid conditions that cut *table* into slices of about :data:`SLICE_ROWS` rows
        (``[""]``: one read of the whole table)."""
        # Two subqueries, each a single B-tree seek: SQLite's min/max optimization applies only
        # to a query with one aggregate, and ``SELECT min(rowid), max(rowid)`` scans the whole
        # table (serial, before any read; docs/performance.md#reading-the-export).
        lo, hi = self._query(
            f"SELECT (SELECT min(rowid) FROM {quote_identifier(table)}), (SELECT max(rowid) FROM {quote_identifier(table)})"
        )[0]
        if lo is None or hi is None:
            return [""]
        lo, hi = int(lo), int(hi)
        span = hi - lo + 1
        n = max(1, -(-span // SLICE_ROWS))
        if n == 1:
            return [""]
        edges = [lo + span * k // n for k in range(n + 1)]
        edges[-1] = hi + 1
        return [f" AND rowid >= {a} AND rowid < {b}" for a, b in zip(edges, edges[1:], strict=False)]

    def _read_arrow(self, query: SliceQuery, schema: pa.Schema) -> pa.Table:
        import connectorx
        import pyarrow as pa

        try:
            table = connectorx.read_sql(self._connectorx_uri, query.plain, return_type="arrow")
        except Exception:  # any failure: the converting read below decides
            # A value of another storage class than its column's (see the module docs), or
            # unreadable data, which the converting read reports.
            try:
                table = connectorx.read_sql(self._connectorx_uri, query.cast, return_type="arrow")
            except Exception as exc:  # connectorx raises RuntimeError, parsers their own errors
                message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise BadInputError(f"{self.path}: unreadable SQLite data: {message}") from None
            self._count_inexact(query)
        table = table.slice(1)  # the typed row of constants
        if table.num_rows == 0:
            return _empty_table(schema)
        try:
            return table.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise BadInputError(f"{self.path}: unexpected column types: {exc}") from None


    def _count_inexact(self, query: SliceQuery) -> None:
        """Add the slice's values that the converting read turned into NULL to the counts."""
        if query.inexact is None:
            return
        found = self._query(query.inexact)[0]
        with self._inexact_lock:
            for label, n in zip(query.labels, found, strict=True):
                if n:
                    self._inexact[label] += int(n)


def _empty_table(schema: pa.Schema) -> pa.Table:
    """A table of no rows: ``schema.empty_table()`` imports pandas for its metadata
    (docs/performance.md#import-costs), this does not."""
    import pyarrow as pa

    return pa.Table.from_batches([], schema=schema)


def _restore_columns(
    raw: pa.Table,
    columns: Sequence[RawColumn],
    with_rowid: bool,
    table: str,
    bad_utf8: Counter[str] | None = None,
) -> pa.Table:
    """Add all-NULL columns for the ones the table lacks and repair invalid UTF-8.

    Counts of values that were not valid UTF-8 are added to *bad_utf8* (per ``table.column``).
    """
    import pyarrow as pa

    arrays: list[pa.Array | pa.ChunkedArray] = []
    names: list[str] = []
    if with_rowid:
        arrays.append(raw.column("__rowid"))
        names.append("__rowid")
    n = raw.num_rows
    for col in columns:
        if col.name not in raw.column_names:
            arrays.append(pa.nulls(n, _arrow_type(col.kind)))
        elif col.kind == "text":
            values, bad = _valid_utf8(raw.column(col.name))
            if bad and bad_utf8 is not None:
                bad_utf8[f"{table}.{col.name}"] += bad
            arrays.append(values)
        else:
            arrays.append(raw.column(col.name))
        names.append(col.name)
    return pa.table(arrays, names=names)


def _valid_utf8(values: pa.ChunkedArray) -> tuple[pa.ChunkedArray, int]:
    """Text read as bytes, as Arrow strings: SQLite stores whatever bytes it was given as TEXT,
    and Arrow strings must be UTF-8.

    Invalid sequences (seen in exports of programs that print binary data) are replaced by
    U+FFFD (the caller warns, once per column), instead of failing the whole ingest later in
    DuckDB or Polars. Returns the values and how many of them had to be fixed.
    """
    import pyarrow as pa

    try:
        return values.cast(pa.string()), 0  # validates: fails on the first invalid value
    except pa.ArrowInvalid:
        pass
    fixed: list[str | None] = []
    bad = 0
    for value in values.to_pylist():
        if value is None:
            fixed.append(None)
            continue
        try:
            fixed.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            fixed.append(value.decode("utf-8", "replace"))
            bad += 1
    return pa.chunked_array([pa.array(fixed, pa.string())]), bad
