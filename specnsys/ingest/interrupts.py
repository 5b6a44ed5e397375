"""Let Ctrl-C and SIGTERM stop a DuckDB query that is running.

DuckDB 2.0 runs a query with the GIL released and does not look at Python's signal flag while
it runs, so the KeyboardInterrupt that the signal handler raises waits for the query to end
(docs/performance.md#interrupting-a-query). ``connection.interrupt()`` stops it at once, from
any thread. specnsys's DuckDB connections are registered here,
and the CLI's signal watcher calls :func:`interrupt_queries` from its own thread when a signal
arrives; the handler's KeyboardInterrupt then surfaces where the query returns.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

_CONNECTIONS: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()


def interruptible(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """*con*, registered so that a signal interrupts its running query; returns it."""
    _CONNECTIONS.add(con)
    return con


def interrupt_queries() -> None:
    """Interrupt the running query of every registered connection (closed ones included:
    DuckDB refuses those, which is ignored)."""
    for con in list(_CONNECTIONS):
        with contextlib.suppress(Exception):
            con.interrupt()
