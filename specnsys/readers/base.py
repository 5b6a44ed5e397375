"""What every reader gives and is: the model it builds, and the small protocol it follows."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from specnsys.ingest.cache import CacheKey
    from specnsys.ingest.schema import SchemaVersion
    from specnsys.ingest.summary import TraceSummary

__all__ = ["BuiltModel", "OpenedModel", "Reader"]


@dataclass(frozen=True)
class BuiltModel:
    """What a reader makes of one file: every model table (the declared schema as stored:
    :meth:`specnsys.model.TableSchema.stored_schema`), where it came from, and one sentence
    per kind of thing it had to skip or could not read as it was (said on every open).

    *source_tables* are the tables of the file the model was read from, when the format has
    tables (an nsys export's; ``info`` lists them); *dangling_string_ids* and
    *inexact_values* what the build counted and the model shows as NULL, *invalid_utf8* the
    text it read with U+FFFD, for the data-quality notes (:class:`~specnsys.ingest.summary.TraceSummary`)."""

    tables: dict[str, pa.Table]
    version: SchemaVersion
    notes: list[str] = field(default_factory=list)
    source_tables: list[str] = field(default_factory=list)
    dangling_string_ids: dict[str, int] = field(default_factory=dict)
    inexact_values: dict[str, int] = field(default_factory=dict)
    invalid_utf8: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class OpenedModel:
    """A model ready for a ``Trace``: in a cache entry (*folder*) or in memory (*tables*).

    *path* is the file the model is of when it is not the one opened (an ``.nsys-rep``
    report's SQLite export); *connection* a DuckDB connection that already has the model's
    views (the one that summarized it), for the trace to keep; *scratch* a private folder
    to remove when the trace is closed (the report's export, read without a cache)."""

    summary: TraceSummary
    folder: Path | None
    tables: dict[str, pa.Table] | None
    from_cache: bool
    notes: list[str]
    path: Path | None = None
    connection: duckdb.DuckDBPyConnection | None = None
    scratch: Path | None = None

    def release(self) -> None:
        """Close the connection and remove the scratch folder: the trace was not made."""
        if self.connection is not None:
            self.connection.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)


class Reader(Protocol):
    """One trace format: which files are its own, what the cache keys their model on, the
    model itself, and opening (from the cache, or built and cached).

    :func:`specnsys.readers.reader_for` asks each registered reader's :meth:`recognizes` in
    turn; ``open_trace`` then calls the chosen one's :meth:`open`. A reader whose model is
    built in memory opens with :func:`specnsys.readers.opening.open_with` (its cache entry
    keyed on :meth:`cache_key`, else :meth:`build`, summarized and cached); one that streams
    a large file into the cache has an :meth:`open` of its own (the nsys reader)."""

    #: Short name: in messages and, for readers opened by ``open_with``, in the cache key.
    name: str

    def recognizes(self, path: Path) -> bool:
        """Whether *path* is a file of this format, by its content (cheap: a few bytes)."""
        ...

    def cache_key(self, path: Path) -> CacheKey:
        """What the cache keys *path*'s model on: the file's identity (resolved path, size,
        mtime, fingerprint: :func:`~specnsys.ingest.input_file.file_identity`) and what
        tells the reader's output apart (its version, or the format's own). Taken before the
        first read, so that a file rewritten meanwhile is noticed. A
        :class:`~specnsys.errors.BadInputError` for a file that is no trace of this
        format."""
        ...

    def build(self, path: Path) -> BuiltModel:
        """The model of *path*, in memory; a :class:`~specnsys.errors.BadInputError` (one
        line) for a file that is not a usable trace of this format."""
        ...

    def open(self, path: Path, root: Path | None) -> OpenedModel:
        """*path*'s model: its cache entry under *root* when valid, else built (and, with a
        *root*, cached)."""
        ...

    def restore(self, version: SchemaVersion) -> SchemaVersion:
        """*version* as read back from a cache entry, as the reader describes it."""
        ...
