"""Nsight Systems exports (``nsys export --type sqlite``) and ``.nsys-rep`` reports -> the
trace model: the reader over :mod:`specnsys.ingest` (version detection, the slice-by-slice
build, the Parquet cache), which stays where it is; this is its place in the registry.

It is also the registry's fallback (:func:`specnsys.readers.reader_for`): a file no reader
recognizes is opened as an export, whose checks say in one line why it is none (a folder,
an empty file, a text file, a truncated database, a database without nsys tables).
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

from specnsys.errors import BadInputError
from specnsys.ingest.build import BuildNotes, build_model
from specnsys.ingest.cache import CacheKey
from specnsys.ingest.input_file import (
    SQLITE_MAGIC,
    file_identity,
    require_unchanged,
    validate_sqlite_file,
)
from specnsys.ingest.nsys_rep import export_report_if_needed, is_report
from specnsys.ingest.schema import (
    SchemaVersion,
    detect_version,
    require_events,
    require_nsys_tables,
)
from specnsys.ingest.sqlite_reader import SqliteExport
from specnsys.readers.base import BuiltModel, OpenedModel
from specnsys.readers.nsys.opening import export_key, open_nsys

__all__ = ["NSYS", "NsysReader"]


class NsysReader:
    """The :class:`~specnsys.readers.Reader` of nsys SQLite exports and reports."""

    name = "nsys"

    def recognizes(self, path: Path) -> bool:
        """A regular file that starts with SQLite's magic, or a report (``.nsys-rep``,
        ``.qdrep``) by its name (nsys reads its content)."""
        if is_report(path):
            return True
        try:
            if not stat.S_ISREG(path.stat().st_mode):
                return False
            with path.open("rb") as handle:
                return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
        except OSError:
            return False

    def cache_key(self, path: Path) -> CacheKey:
        """The export's identity, schema and product version. A report is keyed as its
        export, which :meth:`open` makes first (with ``nsys``): give that export."""
        if is_report(path):
            raise BadInputError(
                f"{path}: a report is keyed as its SQLite export: open it, or give the export"
            )
        validate_sqlite_file(path)
        identity = file_identity(path)
        with SqliteExport(path) as export:
            require_nsys_tables(export)
            return export_key(path, identity, detect_version(export))

    def build(self, path: Path) -> BuiltModel:
        """The model of the export (a report: of its export, made in a private folder and
        removed), in memory."""
        sqlite_path, scratch = export_report_if_needed(path, None)
        try:
            validate_sqlite_file(sqlite_path)
            identity = file_identity(sqlite_path)
            with SqliteExport(sqlite_path) as export:
                require_nsys_tables(export)
                version = detect_version(export)
                require_events(export)
                notes = BuildNotes()
                tables = build_model(export, None, notes)
                assert tables is not None
                require_unchanged(sqlite_path, identity)
                return BuiltModel(
                    tables, version, [], export.tables, notes.dangling(), export.inexact_values(),
                    export.invalid_utf8(),
                )
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)

    def open(self, path: Path, root: Path | None) -> OpenedModel:
        """See :func:`~specnsys.readers.nsys.opening.open_nsys`: built straight into the
        cache entry, never whole in memory when a cache is used."""
        return open_nsys(path, root)

    def restore(self, version: SchemaVersion) -> SchemaVersion:
        return version


NSYS = NsysReader()
