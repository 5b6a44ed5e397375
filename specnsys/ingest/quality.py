"""What in an export is malformed, counted, so an analysis can say what it skipped.

Traces from crashed runs, truncated copies and hand-edited files have rows the attribution
cannot use as they are: ranges that end before they start or never end, GPU operations without
times or without the API call that launched them, correlation ids given to two calls. The
analyses skip or clip such rows by rule (docs/design.md#attribution); without a warning the answer
would silently rest on less data than the user thinks. :func:`data_warnings` counts each kind
with one DuckDB query over the model tables (the two launch checks in Polars on the packed
key, when every call has one) and returns one sentence per kind found.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import polars as pl

from specnsys import __version__
from specnsys.errors import SpecnsysError, SpecnsysWarning
from specnsys.ingest.keys import packed_key
from specnsys.ingest.sqlite_reader import SqliteExport
from specnsys.vocabulary import API_CALL_EVENT_CLASSES, API_CALL_SQL

if TYPE_CHECKING:
    import duckdb

    from specnsys.ingest.trace import Trace

_GPU_OPS = """(
    SELECT start, "end", pid, correlation_id FROM kernels
    UNION ALL SELECT start, "end", pid, correlation_id FROM memcpy
    UNION ALL SELECT start, "end", pid, correlation_id FROM memset
)"""

_LAUNCH_CALLS = f"""(
    SELECT pid, correlation_id FROM runtime
    WHERE {API_CALL_SQL}
      AND correlation_id IS NOT NULL
)"""

# name -> (SQL giving one count, the sentence; {n} is the count)
_CHECKS: dict[str, tuple[str, str]] = {
    "range_no_start": (
        "SELECT count(*) FROM nvtx WHERE kind IN ('push_pop', 'start_end') AND start IS NULL",
        "{n} NVTX range(s) have no start time; ignored",
    ),
    "range_backwards": (
        """SELECT count(*) FROM nvtx WHERE kind IN ('push_pop', 'start_end')
           AND "end" < start""",
        "{n} NVTX range(s) end before they start; ignored",
    ),
    "range_unclosed": (
        """SELECT count(*) FROM nvtx WHERE kind IN ('push_pop', 'start_end')
           AND start IS NOT NULL AND "end" IS NULL""",
        "{n} NVTX range(s) were never closed (a crashed or cut-short run?); "
        "counted as open to the end of the window",
    ),
    "range_crossing": (
        """SELECT count(*) FROM nvtx c JOIN nvtx p ON p.id = c.parent
           WHERE c.kind = 'push_pop' AND c.start < p."end"
             AND coalesce(c."end", 9223372036854775807) > coalesce(p."end", 9223372036854775807)
             AND c."end" >= c.start AND p."end" >= p.start""",
        "{n} push/pop range(s) outlive the range they started in (not properly nested); "
        "phases near them are attributed to the innermost range by start time",
    ),
    "gpu_no_time": (
        f'SELECT count(*) FROM {_GPU_OPS} WHERE start IS NULL OR "end" IS NULL',
        "{n} GPU operation(s) have no start or end time; ignored",
    ),
    "gpu_backwards": (
        f'SELECT count(*) FROM {_GPU_OPS} WHERE "end" < start',
        "{n} GPU operation(s) end before they start; ignored",
    ),
    "gpu_unlaunched": (
        f"""SELECT CASE WHEN (SELECT count(*) FROM {_LAUNCH_CALLS}) = 0 THEN 0 ELSE (
                SELECT count(*) FROM {_GPU_OPS} o
                WHERE NOT EXISTS (SELECT 1 FROM {_LAUNCH_CALLS} r
                                  WHERE r.correlation_id = o.correlation_id AND r.pid = o.pid)
            ) END""",
        "{n} GPU operation(s) have no launching CUDA API call in the trace "
        "(correlation id matches nothing); shown as unattributed_gpu",
    ),
    "shared_correlation": (
        f"""SELECT count(*) FROM (SELECT 1 FROM {_LAUNCH_CALLS}
            GROUP BY pid, correlation_id HAVING count(*) > 1)""",
        "{n} correlation id(s) are shared by several CUDA API calls of one process; "
        "their GPU work is attributed to the earliest call",
    ),
}


#: Columns every nsys version writes in the tables the analyses rest on.
CORE_COLUMNS = {
    "NVTX_EVENTS": ("start", "end", "eventType"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "correlationId", "globalTid", "nameId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "correlationId"),
    "ThreadNames": ("nameId", "globalTid"),
}


#: Version of the checks, part of the key of the notes kept in the trace cache: bump it when
#: a check is added or changed.
QUALITY_VERSION = 2  # 2: unknown NVTX event types, dangling string ids, inexact values

#: NVTX event types nsys writes that are neither ranges nor marks and carry nothing the
#: analyses read, besides the definitions of :data:`~specnsys.ingest.normalize.NVTX_KINDS`:
#: the names of CUDA devices, contexts and streams (97-99, ENUM_NSYS_EVENT_TYPE; see
#: /work/shared/reference/nsys-sqlite-schema.md). Every other type of kind ``other`` is one the
#: analyses drop: said, with its count (none of the 37 real exports has one).
NVTX_NAMING_TYPES = (97, 98, 99)
_UNKNOWN_TYPES_SHOWN = 5

_UNKNOWN_EVENT_TYPES = f"""
    SELECT coalesce(CAST(event_type AS VARCHAR), 'NULL') AS type, count(*) AS n FROM nvtx
    WHERE kind = 'other'
      AND (event_type IS NULL OR event_type NOT IN ({", ".join(map(str, NVTX_NAMING_TYPES))}))
    GROUP BY ALL ORDER BY n DESC, type"""

#: What a NULL name does, per model table whose names come from StringIds.
_UNNAMED = {
    "nvtx": "ranges and marks without their text are no phase, mark or request",
    "kernels": "those kernels have no name",
    "runtime": "those API calls have no name",
    "threads": "those threads have no name",
    "graph_nodes": "those graph node events have no name",
    "osrt": "those OS runtime calls have no name",
}


_KEY = {"version": QUALITY_VERSION, "specnsys": __version__}


def data_warnings(
    trace: Trace, *, connection: duckdb.DuckDBPyConnection | None = None
) -> list[str]:
    """One sentence per kind of malformed row found in *trace* (empty for a clean export).

    The checks scan every big table (a second on millions of rows), so their notes are kept
    beside the cached model and read back by the next command on the unchanged export. Their
    SQL runs on *connection* when given (a cursor of the trace's, for another thread), else
    on the trace's connection."""
    stored = trace.load_derived("data_warnings", _KEY)
    if stored is not None:
        return list(stored["notes"])
    counts = _launch_counts(trace) or {}
    in_sql = [name for name in _CHECKS if name not in counts]
    selects = ", ".join(f"({_CHECKS[name][0]}) AS {name}" for name in in_sql)
    con = connection if connection is not None else trace.connection
    row = con.execute(f"SELECT {selects}").fetchall()[0]
    counts.update(zip(in_sql, row, strict=True))
    found = [text.format(n=counts[name]) for name, (_, text) in _CHECKS.items() if counts[name]]
    notes = (
        _export_warnings(trace)
        + build_warnings(trace)
        + _unknown_event_types(trace, con)
        + found
    )
    trace.store_derived("data_warnings", _KEY, {"notes": notes})
    return notes


@contextlib.contextmanager
def data_warnings_beside(trace: Trace) -> Iterator[Callable[[], list[str]]]:
    """:func:`data_warnings` of *trace* computed on a thread of its own while the caller's
    block analyzes the trace; the block gets a function that returns the notes.

    The analysis leaves part of the machine idle (one query's serial steps, Python between
    queries), which the checks fill (docs/performance.md#data-checks). The checks'
    SQL runs on a cursor of the trace's connection. Where nothing is left to compute (notes stored with the cache), or the model is in memory (its tables
    are registered on the trace's connection, and a cursor does not see them), the notes
    are computed as the block ends. Either way they are ready when the block has ended
    (while the trace is still open): call the function then."""
    stored = trace.load_derived("data_warnings", _KEY)
    if stored is not None:
        notes = list(stored["notes"])
        yield lambda: notes
        return
    if trace.cache_folder is None:
        found: list[list[str]] = []

        def notes_now() -> list[str]:
            if not found:
                found.append(data_warnings(trace))
            return found[0]

        yield notes_now
        notes_now()
        return
    cursor = trace.connection.cursor()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specnsys-checks")
    try:
        pending = pool.submit(data_warnings, trace, connection=cursor)
        yield pending.result
    finally:
        pool.shutdown(wait=True)
        cursor.close()


def _launch_counts(trace: Trace) -> dict[str, int] | None:
    """``gpu_unlaunched`` and ``shared_correlation`` on the packed (pid, correlation id) key
    (:mod:`.keys`), or None when some launching call's pair does not pack (the two-column SQL
    of :data:`_CHECKS` then counts them): a fraction of the time of the two SQL queries (a
    hash anti-join and a two-column group-by over every call) on tens of millions of calls
    (docs/performance.md#data-checks). Shared ids are counted on the sorted keys, where they sit side by side
    (correlation ids mostly grow with time, so the sort is cheap)."""
    calls = (
        trace.table("runtime")
        .filter(
            pl.col("event_class").is_in(list(API_CALL_EVENT_CLASSES))
            & ~pl.col("is_backtrace").fill_null(False)
            & pl.col("correlation_id").is_not_null()
        )
        .select(packed_key("pid", "correlation_id", "key"))
        .collect()["key"]
    )
    if calls.null_count():
        return None
    if calls.len() == 0:  # no launching call at all: nothing to match, no op is flagged
        return {"gpu_unlaunched": 0, "shared_correlation": 0}
    ops = pl.concat(
        [
            trace.table(name).select(packed_key("pid", "correlation_id", "key"))
            for name in ("kernels", "memcpy", "memset")
        ]
    )
    unlaunched = ops.filter(~pl.col("key").is_in(calls.implode()).fill_null(False))
    key = pl.col("key")
    # a key held by several calls: count the second call of each run of equal sorted keys
    second = (key == key.shift(1)) & (key.shift(1) != key.shift(2)).fill_null(True)
    shared = calls.sort().to_frame("key").select(second.sum()).item()
    return {
        "gpu_unlaunched": int(unlaunched.select(pl.len()).collect().item()),
        "shared_correlation": int(shared),
    }


def _unknown_event_types(trace: Trace, con: duckdb.DuckDBPyConnection) -> list[str]:
    """NVTX rows of an event type that is no range, mark or definition: kept in ``nvtx`` (as
    kind ``other``, with their ``event_type``, so the model keeps every row of the export),
    but no analysis reads them, so the ranges and marks they might be are lost. The query
    runs only when the summary counted rows of kind ``other``."""
    if not trace.summary.nvtx_kinds.get("other"):
        return []
    rows = con.execute(_UNKNOWN_EVENT_TYPES).fetchall()
    total = sum(int(n) for _, n in rows)
    if not total:
        return []
    shown = ", ".join(f"{t}: {n}" for t, n in rows[:_UNKNOWN_TYPES_SHOWN])
    more = f", {len(rows) - _UNKNOWN_TYPES_SHOWN} more" if len(rows) > _UNKNOWN_TYPES_SHOWN else ""
    return [
        f"{total} NVTX event(s) have an event type that is no range, mark or definition "
        f"(eventType {shown}{more}); kept in nvtx as kind 'other', they are no phase, mark "
        "or request"
    ]


def build_warnings(trace: Trace) -> list[str]:
    """What the build counted in rows the model cannot show as they were (the summary keeps
    the counts with the cache entry): names whose string id is not in ``StringIds``, per
    table, values that are not numbers of their column's type and text that is not UTF-8,
    per column."""
    found: list[str] = []
    dangling = trace.summary.dangling_string_ids
    for table, rows in dangling.items():
        if "." in table:
            continue  # a column's count, in its table's sentence
        detail = ", ".join(
            f"{key.split('.', 1)[1]}: {n}" for key, n in dangling.items()
            if key.startswith(f"{table}.")
        )  # fmt: skip
        found.append(
            f"{rows} {table} row(s) refer to string ids that are not in StringIds ({detail}); "
            f"{_UNNAMED.get(table, 'those names are NULL')}"
        )
    for column, n in trace.summary.inexact_values.items():
        payload = column.startswith("NVTX_EVENTS.") and "Value" in column
        found.append(
            f"{n} value(s) of {column} are not numbers (text that holds none, or bytes) in a "
            "numeric column; read as NULL"
            + ("; those marks carry no value (a tokens mark counts no token)" if payload else "")
        )
    for column, n in trace.summary.invalid_utf8.items():
        found.append(f"{n} value(s) of {column} are not valid UTF-8; invalid bytes shown as U+FFFD")
    return found


def warn_skipped(notes: list[str], path: object) -> None:
    """Issue each note about the export at *path* as a :class:`SpecnsysWarning` (the CLI
    prints ``specnsys: warning: PATH: note``, so a two-trace command says which one)."""
    for note in notes:
        warnings.warn(f"{path}: {note}", SpecnsysWarning, stacklevel=2)


def _export_warnings(trace: Trace) -> list[str]:
    """What only the export shows: tables without nsys's columns, string ids given twice."""
    found: list[str] = []
    try:
        with SqliteExport(trace.path) as export:
            for table, needed in CORE_COLUMNS.items():
                have = set(export.columns(table))
                missing = [c for c in needed if c not in have]
                if export.has_table(table) and missing:
                    found.append(
                        f"table {table} lacks the column(s) {', '.join(missing)} that nsys "
                        "writes; its rows were read without them (not an nsys layout?)"
                    )
            if {"id", "value"} <= set(export.columns("StringIds")):
                (count,) = export.query(
                    "SELECT count(*) FROM (SELECT id FROM StringIds GROUP BY id "
                    "HAVING count(DISTINCT value) > 1)"
                )[0]
                if count:
                    found.append(
                        f"{int(count)} string id(s) have more than one value in StringIds; "
                        "one of them is used for each"
                    )
    except SpecnsysError:
        pass  # the export changed or vanished since it was opened: nothing to add
    return found
