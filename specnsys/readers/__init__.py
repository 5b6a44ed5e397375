"""The readers: each trace format's way into the same model (docs/design.md#readers).

A reader (:class:`Reader`) recognizes its files by their content, names what the cache keys
their model on, builds the fourteen model tables (declared in :mod:`specnsys.model`) and
opens a file: from its cache entry, else built. :func:`reader_for` picks the reader of a
path from the registry (:func:`readers`), and ``open_trace`` opens it with that reader.
The nsys reader (:mod:`.nsys`, over :mod:`specnsys.ingest`) streams an export into its cache
entry itself; the others build in memory and open with :func:`.opening.open_with` (the cache
entry keyed on the file's identity, the summary, the data-quality notes).

Readers sit at the ingest level (tests/test_layers.py): they import ingest modules, and only
``specnsys.ingest.trace`` imports them, lazily.
"""

from __future__ import annotations

from pathlib import Path

from specnsys.readers.base import BuiltModel, OpenedModel, Reader

__all__ = ["BuiltModel", "OpenedModel", "Reader", "reader_for", "readers"]


def readers() -> tuple[Reader, ...]:
    """Every reader, asked in order; the last, nsys's, also opens what none recognizes."""
    from specnsys.readers.kineto import KINETO
    from specnsys.readers.nsys import NSYS

    return (KINETO, NSYS)


def reader_for(path: Path) -> Reader:
    """The first reader that recognizes *path*; else the last one, the nsys reader, whose
    checks say in one line why *path* is no trace (a folder, an empty or text file, a
    database without nsys tables)."""
    registered = readers()
    for reader in registered:
        if reader.recognizes(path):
            return reader
    return registered[-1]
