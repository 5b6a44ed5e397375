"""What every reader gives and is: the model it builds, and the small protocol it follows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from specnsys.ingest.schema import SchemaVersion
    from specnsys.ingest.summary import TraceSummary

__all__ = ["BuiltModel", "OpenedModel", "Reader"]


@dataclass(frozen=True)
class BuiltModel:
    """What a reader makes of one file: every model table, where it came from, and one
    sentence per kind of thing it had to skip or could not read as it was."""

    tables: dict[str, pa.Table]
    version: SchemaVersion
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class OpenedModel:
    """A model ready for a ``Trace``: in a cache entry (*folder*) or in memory (*tables*)."""

    summary: TraceSummary
    folder: Path | None
    tables: dict[str, pa.Table] | None
    from_cache: bool
    notes: list[str]


class Reader(Protocol):
    """One trace format."""

    #: Short name, part of every cache key (with :attr:`version`).
    name: str
    #: Bump when what the reader builds from a file changes, so old cache entries are not used.
    version: int

    def recognizes(self, path: Path) -> bool:
        """Whether *path* is a file of this format, by its content (cheap: a few bytes)."""
        ...

    def build(self, path: Path) -> BuiltModel:
        """The model of *path*; a :class:`~specnsys.errors.BadInputError` (one line) for a
        file that is not a usable trace of this format."""
        ...

    def restore(self, version: SchemaVersion) -> SchemaVersion:
        """*version* as read back from a cache entry, as the reader describes it."""
        ...
