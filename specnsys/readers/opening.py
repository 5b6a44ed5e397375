"""A model built in memory by its reader, cached as the nsys reader caches its model
(docs/design.md#data-model): the opening of every reader but nsys's.

The entry is keyed on the reader's :meth:`~specnsys.readers.Reader.cache_key` (the file's
identity: resolved path, size, mtime, a digest of its inode, ctime and both ends; the
reader's name and version) and the model version, so a changed file is read again; it holds
one Parquet file per model table, the summary in its manifest, and the reader's notes beside
it (they are said again on every open). Without a usable cache root the model stays in
memory.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from specnsys.errors import SpecnsysWarning
from specnsys.ingest import cache
from specnsys.ingest.input_file import file_identity, require_unchanged
from specnsys.ingest.parquet_writer import write_parquet
from specnsys.ingest.summary import TraceSummary, summarize
from specnsys.model import MODEL_TABLES
from specnsys.readers.base import BuiltModel, OpenedModel, Reader

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

__all__ = ["NOTES", "file_key", "open_with"]

#: The derived result (:func:`specnsys.ingest.cache.write_derived`) holding a reader's notes.
NOTES = "reader_notes"


def file_key(path: Path, reader_version: str) -> cache.CacheKey:
    """The cache key of a file read by a reader opened here: the file's identity and
    *reader_version* (``<name>-<version>``) in the key's schema-version field."""
    size, mtime_ns, fingerprint = file_identity(path)
    return cache.CacheKey(str(path.resolve()), size, mtime_ns, fingerprint, reader_version, None)


def open_with(reader: Reader, path: Path, root: Path | None) -> OpenedModel:
    """*path*'s model as *reader* builds it, from its cache entry under *root* when valid,
    else built (and, with a *root*, cached): :meth:`Reader.open` for readers that build in
    memory."""
    key = reader.cache_key(path)  # before the first read: see require_unchanged
    identity = (key.size, key.mtime_ns, key.fingerprint)
    folder = key.folder(root) if root is not None else None
    if folder is not None:
        manifest = cache.load_manifest(folder, key)
        stored = cache.read_derived(folder, NOTES, key.__dict__)
        notes = None if stored is None else stored.get("notes")
        if manifest is not None and isinstance(notes, list):
            summary = TraceSummary.from_dict(manifest["summary"])
            summary.version = reader.restore(summary.version)
            said = [str(note) for note in notes]
            return _said(OpenedModel(summary, folder, None, True, said), path)
    built = reader.build(path)
    require_unchanged(path, identity)  # never keep a model of a file rewritten meanwhile
    summary = _summary(built)
    if folder is not None:
        final = _cached(built, summary, folder, key)
        if final is not None:
            return _said(OpenedModel(summary, final, None, False, built.notes), path)
    return _said(OpenedModel(summary, None, built.tables, False, built.notes), path)


def _summary(built: BuiltModel) -> TraceSummary:
    """The summary (counts, span, processes, capabilities) of a model held in memory."""
    import duckdb

    con: duckdb.DuckDBPyConnection = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        for name in MODEL_TABLES:
            con.register(name, built.tables[name])
        summary = summarize(con, built.version, built.source_tables, list(MODEL_TABLES))
        summary.dangling_string_ids = built.dangling_string_ids
        summary.inexact_values = built.inexact_values
        summary.invalid_utf8 = built.invalid_utf8
        return summary
    finally:
        con.close()


def _cached(
    built: BuiltModel, summary: TraceSummary, folder: Path, key: cache.CacheKey
) -> Path | None:
    """Write the model into a new entry for *key*; the entry's folder, or None (with the
    cache's warning) when it cannot be written."""
    tmp = cache.begin(folder)
    if tmp is None:
        return None
    try:
        for name in MODEL_TABLES:
            write_parquet(_slices(built.tables[name]), tmp / f"{name}.parquet")
        final = cache.commit(tmp, folder, key, list(MODEL_TABLES), summary.to_dict())
    except OSError as exc:
        cache.abandon(tmp, exc)
        return None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    cache.write_derived(final, NOTES, key.__dict__, {"notes": built.notes})
    return final


def _slices(table: pa.Table) -> list[pa.Table]:
    """*table* as the writer's row groups (one, with the schema, when it has no rows)."""
    batches = table.to_batches(max_chunksize=1 << 20)
    if not batches:
        return [table]
    import pyarrow as pa

    return [pa.Table.from_batches([b], schema=table.schema) for b in batches]


def _said(opened: OpenedModel, path: Path) -> OpenedModel:
    """*opened*, its reader's notes issued as warnings (``specnsys: warning: PATH: note``)."""
    for note in opened.notes:
        warnings.warn(f"{path}: {note}", SpecnsysWarning, stacklevel=4)
    return opened
