"""Readers of trace formats other than nsys exports, each filling the same model.

A reader (:class:`Reader`) recognizes its files by their content, names what the cache keys
them on, and builds the fourteen model tables (docs/model.md); :func:`open_model` does the
rest the same way for every reader: the cache entry keyed on the file's identity, the
summary, the data-quality notes. ``open_trace`` asks :func:`reader_for` first and falls back
to the nsys path (docs/design.md#readers).

Readers sit at the ingest level (tests/test_layers.py): they import ingest modules, and only
``specnsys.ingest.trace`` imports them, lazily.
"""

from __future__ import annotations

from pathlib import Path

from specnsys.readers.base import BuiltModel, OpenedModel, Reader

__all__ = ["BuiltModel", "OpenedModel", "Reader", "open_model", "reader_for"]


def readers() -> tuple[Reader, ...]:
    """Every reader, asked in order."""
    from specnsys.readers.kineto import KINETO

    return (KINETO,)


def reader_for(path: Path) -> Reader | None:
    """The reader whose format *path* is (None: an nsys export, or not a trace at all)."""
    for reader in readers():
        if reader.recognizes(path):
            return reader
    return None


def open_model(reader: Reader, path: Path, root: Path | None) -> OpenedModel:
    """*path* read by *reader*: its cache entry under *root* when valid, else built (and,
    with a *root*, cached). See :mod:`specnsys.readers.opening`."""
    from specnsys.readers.opening import open_with

    return open_with(reader, path, root)
