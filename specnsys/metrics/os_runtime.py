"""What the CPU threads of the analysed process did outside CUDA: its OS runtime calls.

nsys traces the OS runtime libraries with ``-t osrt`` (``read``, ``poll``, ``ioctl``,
``pthread_cond_wait``, ...): on a CPU-only capture these calls are the only timed events, and
on any run they say what the host threads waited on. Each function's calls are counted and
their durations summed over every thread of the process, clipped to the analysis window: a
call on each of several threads at once counts each time, so the sum is thread time and can
exceed the window (it is not a share of it). One small DuckDB aggregate over the ``osrt``
model table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from specnsys.ingest.summary import OSRT_CALL_SQL

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["OS_RUNTIME_OF", "TOP_FUNCTIONS", "FunctionCalls", "OsRuntime", "os_runtime_calls"]


class FunctionCalls(TypedDict):
    """One OS runtime function's calls and summed time (ns)."""

    name: str
    calls: int
    ns: int


class OsRuntime(TypedDict):
    """The analysed process's OS runtime calls in the window (:func:`os_runtime_calls`)."""

    pid: int
    calls: int
    ns: int
    functions: int
    threads: int
    top: list[FunctionCalls]
    of: str

#: Functions listed in ``top`` (largest summed time first); the totals cover all of them.
TOP_FUNCTIONS = 10

#: The denominator of ``ns``, said with the figures.
OS_RUNTIME_OF = (
    "summed call time over the process's threads, clipped to the window; calls on several "
    "threads each count, so the sum can exceed the window"
)

# A call counts when it overlaps the window, or is an instant inside it; backwards rows (an
# end before the start) are ignored, as everywhere. The markers of OS runtime tracing
# starting and finishing are not calls. One row per function, and one (``total``) for all.
_CALLS = f"""
    WITH c AS (
        SELECT COALESCE(name, '(unnamed)') AS name, global_tid,
               least("end", $we) - greatest(start, $ws) AS ns
        FROM osrt
        WHERE {OSRT_CALL_SQL} AND pid = $pid AND "end" >= start
          AND ((start < $we AND "end" > $ws) OR (start = "end" AND start BETWEEN $ws AND $we))
    )
    SELECT GROUPING(name) = 1 AS total, name, count(*) AS calls,
           CAST(sum(greatest(ns, 0)) AS BIGINT) AS ns, count(DISTINCT global_tid) AS threads
    FROM c GROUP BY GROUPING SETS ((name), ())
"""


def os_runtime_calls(
    trace: Trace, pid: int | None, window: tuple[int, int]
) -> tuple[OsRuntime | None, str | None]:
    """The OS runtime calls of process *pid* in *window* ``(start, end)``: ``(result, None)``,
    or ``(None, why)`` when there are none to count.

    ``result``: ``calls``, ``ns`` (summed, see :data:`OS_RUNTIME_OF`), ``functions``,
    ``threads`` (threads with a call), ``top`` (up to :data:`TOP_FUNCTIONS` rows of ``name,
    calls, ns``, largest ``ns`` first, ties by name) and ``of``.
    """
    caps = trace.summary.capabilities
    if "os_runtime" in caps and not caps["os_runtime"].available:
        return None, caps["os_runtime"].reason
    if pid is None:
        return None, "no process was analysed"
    ws, we = window
    rows = trace.connection.execute(_CALLS, {"pid": pid, "ws": ws, "we": we}).fetchall()
    totals = [r for r in rows if r[0]]
    functions = sorted((r for r in rows if not r[0]), key=lambda r: (-int(r[3]), str(r[1])))
    if not functions or not totals:
        return None, f"process {pid} made no OS runtime call in the window"
    _, _, calls, ns, threads = totals[0]
    return {
        "pid": pid,
        "calls": int(calls),
        "ns": int(ns),
        "functions": len(functions),
        "threads": int(threads),
        "top": [
            {"name": str(n), "calls": int(c), "ns": int(t)}
            for _, n, c, t, _ in functions[:TOP_FUNCTIONS]
        ],
        "of": OS_RUNTIME_OF,
    }, None
