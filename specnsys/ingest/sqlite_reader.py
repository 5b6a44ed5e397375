"""Read-only access to an nsys SQLite export: validation, discovery and bulk reads into Arrow.

The export is never written to: every connection is opened through a ``mode=ro&immutable=1``
URI (SQLite then neither writes nor locks the file), and the file is checked before SQLite sees
it, so that a truncated copy or a file of another kind gets a clear one-line error.

Bulk reads use Arrow's own SQLite driver (ADBC), which fills Arrow arrays in C without creating a
Python object per value. Its type inference looks only at the first batch of rows, so every
column is read through an explicit ``CAST`` and text/real columns through a NULL flag plus a
non-NULL value: the Arrow type then never depends on the data.
"""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from specnsys.errors import BadInputError

SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_HEADER_SIZE = 100

ColumnKind = Literal["int", "real", "text"]

#: Rows per rowid slice: small enough to balance two cores, large enough to amortize a query.
SLICE_ROWS = 250_000


@dataclass(frozen=True)
class RawColumn:
    """One column to read from a source table: its name there and how to read it."""

    name: str
    kind: ColumnKind = "int"


def _arrow_type(kind: ColumnKind) -> pa.DataType:
    return {"int": pa.int64(), "real": pa.float64(), "text": pa.string()}[kind]


def validate_sqlite_file(path: Path) -> None:
    """Fail with a one-line :class:`BadInputError` unless *path* looks like a whole SQLite file.

    Checks the 100-byte header: the magic string, the page size and the database size it
    records, so a copy cut short is reported as truncated instead of as a malformed-image error
    half-way through a read.
    """
    if not path.exists():
        if path.is_symlink():
            raise BadInputError(f"{path}: broken symbolic link")
        raise BadInputError(f"{path}: no such file")
    if path.is_dir():
        raise BadInputError(f"{path}: is a directory, expected an nsys .sqlite export")
    if not path.is_file():
        raise BadInputError(f"{path}: not a regular file")
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            header = handle.read(SQLITE_HEADER_SIZE)
    except OSError as exc:
        raise BadInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if size == 0:
        raise BadInputError(f"{path}: empty file (0 bytes), not an nsys export")
    if not header.startswith(SQLITE_MAGIC):
        raise BadInputError(
            f"{path}: not an SQLite database (expected an nsys .sqlite export or .nsys-rep report)"
        )
    if len(header) < SQLITE_HEADER_SIZE:
        raise BadInputError(f"{path}: truncated SQLite file ({size} bytes, header incomplete)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    change_counter = header[24:28]
    version_valid_for = header[92:96]
    # The in-header size is only authoritative when the two counters agree (SQLite docs §1.3.7).
    if page_count and change_counter == version_valid_for and size < page_size * page_count:
        raise BadInputError(
            f"{path}: truncated SQLite file ({size} bytes, header says "
            f"{page_size * page_count} bytes)"
        )


def readonly_uri(path: Path) -> str:
    """A SQLite URI that opens *path* read-only and immutable (no writes, no locks, no journal)."""
    quoted = urllib.parse.quote(str(path.resolve()), safe="/")
    return f"file:{quoted}?mode=ro&immutable=1"


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class SqliteExport:
    """A read-only handle on one SQLite file: table discovery, small queries, bulk Arrow reads."""

    def __init__(self, path: Path) -> None:
        validate_sqlite_file(path)
        self.path = path
        self._uri = readonly_uri(path)
        try:
            self._con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
            self._tables = {
                name: None
                for (name,) in self._con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"{path}: unreadable SQLite file: {exc}") from None

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
            rows = self._query(f"PRAGMA table_info({_quote(table)})")
            cached = [str(row[1]) for row in rows]
            self._tables[table] = cached
        return list(cached)

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        """Run a small query (metadata, counts) and return its rows."""
        return self._query(sql, params)

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        try:
            return self._con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BadInputError(f"{self.path}: unreadable SQLite file: {exc}") from None

    def read_tables(
        self, requests: Sequence[tuple[str, Sequence[RawColumn], bool]]
    ) -> list[pa.Table]:
        """Read several ``(table, columns, with_rowid)`` requests, in parallel.

        Every table is cut into rowid slices of about ``SLICE_ROWS`` rows and all slices of
        all tables share one pool with a worker per core, largest tables first, so the cores
        stay busy whatever the mix of table sizes (reading is the bulk of a cold open).
        """
        plans = [self._plan(table, columns, with_rowid) for table, columns, with_rowid in requests]
        jobs = [(i, sql) for i, plan in enumerate(plans) for sql in plan[1]]
        jobs.sort(key=lambda job: -plans[job[0]][2])
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        results: dict[tuple[int, str], pa.Table] = {}
        if jobs:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                done = pool.map(lambda job: self._adbc_read(job[1], plans[job[0]][0]), jobs)
                results = dict(zip(jobs, done, strict=True))
        tables = []
        for i, (schema, slices, _, columns, with_rowid) in enumerate(plans):
            parts = [results[(i, sql)] for sql in slices]
            raw = pa.concat_tables(parts) if parts else schema.empty_table()
            tables.append(_restore_columns(raw, columns, with_rowid, requests[i][0]))
        return tables

    def _plan(
        self, table: str, columns: Sequence[RawColumn], with_rowid: bool
    ) -> tuple[pa.Schema, list[str], int, Sequence[RawColumn], bool]:
        """(raw schema, slice queries, estimated rows, columns, with_rowid) for one request."""
        present = set(self.columns(table))
        select: list[str] = []
        schema_fields: list[pa.Field] = []
        if with_rowid:
            select.append("rowid AS __rowid")
            schema_fields.append(pa.field("__rowid", pa.int64()))
        for col in columns:
            if col.name not in present:
                continue
            quoted = _quote(col.name)
            if col.kind == "int":
                select.append(f"CAST({quoted} AS INTEGER) AS {quoted}")
            else:
                sql_type = "REAL" if col.kind == "real" else "TEXT"
                default = "0.0" if col.kind == "real" else "''"
                select.append(f"({quoted} IS NULL) AS {_quote(col.name + '__isnull')}")
                select.append(f"COALESCE(CAST({quoted} AS {sql_type}), {default}) AS {quoted}")
                schema_fields.append(pa.field(col.name + "__isnull", pa.int64()))
            schema_fields.append(pa.field(col.name, _arrow_type(col.kind)))
        schema = pa.schema(schema_fields)
        if table not in self._tables or not select:
            return schema, [], 0, columns, with_rowid
        base = f"SELECT {', '.join(select)} FROM {_quote(table)}"
        # min/max of the rowid are two B-tree seeks; count(*) would walk the whole table.
        lo, hi = self._query(f"SELECT min(rowid), max(rowid) FROM {_quote(table)}")[0]
        if lo is None:
            return schema, [base], 0, columns, with_rowid
        lo, hi = int(lo), int(hi)
        span = hi - lo + 1
        n = max(1, min(64, span // SLICE_ROWS))
        if n == 1:
            return schema, [base], span, columns, with_rowid
        edges = [lo + span * k // n for k in range(n + 1)]
        edges[-1] = hi + 1
        slices = [f"{base} WHERE rowid >= {a} AND rowid < {b}" for a, b in zip(edges, edges[1:], strict=False)]
        return schema, slices, span, columns, with_rowid

    def _adbc_read(self, sql: str, schema: pa.Schema) -> pa.Table:
        import adbc_driver_sqlite.dbapi as adbc_sqlite

        try:
            with adbc_sqlite.connect(self._uri) as con, con.cursor() as cur:
                cur.execute(sql)
                table = cur.fetch_arrow_table()
        except Exception as exc:  # ADBC raises several DB-API error classes and OSError
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BadInputError(f"{self.path}: unreadable SQLite data: {message}") from None
        if table.num_rows == 0:
            return schema.empty_table()
        try:
            return table.cast(schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise BadInputError(f"{self.path}: unexpected column types: {exc}") from None


def _restore_columns(
    raw: pa.Table, columns: Sequence[RawColumn], with_rowid: bool, table: str
) -> pa.Table:
    """Undo the NULL-flag encoding and add all-NULL columns for the ones the table lacks."""
    import pyarrow.compute as pc

    arrays: list[pa.Array | pa.ChunkedArray] = []
    names: list[str] = []
    if with_rowid:
        arrays.append(raw.column("__rowid"))
        names.append("__rowid")
    n = raw.num_rows
    for col in columns:
        if col.name not in raw.column_names:
            arrays.append(pa.nulls(n, _arrow_type(col.kind)))
        elif col.kind == "int":
            arrays.append(raw.column(col.name))
        else:
            is_null = pc.equal(raw.column(col.name + "__isnull"), 1)
            values = raw.column(col.name)
            if col.kind == "text":
                values = _valid_utf8(values, f"{table}.{col.name}")
            arrays.append(pc.if_else(is_null, pa.scalar(None, _arrow_type(col.kind)), values))
        names.append(col.name)
    return pa.table(arrays, names=names)


def _valid_utf8(values: pa.ChunkedArray, column: str) -> pa.ChunkedArray:
    """SQLite stores whatever bytes it was given as TEXT; Arrow strings must be UTF-8.

    Invalid sequences (seen in exports of programs that print binary data) are replaced by
    U+FFFD with a warning, instead of failing the whole ingest later in DuckDB or Polars.
    """
    try:
        values.validate(full=True)
        return values
    except pa.ArrowInvalid:
        pass
    import warnings

    from specnsys.ingest.cache import SpecnsysWarning

    fixed: list[str | None] = []
    bad = 0
    for value in values.cast(pa.binary()).to_pylist():
        if value is None:
            fixed.append(None)
            continue
        try:
            fixed.append(value.decode("utf-8"))
        except UnicodeDecodeError:
            fixed.append(value.decode("utf-8", "replace"))
            bad += 1
    warnings.warn(
        f"{bad} value(s) of {column} are not valid UTF-8; invalid bytes shown as U+FFFD",
        SpecnsysWarning,
        stacklevel=2,
    )
    return pa.chunked_array([pa.array(fixed, pa.string())])


FINGERPRINT_BYTES = 1 << 16


def file_identity(path: Path) -> tuple[int, int, str]:
    """(size, mtime in ns, digest of the first and last 64 KiB) of *path*.

    Size and mtime catch ordinary rewrites; the digest (which covers SQLite's header, with its
    change counter, and the last pages written) catches a rewrite that kept both, at the cost
    of two small reads instead of hashing a multi-GB file.
    """
    import hashlib

    st = os.stat(path)
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        digest.update(handle.read(FINGERPRINT_BYTES))
        if st.st_size > FINGERPRINT_BYTES:
            handle.seek(max(FINGERPRINT_BYTES, st.st_size - FINGERPRINT_BYTES))
            digest.update(handle.read(FINGERPRINT_BYTES))
    return st.st_size, st.st_mtime_ns, digest.hexdigest()
