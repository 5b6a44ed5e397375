"""DuckDB databases kept for the next trace where a process analyses trace after trace.

A new DuckDB database costs 15-20 ms of CPU (its catalog of built-in functions is made anew on
every ``duckdb.connect()``) and its close 3-4 ms. A cold open already makes one per trace (the
build hands its database on to the analysis: :class:`~specnsys.ingest.build.DatabaseHandover`);
a ``collect`` worker, which opens trace after trace, can keep that one for the next trace too
(docs/performance.md#issue-35-eighth-session-one-duckdb-database-per-cold-open).

A database goes to the next trace only inside :func:`reusing` (collect's workers, when no
metric of a user is registered: then only specnsys's own code has had the connection), and
only emptied (:func:`emptied`): every table and view dropped, temporary ones included (what a
connection registers is a temporary view), and every setting specnsys gives a database reset
to DuckDB's default, so the next user sets its own on a database like a new one. Where DuckDB
refuses (a database that spilled cannot switch its temporary folder) it is closed instead.
Outside :func:`reusing` every database is closed when its trace closes, as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # DuckDB loads where a database is made: a warm run of a command may skip it
    import duckdb

__all__ = [
    "SETTINGS", "Config", "close_database", "close_kept", "emptied", "new_database", "reusing",
]

#: Every setting specnsys gives a database (the build's configuration, the analysis's
#: settings): reset to DuckDB's default before a database is kept for another user.
SETTINGS = (
    "threads", "memory_limit", "temp_directory", "preserve_insertion_order",
    "disabled_optimizers", "allocator_flush_threshold", "allocator_background_threads",
    "enable_progress_bar", "asof_loop_join_threshold",
)  # fmt: skip

#: At most this many emptied databases are kept (a worker analyses one trace at a time).
KEPT = 1

_lock = threading.Lock()
_kept: list[tuple[int, duckdb.DuckDBPyConnection]] = []  # (the keeping process, the database)
_reusing = 0


#: DuckDB settings by name, as ``duckdb.connect(config=...)`` takes them.
Config = Mapping[str, str | bool | int | float | list[str]]


def new_database(config: Config | None = None) -> duckdb.DuckDBPyConnection:
    """A connection to a database that no other trace is using, with *config* (DuckDB's
    global settings, as ``duckdb.connect(config=...)`` takes them): a kept one when there is
    one (see the module docs), else a new one."""
    import duckdb

    kept = _take()
    if kept is not None:
        try:
            for name, value in (config or {}).items():
                kept.execute(f"SET GLOBAL {name} = ?", [value])
            return kept
        except BaseException as exc:
            kept.close()
            if not isinstance(exc, duckdb.Error):
                raise
    return duckdb.connect(config=dict(config or {}))


def close_database(con: duckdb.DuckDBPyConnection) -> None:
    """Done with *con* (a :func:`new_database`): kept for the next trace inside
    :func:`reusing` when it can be emptied and none is kept yet, else closed."""
    kept = False
    try:
        kept = bool(_reusing) and emptied(con) and _keep(con)
    finally:
        if not kept:  # an interrupt while emptying it closes it too
            con.close()


def emptied(con: duckdb.DuckDBPyConnection) -> bool:
    """Drop every table and view of *con*'s database (temporary ones of *con* included) and
    reset :data:`SETTINGS`; False, and *con* is not to be reused, where DuckDB refuses."""
    import duckdb

    try:
        objects = con.execute(
            "SELECT 'TABLE', database_name, schema_name, table_name FROM duckdb_tables() "
            "WHERE NOT internal UNION ALL "
            "SELECT 'VIEW', database_name, schema_name, view_name FROM duckdb_views() "
            "WHERE NOT internal"
        ).fetchall()
        for kind, *path in objects:
            con.execute(f"DROP {kind} {'.'.join(_quoted(str(p)) for p in path)}")
        for setting in SETTINGS:
            con.execute(f"RESET {setting}")
    except duckdb.Error:
        return False
    return True


@contextlib.contextmanager
def reusing() -> Iterator[None]:
    """Inside the block (process-wide: the build's set-up thread included), a trace's
    database is kept for the next trace when the trace closes (see the module docs)."""
    global _reusing
    with _lock:
        _reusing += 1
    try:
        yield
    finally:
        with _lock:
            _reusing -= 1


def close_kept() -> None:
    """Close the databases this process keeps (a test's clean slate; a worker's exit closes
    them anyway)."""
    with _lock:
        mine = [con for pid, con in _kept if pid == os.getpid()]
        _kept[:] = [(pid, con) for pid, con in _kept if pid != os.getpid()]
    for con in mine:
        con.close()


def _keep(con: duckdb.DuckDBPyConnection) -> bool:
    """Keep *con* for this process's next trace, if none is kept yet."""
    with _lock:
        if len(_kept) >= KEPT:
            return False
        _kept.append((os.getpid(), con))
        return True


def _take() -> duckdb.DuckDBPyConnection | None:
    """A kept database of this process inside :func:`reusing`, if any (outside, a database
    is new, as it always was). One kept before a fork is left to the parent: a child must
    not use (nor close) a database whose threads it did not inherit."""
    with _lock:
        if not _reusing:
            return None
        for i, (pid, con) in enumerate(_kept):
            if pid == os.getpid():
                del _kept[i]
                return con
    return None


def _quoted(name: str) -> str:
    """*name* as a DuckDB identifier."""
    return '"' + name.replace('"', '""') + '"'
