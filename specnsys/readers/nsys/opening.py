"""An nsys export's model: its cache entry when valid, else built slice by slice from the
export straight into a new entry (or into memory without a cache), summarized on the
connection the trace then keeps (docs/design.md#data-model).

Unlike the readers opened by :func:`specnsys.readers.opening.open_with`, the model is never
whole in memory when a cache is used: :func:`~specnsys.ingest.build.build_model` writes each
table's Parquet file as its slices arrive, so a multi-gigabyte export fits.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from specnsys.ingest import cache
from specnsys.ingest.build import BuildNotes, DatabaseHandover, build_model
from specnsys.ingest.connection import analysis_connection, closed_on_error, model_views
from specnsys.ingest.input_file import file_identity, require_unchanged, validate_sqlite_file
from specnsys.ingest.nsys_rep import export_report_if_needed
from specnsys.ingest.schema import (
    SchemaVersion,
    detect_version,
    require_events,
    require_nsys_tables,
)
from specnsys.ingest.sqlite_reader import SqliteExport
from specnsys.ingest.summary import TraceSummary, summarize
from specnsys.model import MODEL_TABLES
from specnsys.readers.base import OpenedModel

__all__ = ["export_key", "open_nsys"]


def export_key(
    sqlite_path: Path, identity: tuple[int, int, str], version: SchemaVersion
) -> cache.CacheKey:
    """The cache key of an export: its identity, schema and product version (the model
    version is added by :meth:`~specnsys.ingest.cache.CacheKey.digest`)."""
    size, mtime_ns, fingerprint = identity
    return cache.CacheKey(
        str(sqlite_path.resolve()), size, mtime_ns, fingerprint, version.schema_version,
        version.product_version,
    )  # fmt: skip


def open_nsys(path: Path, root: Path | None) -> OpenedModel:
    """The model of an nsys ``.sqlite`` export, or of an ``.nsys-rep`` report's export (made
    with ``nsys``: kept under *root*, else in a private folder the trace removes)."""
    sqlite_path, scratch = export_report_if_needed(path, root)
    try:
        # an export in a private folder has a name of its own each time: no entry to key on it
        opened = _open_export(sqlite_path, root if scratch is None else None)
    except BaseException:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return replace(opened, scratch=scratch)


def _open_export(sqlite_path: Path, root: Path | None) -> OpenedModel:
    """The model of one SQLite export, from its entry under the cache *root* when there is a
    valid one, else built (into a new entry when *root* is given, else in memory)."""
    validate_sqlite_file(sqlite_path)  # a directory, a text file...: said before the identity
    identity = file_identity(sqlite_path)  # before the first read: see require_unchanged
    with SqliteExport(sqlite_path) as export:
        require_nsys_tables(export)
        version = detect_version(export)
        key = export_key(sqlite_path, identity, version)
        folder = key.folder(root) if root is not None else None
        if folder is not None:
            manifest = cache.load_manifest(folder, key)
            if manifest is not None:
                cache.ENTRIES_READ[folder] = sqlite_path  # see ingest.trace.rebuilt_once
                summary = TraceSummary.from_dict(manifest["summary"])
                return OpenedModel(summary, folder, None, True, [], sqlite_path)
        require_events(export)
        tmp = cache.begin(folder) if folder is not None else None
        if tmp is not None:
            assert folder is not None
            try:
                return _built_into(export, (identity, version), key, tmp, folder)
            except OSError as exc:
                cache.abandon(tmp, exc)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)  # bad input (or a bug): no half entry
                raise
        return _built_in_memory(export, (identity, version))


#: An export's identity (:func:`~specnsys.ingest.input_file.file_identity`) and version.
_Read = tuple[tuple[int, int, str], SchemaVersion]


def _built_into(
    export: SqliteExport, read: _Read, key: cache.CacheKey, tmp: Path, folder: Path
) -> OpenedModel:
    """The model built into the new entry *tmp*, summarized, and committed as *folder*."""
    identity, version = read
    notes = BuildNotes()
    handover = DatabaseHandover()
    build_model(export, tmp, notes, handover)
    with closed_on_error(analysis_connection(identity[0], handover.connection)) as con:
        summary = _noted(
            summarize(
                model_views(con, tmp, None), version, export.tables,
                list(MODEL_TABLES), notes.rows,
            ),
            export, notes,
        )  # fmt: skip
        require_unchanged(export.path, identity)  # never cache a mixed model
        final = cache.commit(tmp, folder, key, list(MODEL_TABLES), summary.to_dict())
        return OpenedModel(
            summary, final, None, False, [], export.path, model_views(con, final, None)
        )


def _built_in_memory(export: SqliteExport, read: _Read) -> OpenedModel:
    """The model built in memory (no usable cache), summarized on the trace's connection."""
    identity, version = read
    notes = BuildNotes()
    handover = DatabaseHandover()
    tables = build_model(export, None, notes, handover)
    assert tables is not None
    with closed_on_error(analysis_connection(identity[0], handover.connection)) as con:
        require_unchanged(export.path, identity)
        summary = _noted(
            summarize(
                model_views(con, None, tables), version, export.tables,
                list(MODEL_TABLES), notes.rows,
            ),
            export, notes,
        )  # fmt: skip
        return OpenedModel(summary, None, tables, False, [], export.path, con)


def _noted(summary: TraceSummary, export: SqliteExport, notes: BuildNotes) -> TraceSummary:
    """*summary* with what the build counted and the model cannot show (dangling string ids,
    values read as NULL, text that was not UTF-8), kept with the cache entry for the data-quality notes."""
    summary.dangling_string_ids = notes.dangling()
    summary.inexact_values = export.inexact_values()
    summary.invalid_utf8 = export.invalid_utf8()
    return summary
