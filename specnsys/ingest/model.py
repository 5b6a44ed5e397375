"""The normalized trace model: stable table names, column names and types for every nsys version.

Each model table is defined by the source table(s) it reads, the raw columns it needs (read by
:mod:`specnsys.ingest.sqlite_reader`, all-NULL when a version lacks them) and one DuckDB query
that turns the raw Arrow columns into the model's columns (for the three big tables, NVTX
events, runtime calls and kernels, an Arrow function does the same at a fraction of the cost).
Row counts are preserved: a model table has exactly as many rows as its source table (``nvtx``
keeps domain/category/thread-name rows and says what each row is in ``kind``), so a count in
the model can be checked against a count in SQLite.

Conventions: times are integer nanoseconds on the export's session timeline; ``pid``/``tid`` are
decoded from nsys global ids (``pid = (g >> 24) & 0xFFFFFF``, ``tid = g & 0xFFFFFF``); the raw
global ids stay available as ``global_tid``/``global_pid``; names are resolved from ``StringIds``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from specnsys.errors import BadInputError, UsageError, address_space_limit
from specnsys.ingest.interrupts import interruptible
from specnsys.ingest.sqlite_reader import RawColumn, SliceRead, SqliteExport

if TYPE_CHECKING:  # DuckDB and pyarrow load when a model is built: a warm run skips both
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

#: Bump when the model's tables or columns change, so old caches are not reused.
MODEL_VERSION = 2

#: Cache files favour write speed (a cold open writes them) over size. Measured on the model of
#: 2 million kernels (5.4 million rows; bench/cache_format.py): LZ4 Parquet wrote in 1.06 CPU-s
#: and 77 MB (Snappy 1.19 s, 91 MB) and read back as fast; Arrow IPC wrote in 0.30 s but took
#: 866 MB (LZ4 IPC: 128 MB) and its warm reads were slower (1.0 s and 1.7 s against 0.8 s)
#: with 1.6x and 4x the peak memory (IPC must be mapped or decompressed whole). Integer
#: columns are delta-coded (see :func:`_write_parquet`).
PARQUET_COMPRESSION = "lz4"

MODEL_TABLES = (
    "threads",
    "processes",
    "nvtx",
    "runtime",
    "kernels",
    "memcpy",
    "memset",
    "graphs",
    "sync",
    "gpu_metrics",
    "gpus",
)

PID = "((({g}) >> 24) & 16777215)"
TID = "(({g}) & 16777215)"

#: NVTX event types by what the row is (every other type, and a NULL one, is ``other``).
NVTX_KINDS = {
    59: "push_pop", 70: "push_pop", 60: "start_end", 71: "start_end", 34: "mark",
    75: "domain_create", 76: "domain_destroy", 33: "category", 39: "thread_name",
}  # fmt: skip

# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND, hard-coded because ENUM tables are optional.
COPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
MEMORY_KINDS = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
    6: "managed static", 7: "unknown",
}


def _case(column: str, mapping: dict[int, str]) -> str:
    whens = " ".join(f"WHEN {k} THEN '{v}'" for k, v in mapping.items())
    return f"CASE {column} {whens} ELSE NULL END"


def _ints(*names: str) -> list[RawColumn]:
    return [RawColumn(n, "int") for n in names]


@dataclass(frozen=True)
class SourceRead:
    """One raw table registered in DuckDB under ``alias`` before the model query runs."""

    alias: str
    table: str
    columns: tuple[RawColumn, ...]
    with_rowid: bool = False


class StringLookup:
    """``StringIds`` as two aligned Arrow arrays, to resolve a column of string ids in Arrow:
    the position of each id in :attr:`ids` (a hash look-up), then a gather of
    :attr:`values`. An id that is not there resolves to NULL, as the LEFT JOIN does."""

    def __init__(self, ids: pa.Array, values: pa.Array) -> None:
        self.ids = ids
        self.values = values

    def resolve(self, ids: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
        """The string of each id in *ids*."""
        import pyarrow.compute as pc

        return pc.take(self.values, pc.index_in(ids, self.ids))

    def resolve_coded(self, ids: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
        """The strings of *ids* as a dictionary array: each distinct id of the slice resolved
        once (a kernel or API name repeats over millions of rows).

        The strings are never copied per row, and Parquet takes the dictionary as its own
        instead of hashing every string again: on the 2M kernels of the bench export the
        kernels' normalization and write took 0.43 CPU-s against 0.57-0.68."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(ids, pa.ChunkedArray):
            ids = ids.combine_chunks()
        # a NULL id is a value like any other here, looked up as resolve() looks it up
        distinct = pc.dictionary_encode(ids, null_encoding="encode")
        return _coded(distinct.indices, self.resolve(distinct.dictionary))


def _coded(indices: pa.Array, values: pa.Array) -> pa.DictionaryArray:
    """*values* at *indices* as a dictionary array whose dictionary holds no NULL (Parquet's
    writer refuses one that does): an index of a NULL value becomes a NULL index."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if values.null_count:
        # (scalars made in Arrow: pyarrow imports pandas to convert a Python value)
        present = pc.take(pc.is_valid(values), indices)
        indices = pc.if_else(present, indices, pa.nulls(1, indices.type)[0])
        values = pc.fill_null(values, _arrow_values([""], pl.String)[0])  # never looked up
    return pa.DictionaryArray.from_arrays(indices, values)


def _decoded(table: pa.Table) -> pa.Table:
    """*table* with its dictionary columns as plain strings: the model's columns as readers
    see them (the cache's Parquet files store no Arrow schema, see :func:`_write_parquet`)."""
    import pyarrow as pa

    schema = pa.schema(
        f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
        for f in table.schema
    )
    return table if schema == table.schema else table.cast(schema)


@dataclass(frozen=True)
class NormalizeContext:
    """What an Arrow normalization looks up besides its slice: the strings, and for NVTX
    rows what was gathered from the whole table first."""

    strings: StringLookup
    nvtx: NvtxContext | None = None


#: A model table's normalization in Arrow compute: (raw slice, context) -> model slice.
ArrowNormalize = Callable[["pa.Table", NormalizeContext], "pa.Table"]


@dataclass(frozen=True)
class ModelTable:
    """A model table: the raw reads it needs and how they are normalized: a DuckDB query
    (*query*), or for the biggest tables, whose rows only need arithmetic and name look-ups,
    an Arrow function (*arrow*) that costs a third of the query's CPU time (each slice's
    round trip into DuckDB and back, and its hash joins, are what the query pays for)."""

    name: str
    sources: tuple[SourceRead, ...]
    query: str | Callable[[SqliteExport], str] | None
    counts_source: str | None  # the SQLite table whose row count this table must equal
    arrow: ArrowNormalize | None = None

    def __post_init__(self) -> None:
        if (self.query is None) == (self.arrow is None):
            raise ValueError(f"{self.name}: give exactly one of query and arrow")

    def sql(self, export: SqliteExport) -> str:
        if self.query is None:
            raise ValueError(f"{self.name} is normalized in Arrow, not by a query")
        return self.query(export) if callable(self.query) else self.query


THREADS = ModelTable(
    "threads",
    (SourceRead("raw_threads", "ThreadNames", tuple(_ints("nameId", "priority", "globalTid"))),),
    f"""SELECT CAST({PID.format(g="t.globalTid")} AS BIGINT) AS pid,
               CAST({TID.format(g="t.globalTid")} AS BIGINT) AS tid,
               t.globalTid AS global_tid, s.value AS name, t.priority AS priority
        FROM raw_threads t LEFT JOIN strings s ON s.id = t.nameId""",
    "ThreadNames",
)

PROCESSES = ModelTable(
    "processes",
    (
        SourceRead(
            "raw_processes",
            "PROCESSES",
            (RawColumn("globalPid"), RawColumn("pid"), RawColumn("name", "text")),
        ),
    ),
    f"""SELECT CAST(COALESCE(pid, {PID.format(g="globalPid")}) AS BIGINT) AS pid,
               globalPid AS global_pid, name
        FROM raw_processes""",
    "PROCESSES",
)

_NVTX_COLUMNS = (
    *_ints("start", "end", "eventType", "rangeId", "category", "color", "globalTid",
           "endGlobalTid", "textId", "domainId", "jsonTextId"),
    # At most one payload column of each kind is set per row: SQLite coalesces them, so the
    # reader pays for one value instead of four (and two).
    RawColumn("payloadInt", "int", ("int64Value", "uint64Value", "int32Value", "uint32Value")),
    RawColumn("text", "text"),
    RawColumn("jsonText", "text"),
    RawColumn("payloadFloat", "real", ("doubleValue", "floatValue")),
)

#: What the NVTX definition rows (domain 75 and category 33 names) carry; read before the rows.
_NVTX_DEFINITION_COLUMNS = (
    *_ints("globalTid", "domainId", "category", "eventType", "textId"),
    RawColumn("text", "text"),
)
#: What the nesting of push/pop ranges (types 59, 70) needs; read before the rows.
_NVTX_RANGE_COLUMNS = tuple(_ints("globalTid", "domainId", "eventType", "start", "end"))

_E_PID = f"CAST({PID.format(g='e.globalTid')} AS BIGINT)"

#: Domain and category names by (pid, domain id[, category id]), from the definition rows.
NVTX_DOMAINS = f"""
    SELECT {_E_PID} AS pid, COALESCE(e.domainId, 0) AS domain_id,
           any_value(COALESCE(e.text, s.value)) AS domain
    FROM nvtx_definitions e LEFT JOIN strings s ON s.id = e.textId
    WHERE e.eventType = 75 GROUP BY ALL"""
NVTX_CATEGORIES = f"""
    SELECT {_E_PID} AS pid, COALESCE(e.domainId, 0) AS domain_id, e.category AS category_id,
           any_value(COALESCE(e.text, s.value)) AS category
    FROM nvtx_definitions e LEFT JOIN strings s ON s.id = e.textId
    WHERE e.eventType = 33 GROUP BY ALL"""

def _arrow_values(values: list, dtype: pl.DataType) -> pa.Array:
    """Python *values* as an Arrow array, made by Polars: pyarrow's own conversion of Python
    objects (``pa.array``, a bare ``67`` given to a compute function) imports pandas when it
    is installed, 0.2-0.4 s of a cold run for a few constants."""
    import pyarrow as pa

    array = pl.Series(values, dtype=dtype).to_arrow()
    return array.cast(pa.string()) if dtype == pl.String else array


def _int(value: int) -> pa.Scalar:
    """*value* as an Arrow int64 scalar (see :func:`_arrow_values`)."""
    return _arrow_values([value], pl.Int64)[0]


class ValuesOutOfRange(ValueError):
    """Arithmetic of an Arrow normalization overflowed 64 bits (bad data, not a bug)."""


def _duration(raw: pa.Table, table: str) -> pa.ChunkedArray:
    """``end - start``, refusing to wrap around (as DuckDB's subtraction refuses)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.subtract_checked(raw.column("end"), raw.column("start"))
    except pa.ArrowInvalid:
        raise ValuesOutOfRange(f"{table}: end - start overflows a 64-bit integer") from None


def _pid_of(global_id: pa.ChunkedArray) -> pa.ChunkedArray:
    """:data:`PID` in Arrow (bits 24-47 of an nsys global id)."""
    import pyarrow.compute as pc

    return pc.bit_wise_and(pc.shift_right(global_id, _int(24)), _int(16777215))


def _tid_of(global_id: pa.ChunkedArray) -> pa.ChunkedArray:
    """:data:`TID` in Arrow (the low 24 bits of an nsys global id)."""
    import pyarrow.compute as pc

    return pc.bit_wise_and(global_id, _int(16777215))


@dataclass(frozen=True)
class NvtxContext:
    """What NVTX rows need from the whole table, gathered before the rows are built (see
    :func:`_prepare_nvtx`): domain and category names (``pid, domain_id[, category_id]``
    and the name), and ``id, depth, parent`` of every push/pop range, in id order."""

    domains: pa.Table
    categories: pa.Table
    nesting: pa.Table

    @functools.cached_property
    def _nesting_ids(self) -> pl.Series:
        """The nesting's ids (sorted), made a Series once for every slice's bisection."""
        return pl.Series(self.nesting.column("id"))

    def nesting_of(self, rowids: pa.ChunkedArray) -> pa.Table:
        """The nesting rows of the ranges whose ids lie in the sorted slice *rowids*."""
        if len(rowids) == 0:
            return self.nesting.slice(0, 0)
        lo = self._nesting_ids.search_sorted(rowids[0].as_py(), "left")
        hi = self._nesting_ids.search_sorted(rowids[-1].as_py(), "right")
        return self.nesting.slice(lo, hi - lo)


def _nvtx_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    """One slice of ``NVTX_EVENTS`` as model rows: kinds, texts, domain and category names,
    depth and parent looked up, the slice's row order kept."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings, nvtx = context.strings, context.nvtx
    if nvtx is None:
        raise ValueError("NVTX rows are built after _prepare_nvtx")
    col = raw.column
    gtid = col("globalTid")
    pid = _pid_of(gtid)
    domain_id = pc.coalesce(col("domainId"), _int(0))
    kind_at = pc.index_in(col("eventType"), _arrow_values(list(NVTX_KINDS), pl.Int64))
    kinds = _arrow_values([*NVTX_KINDS.values(), "other"], pl.String)
    nesting = nvtx.nesting_of(col("__rowid"))
    at = pc.index_in(col("__rowid"), nesting.column("id"))
    d, c = nvtx.domains, nvtx.categories
    return pa.table(
        {
            "id": col("__rowid"),
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "NVTX_EVENTS"),
            "kind": pc.fill_null(pc.take(kinds, kind_at), kinds[-1]),
            "event_type": col("eventType"),
            "text": _text(col("text"), col("textId"), strings),
            "domain_id": domain_id,
            # pid IS NOT DISTINCT FROM, domain id (never NULL) =, category id =
            "domain": _lookup(
                [(pid, d.column("pid"), True), (domain_id, d.column("domain_id"), True)],
                d.column("domain"),
            ),
            "category_id": col("category"),
            "category": _lookup(
                [
                    (pid, c.column("pid"), True),
                    (domain_id, c.column("domain_id"), True),
                    (col("category"), c.column("category_id"), False),
                ],
                c.column("category"),
            ),
            "payload_int": col("payloadInt"),
            "payload_float": col("payloadFloat"),
            "json_text": _text(col("jsonText"), col("jsonTextId"), strings),
            "color": col("color"),
            "range_id": col("rangeId"),
            "pid": pid,
            "tid": _tid_of(gtid),
            "global_tid": gtid,
            "end_tid": _tid_of(col("endGlobalTid")),
            "end_global_tid": col("endGlobalTid"),
            "depth": pc.take(nesting.column("depth"), at),
            "parent": pc.take(nesting.column("parent"), at),
        }
    )  # fmt: skip


def _text(
    inline: pa.ChunkedArray, ids: pa.ChunkedArray, strings: StringLookup
) -> pa.ChunkedArray | pa.DictionaryArray:
    """An NVTX row's text: written inline, else by string id (registered strings), always
    dictionary-coded, so that every slice of a table has one type (a dense slice would have
    the writer decode the coded ones). A slice with every text by id resolves each distinct
    id once (:meth:`StringLookup.resolve_coded`); one with inline texts is hashed here rather
    than by Parquet's writer."""
    import pyarrow.compute as pc

    if inline.null_count == len(inline):
        return strings.resolve_coded(ids)
    return pc.dictionary_encode(pc.coalesce(inline, strings.resolve(ids))).combine_chunks()


def _lookup(
    keys: Sequence[tuple[pa.ChunkedArray, pa.ChunkedArray, bool]], values: pa.ChunkedArray
) -> pa.ChunkedArray:
    """``values`` of the row of a small table whose key columns equal each row's keys (NULL
    where none does). *keys* gives per key: the rows' column, the table's column (the
    table's keys are unique together) and whether a NULL equals a NULL (``IS NOT DISTINCT
    FROM``) or matches nothing (``=``).

    Arrow has no multi-column look-up: each key becomes its rank among the table's distinct
    values of that column, and the ranks one integer code, on both sides.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    code: pa.ChunkedArray | None = None
    table_code: pa.ChunkedArray | None = None
    for key, table_key, nulls_equal in keys:
        distinct = pc.unique(table_key)
        skip = not nulls_equal
        rank = pc.cast(pc.index_in(key, distinct, skip_nulls=skip), pa.int64())
        table_rank = pc.cast(pc.index_in(table_key, distinct, skip_nulls=skip), pa.int64())
        width = _int(len(distinct))
        code = rank if code is None else pc.add(pc.multiply(code, width), rank)
        table_code = (
            table_rank if table_code is None else pc.add(pc.multiply(table_code, width), table_rank)
        )
    # a NULL code is a key that matched nothing, or a NULL under "=": never a match
    return pc.take(values, pc.index_in(code, table_code, skip_nulls=True))


NVTX = ModelTable(
    "nvtx",
    (SourceRead("raw_nvtx", "NVTX_EVENTS", _NVTX_COLUMNS, with_rowid=True),),
    # Built slice by slice like the other tables, for tens of millions of rows: what needs the
    # whole table is gathered first from narrow reads (see :func:`_prepare_nvtx`) and handed
    # to each slice (:class:`NvtxContext`).
    None,
    "NVTX_EVENTS",
    arrow=_nvtx_arrow,
)


def _runtime_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = context.strings
    col = raw.column
    # The version suffix is stripped once per distinct name of the slice, not once per call;
    # both names stay coded by the distinct ids (see StringLookup.resolve_coded).
    raw_names = strings.resolve_coded(col("nameId"))
    names = pc.replace_substring_regex(
        raw_names.dictionary, pattern="(_v[0-9]+)+$", replacement="", max_replacements=1
    )
    gtid = col("globalTid")
    return pa.table(
        {
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "CUPTI_ACTIVITY_KIND_RUNTIME"),
            "name": _coded(raw_names.indices, names),
            "raw_name": raw_names,
            "correlation_id": col("correlationId"),
            "event_class": col("eventClass"),
            "is_backtrace": pc.equal(col("eventClass"), _int(67)),
            "pid": _pid_of(gtid),
            "tid": _tid_of(gtid),
            "global_tid": gtid,
        }
    )


RUNTIME = ModelTable(
    "runtime",
    (
        SourceRead(
            "raw_runtime",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            tuple(_ints("start", "end", "eventClass", "globalTid", "correlationId", "nameId")),
        ),
    ),
    None,
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    arrow=_runtime_arrow,
)

_KERNEL_COLUMNS = {  # model name: source column, for the columns kernels keep as they are
    "device_id": "deviceId", "context_id": "contextId", "stream_id": "streamId",
    "correlation_id": "correlationId",
}
_KERNEL_LAUNCH_COLUMNS = {
    "grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ",
    "block_x": "blockX", "block_y": "blockY", "block_z": "blockZ",
    "graph_node_id": "graphNodeId", "graph_id": "graphId",
}


def _kernels_arrow(raw: pa.Table, context: NormalizeContext) -> pa.Table:
    import pyarrow as pa

    strings = context.strings
    col = raw.column
    return pa.table(
        {
            "start": col("start"),
            "end": col("end"),
            "duration": _duration(raw, "CUPTI_ACTIVITY_KIND_KERNEL"),
            **{name: col(source) for name, source in _KERNEL_COLUMNS.items()},
            "pid": _pid_of(col("globalPid")),
            "global_pid": col("globalPid"),
            "short_name": strings.resolve_coded(col("shortName")),
            "demangled_name": strings.resolve_coded(col("demangledName")),
            **{name: col(source) for name, source in _KERNEL_LAUNCH_COLUMNS.items()},
        }
    )


KERNELS = ModelTable(
    "kernels",
    (
        SourceRead(
            "raw_kernels",
            "CUPTI_ACTIVITY_KIND_KERNEL",
            tuple(_ints("start", "end", *_KERNEL_COLUMNS.values(), "globalPid", "shortName",
                        "demangledName", *_KERNEL_LAUNCH_COLUMNS.values())),
        ),
    ),
    None,
    "CUPTI_ACTIVITY_KIND_KERNEL",
    arrow=_kernels_arrow,
)

_GPU_OP_COLUMNS = ("start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid")
_GPU_OP_SELECT = f"""start, "end", "end" - start AS duration, deviceId AS device_id,
        contextId AS context_id, streamId AS stream_id, correlationId AS correlation_id,
        CAST({PID.format(g="globalPid")} AS BIGINT) AS pid, globalPid AS global_pid"""

MEMCPY = ModelTable(
    "memcpy",
    (
        SourceRead(
            "raw_memcpy",
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            tuple(_ints(*_GPU_OP_COLUMNS, "bytes", "copyKind", "srcKind", "dstKind",
                        "graphNodeId")),
        ),
    ),
    f"""SELECT {_GPU_OP_SELECT}, bytes, copyKind AS copy_kind,
               {_case("copyKind", COPY_KINDS)} AS copy_kind_name,
               {_case("srcKind", MEMORY_KINDS)} AS src_kind,
               {_case("dstKind", MEMORY_KINDS)} AS dst_kind,
               graphNodeId AS graph_node_id
        FROM raw_memcpy""",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
)

MEMSET = ModelTable(
    "memset",
    (
        SourceRead(
            "raw_memset",
            "CUPTI_ACTIVITY_KIND_MEMSET",
            tuple(_ints(*_GPU_OP_COLUMNS, "bytes", "value", "memKind", "graphNodeId")),
        ),
    ),
    f"""SELECT {_GPU_OP_SELECT}, bytes, value,
               {_case("memKind", MEMORY_KINDS)} AS mem_kind, graphNodeId AS graph_node_id
        FROM raw_memset""",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)

GRAPHS = ModelTable(
    "graphs",
    (
        SourceRead(
            "raw_graphs",
            "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
            tuple(_ints(*_GPU_OP_COLUMNS, "graphId", "graphExecId")),
        ),
    ),
    f"""SELECT {_GPU_OP_SELECT}, graphId AS graph_id, graphExecId AS graph_exec_id
        FROM raw_graphs""",
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
)
"""Whole-graph executions (``--cuda-graph-trace=graph``): one row per graph launch, whose
kernels are then not in ``kernels``; the row carries the launch call's correlation id."""

SYNC = ModelTable(
    "sync",
    (
        SourceRead(
            "raw_sync",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            tuple(_ints(*_GPU_OP_COLUMNS, "syncType", "eventId")),
        ),
    ),
    # syncType was renumbered in nsys 2025.3; classify by the launching API's name instead
    # (join runtime on correlation_id and pid), which is why the raw code is kept as is.
    f"""SELECT {_GPU_OP_SELECT}, syncType AS sync_type, eventId AS event_id FROM raw_sync""",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)

GPU_METRICS = ModelTable(
    "gpu_metrics",
    (
        SourceRead("raw_gpu_metrics", "GPU_METRICS", tuple(_ints("timestamp", "typeId", "metricId", "value"))),
        SourceRead(
            "raw_gpu_metric_names",
            "TARGET_INFO_GPU_METRICS",
            (RawColumn("typeId"), RawColumn("metricId"), RawColumn("metricName", "text")),
        ),
    ),
    """WITH names AS (
           SELECT typeId, metricId, any_value(metricName) AS metric_name
           FROM raw_gpu_metric_names GROUP BY ALL
       )
       SELECT m.timestamp, CAST(m.typeId & 255 AS BIGINT) AS device_id, n.metric_name,
              m.metricId AS metric_id, m.value
       FROM raw_gpu_metrics m
       LEFT JOIN names n ON n.typeId = m.typeId AND n.metricId = m.metricId""",
    "GPU_METRICS",
)


def _gpus_query(export: SqliteExport) -> str:
    # TARGET_INFO_GPU calls its key `deviceId` up to 2020.5 and `id` after; the old layout
    # lacks the properties, which then come from TARGET_INFO_CUDA_GPU (same deviceId). Its
    # globalMemoryBandwidth is not in bytes/s in the exports seen, so it is not used.
    key = "deviceId" if "deviceId" in export.columns("TARGET_INFO_GPU") else "id"
    return f"""WITH cuda AS (
           SELECT deviceId, any_value(numMultiprocessors) AS sms, any_value(coreClockRate) AS clk
           FROM raw_cuda_gpus GROUP BY deviceId
       )
       SELECT g.{key} AS device_id, g.name, COALESCE(g.smCount, c.sms) AS sm_count,
              g.memoryBandwidth AS memory_bandwidth, g.totalMemory AS total_memory,
              COALESCE(g.clockRate, c.clk * 1000) AS clock_rate_hz, g.cuDevice AS cuda_device,
              g.chipName AS chip_name, g.busLocation AS bus_location, g.uuid,
              g.computeMajor AS compute_major, g.computeMinor AS compute_minor
       FROM raw_gpus g LEFT JOIN cuda c ON c.deviceId = g.{key}"""


GPUS = ModelTable(
    "gpus",
    (
        SourceRead(
            "raw_gpus",
            "TARGET_INFO_GPU",
            (
                *_ints("id", "deviceId", "smCount", "memoryBandwidth", "totalMemory",
                       "clockRate", "cuDevice", "computeMajor", "computeMinor"),
                RawColumn("name", "text"),
                RawColumn("chipName", "text"),
                RawColumn("busLocation", "text"),
                RawColumn("uuid", "text"),
            ),
        ),
        SourceRead(
            "raw_cuda_gpus",
            "TARGET_INFO_CUDA_GPU",
            tuple(_ints("deviceId", "numMultiprocessors", "coreClockRate")),
        ),
    ),
    _gpus_query,
    "TARGET_INFO_GPU",
)

MODEL = (
    THREADS, PROCESSES, NVTX, RUNTIME, KERNELS, MEMCPY, MEMSET, GRAPHS, SYNC, GPU_METRICS, GPUS
)
assert tuple(t.name for t in MODEL) == MODEL_TABLES
#: The order tables are built in: the runtime calls first, their raw slices read while
#: DuckDB and the strings are set up (the tables normalized by a query need that set-up);
#: NVTX after the two big tables, so that its preparation runs while they are read (see
#: :func:`build_model`).
BUILD_ORDER = (
    RUNTIME, KERNELS, THREADS, PROCESSES, NVTX, MEMCPY, MEMSET, GRAPHS, SYNC, GPU_METRICS, GPUS
)
assert set(BUILD_ORDER) == set(MODEL) and len(BUILD_ORDER) == len(MODEL)

STRINGS = SourceRead("raw_strings", "StringIds", (RawColumn("id"), RawColumn("value", "text")))


def to_arrow(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    """A DuckDB relation as one Arrow table (the method's name changed in DuckDB 1.4)."""
    method = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
    return method()


INT64_MAX = 9223372036854775807


def nvtx_nesting(raw: pl.LazyFrame) -> pa.Table:
    """``(id, depth, parent)`` of every push/pop range of a raw ``NVTX_EVENTS`` frame, in id
    order.

    NVTX keeps one range stack per (thread, domain). depth = ranges of the same stack open
    when this one starts: one sorted sweep over start (+1) and end (-1) events, ends first at
    equal times (back-to-back ranges are siblings), a zero-length range's end after the
    starts at its instant, unclosed ranges open to the end. Start events sort among
    themselves by (start, -end, id), so the same pass numbers the ranges in start order
    (``ord``); parent = the latest range before this one in that order one level up (true
    for any properly nested set of intervals): an as-of join. Polars does this in a few
    seconds for millions of ranges, where window functions over one huge partition in SQL
    took ten times longer.
    """
    pp = raw.filter(pl.col("eventType").is_in([59, 70])).select(
        pl.col("__rowid").alias("id"),
        pl.col("globalTid").fill_null(-1).alias("g"),
        pl.col("domainId").fill_null(0).alias("d"),
        pl.col("start"),
        pl.col("end").fill_null(INT64_MAX).alias("end_key"),
    )
    starts = pp.select(
        "id",
        "g",
        "d",
        pl.col("start").alias("t"),
        pl.lit(1, pl.Int8).alias("typ"),
        (-pl.col("end_key")).alias("tie"),
        pl.lit(1, pl.Int8).alias("delta"),
    )
    ends = pp.select(
        "id",
        "g",
        "d",
        pl.col("end_key").alias("t"),
        pl.when(pl.col("end_key") == pl.col("start"))
        .then(2)
        .otherwise(0)
        .cast(pl.Int8)
        .alias("typ"),
        pl.lit(0, pl.Int64).alias("tie"),
        pl.lit(-1, pl.Int8).alias("delta"),
    )
    # Running sums over the whole sorted frame, not per (g, d) group: every range has its end
    # event (unclosed ones at INT64_MAX) in its own group, so each group's deltas sum to zero
    # and the global running depth is the group's; ``ord`` then numbers all starts in sorted
    # order, which orders the starts of each group the same way and needs no re-sort below.
    nested = (
        pl.concat([starts, ends])
        .sort(["g", "d", "t", "typ", "tie", "id"])
        .with_columns(
            (pl.col("delta").cast(pl.Int64).cum_sum() - pl.col("delta"))
            .cast(pl.Int32)
            .alias("depth"),
            (pl.col("delta") == 1).cast(pl.Int64).cum_sum().alias("ord"),
        )
        .filter(pl.col("delta") == 1)
        .select("id", "g", "d", "depth", "ord")
        .collect()
    )
    children = nested.with_columns((pl.col("depth") - 1).alias("up")).set_sorted("ord")
    candidates = nested.select(
        "g",
        "d",
        pl.col("depth").alias("up"),
        pl.col("ord").alias("parent_ord"),
        pl.col("id").alias("parent"),
    ).set_sorted("parent_ord")
    return (
        # Tie-safe: ``parent_ord`` is unique (a start's rank in the total order of the sort).
        children.join_asof(
            candidates,
            left_on="ord",
            right_on="parent_ord",
            by=["g", "d", "up"],
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .select("id", "depth", "parent")
        .sort("id")
        .to_arrow()
    )


#: The source (by alias) each model table is built from, slice by slice on the reader's
#: threads and written as each slice arrives, so no whole source table is ever in memory.
#: Each row of it gives one row of the model table, joined only with small tables (other
#: sources, read whole) or, for ``nvtx``, with what :func:`_prepare_nvtx` gathered first.
ROW_LOCAL_SOURCE = {
    "threads": "raw_threads",
    "processes": "raw_processes",
    "nvtx": "raw_nvtx",
    "runtime": "raw_runtime",
    "kernels": "raw_kernels",
    "memcpy": "raw_memcpy",
    "memset": "raw_memset",
    "graphs": "raw_graphs",
    "sync": "raw_sync",
    "gpu_metrics": "raw_gpu_metrics",
    "gpus": "raw_gpus",
}
assert set(ROW_LOCAL_SOURCE) == set(MODEL_TABLES)
# Consecutive tables are built overlapping (see build_model): their side tables must not share
# a name, or one table's clean-up would drop what the next one reads.
_SIDE_ALIASES = [s.alias for t in MODEL for s in t.sources if s.alias != ROW_LOCAL_SOURCE[t.name]]
assert len(_SIDE_ALIASES) == len(set(_SIDE_ALIASES))

#: DuckDB memory, as a fraction of the export's size on disk, within the bounds below: while
#: building the model (each slice's joins spill beyond it) and while analyzing it (see
#: :func:`specnsys.ingest.trace.analysis_connection`). ``$SPECNSYS_MEMORY_LIMIT`` (DuckDB's
#: syntax, e.g. ``4GB``) overrides both.
#: The floors keep small and mid-sized traces from spilling (a spill costs time, and the
#: memory a small trace needs is no burden): measured on 6.3 million kernels (an 836 MB
#: export), the analysis took 83 s with DuckDB's default, 105 s limited to 2 GB and 170 s
#: limited to 836 MB.
BUILD_MEMORY_FRACTION = 0.5
BUILD_MEMORY_MIN = 1 << 30
ANALYSIS_MEMORY_FRACTION = 1.0
ANALYSIS_MEMORY_MIN = 2 << 30
DUCKDB_MEMORY_MAX_OF_RAM = 0.5


def duckdb_memory_limit(export_bytes: int, fraction: float, floor: int) -> str:
    """DuckDB's ``memory_limit`` for work on an export of *export_bytes*.

    DuckDB's own default (80% of RAM, kept once allocated) lets a large trace take most of
    the machine (the analysis of 6.3 million kernels peaked at 5.6 GB with it); a limit
    proportional to the export, above *floor* and below half the RAM, keeps peak memory near
    the export's size on large traces at the cost of some spilling. Under an address-space
    limit (``ulimit -v``) DuckDB gets at most half of the room left in it, so that DuckDB
    refuses an allocation (exit status 4) before malloc fails somewhere that aborts.
    """
    explicit = explicit_memory_limit()
    if explicit is not None:
        return explicit
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 8 << 30
    limit = min(max(int(export_bytes * fraction), floor), int(ram * DUCKDB_MEMORY_MAX_OF_RAM))
    room = address_space_room()
    if room is not None:
        limit = min(limit, room // 2)
    return f"{max(limit >> 20, 64)}MB"


#: ``$SPECNSYS_MEMORY_LIMIT``: a number and one of DuckDB's units (e.g. ``8GB``, ``512MiB``).
_MEMORY_LIMIT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|[KMGT]i?B)\s*", re.IGNORECASE)
_MEMORY_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
                 "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}  # fmt: skip


def explicit_memory_limit() -> str | None:
    """``$SPECNSYS_MEMORY_LIMIT`` checked, or None when unset. DuckDB reads a bad value as a
    parser error deep in a command ("lots", "1e400") or as no limit at all ("-1GB"): here it is
    one line naming the variable (exit status 2)."""
    text = os.environ.get("SPECNSYS_MEMORY_LIMIT", "").strip()
    if not text:
        return None
    match = _MEMORY_LIMIT.fullmatch(text)
    amount = float(match[1]) * _MEMORY_UNITS[match[2].lower()] if match else 0
    if not 10**6 <= amount <= 10**18:
        raise UsageError(
            f"SPECNSYS_MEMORY_LIMIT={text!r} is not a memory size from 1MB to 1000PB: give a "
            "number and a unit in DuckDB's syntax, e.g. 8GB or 512MiB"
        )
    return f"{int(amount) >> 10}KiB"


def address_space_room() -> int | None:
    """Bytes left under the address-space limit (``ulimit -v``), or None when there is none."""
    limit = address_space_limit()
    if limit is None:
        return None
    try:
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(limit - used, 0)


def duckdb_config(export_bytes: int, scratch: Path | None) -> dict[str, str]:
    """DuckDB settings for building a model: bounded memory, spilling only into *scratch*.

    Without a scratch folder spilling is off: DuckDB's default (``.tmp`` in the working
    directory) would write beside whatever the user ran from.
    """
    return {
        # One thread per query: the reader's threads run one slice query each, in parallel,
        # and a query on one thread emits its rows in the slice's order (with more threads
        # DuckDB moved rows of a slice, so the model's order changed from run to run).
        "threads": "1",
        "memory_limit": duckdb_memory_limit(export_bytes, BUILD_MEMORY_FRACTION, BUILD_MEMORY_MIN),
        "temp_directory": str(scratch) if scratch is not None else "",
        "preserve_insertion_order": "true",
        # Keep the source on the probe side of every join (it is the left side of all the
        # model's LEFT JOINs): DuckDB would otherwise build the hash table on a source slice
        # smaller than ``strings`` and emit rows in the other table's order, so a model
        # table's row order would change from run to run.
        "disabled_optimizers": "build_side_probe_side",
    }


def build_model(
    export: SqliteExport, parquet_folder: Path | None = None
) -> dict[str, pa.Table] | None:
    """Read the source tables the model needs and build the model's tables.

    With *parquet_folder*, each table is written there as ``<name>.parquet`` as it is built
    and None is returned; otherwise the tables come back as Arrow. Either way the sources are
    streamed (see :data:`ROW_LOCAL_SOURCE`), so memory does not grow with the export beyond
    the model that is returned. An OSError while writing propagates, so the caller can fall
    back to memory.
    """
    import pyarrow as pa

    scratch = _scratch_folder(parquet_folder)
    prep_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specnsys-prep")
    # DuckDB (its import, the connection, the strings) is set up on a thread of its own
    # while the reader starts on the runtime calls, whose raw slices need no DuckDB: only
    # their normalization waits for the strings. On the 2M-kernel bench export the set-up
    # took the first 0.3 s of the build with one core idle. The same thread then gathers
    # what NVTX rows need from the whole table, while the calls and kernels are read.
    db_ready = prep_pool.submit(_open_build_db, export, scratch)
    nvtx_ready = prep_pool.submit(_prepare_nvtx_in, db_ready, export)
    cursors = _WorkerCursors(lambda: db_ready.result().con)
    try:
        built: dict[str, pa.Table] = {}

        def reads() -> Iterator[SliceRead]:
            # Pulled by the reader when the previous table's last slice is submitted: each
            # table's small side tables are registered then, before its first slice is read.
            for table in BUILD_ORDER:
                context = _LazyContext(db_ready, nvtx_ready if table is NVTX else None)
                yield _row_local_read(db_ready, export, table, cursors, context)

        try:
            with contextlib.closing(export.iter_reads(reads())) as slices:
                for index, group in itertools.groupby(slices, key=operator.itemgetter(0)):
                    table = BUILD_ORDER[index]
                    parts = (part for _, part in group)
                    if parquet_folder is None:
                        built[table.name] = pa.concat_tables([_decoded(p) for p in parts])
                    else:
                        _write_parquet(parts, parquet_folder / f"{table.name}.parquet")
                    for src in _side_sources(table):
                        db_ready.result().con.execute(f"DROP TABLE IF EXISTS {src.alias}")
        finally:
            cursors.close()
            # Arrow's allocator keeps the slices' freed buffers for reuse; the analysis that
            # follows allocates in Polars and DuckDB, so they are handed back now (on the 2M
            # kernels bench export the cold analyze peaked 110 MB higher with them kept).
            pa.default_memory_pool().release_unused()
        return None if parquet_folder is not None else built
    except Exception as exc:
        translated = _build_error(exc, export)
        if translated is None:
            raise
        raise translated from None
    finally:
        prep_pool.shutdown(wait=True, cancel_futures=True)
        if db_ready.done() and not db_ready.cancelled() and db_ready.exception() is None:
            db_ready.result().con.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _build_error(exc: Exception, export: SqliteExport) -> Exception | None:
    """What a failed build raises instead of *exc*: an OSError for DuckDB's I/O errors (the
    caller falls back to memory), a one-line BadInputError for values out of range (e.g.
    timestamps near the int64 limits, whose differences overflow: bad data, not a bug); None
    to let *exc* through."""
    duckdb = sys.modules.get("duckdb")  # imported on the set-up thread, if it got that far
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if duckdb is not None and isinstance(exc, duckdb.IOException):
        return OSError(detail)
    out_of_range = (ValuesOutOfRange,)
    if duckdb is not None:
        out_of_range += (duckdb.OutOfRangeException, duckdb.ConversionException)
    if isinstance(exc, out_of_range):
        return BadInputError(f"{export.path}: values out of range: {detail}")
    return None


@dataclass(frozen=True)
class _BuildDb:
    """The build's DuckDB connection (holding ``strings`` and the side tables) and the
    strings for the Arrow normalizations."""

    con: duckdb.DuckDBPyConnection
    strings: StringLookup


def _open_build_db(export: SqliteExport, scratch: Path | None) -> _BuildDb:
    import duckdb

    con = interruptible(
        duckdb.connect(config=duckdb_config(export.path.stat().st_size, scratch))
    )
    try:
        con.execute("SET enable_progress_bar = false")  # a library must not draw on stderr
        strings = export.read_tables([(STRINGS.table, STRINGS.columns, STRINGS.with_rowid)])[0]
        con.register("raw_strings", strings)
        # A real table (not TEMP): the per-slice queries run on cursors, other connections.
        con.execute(
            "CREATE TABLE strings AS SELECT id, any_value(value) AS value "
            "FROM raw_strings GROUP BY id"
        )
        con.unregister("raw_strings")
        return _BuildDb(con, _string_lookup(con))
    except BaseException:
        con.close()
        raise


def _prepare_nvtx_in(db_ready: Future[_BuildDb], export: SqliteExport) -> NvtxContext:
    """:func:`_prepare_nvtx` on a cursor of its own, once the build's DuckDB is set up."""
    cursor = db_ready.result().con.cursor()
    try:
        return _prepare_nvtx(cursor, export)
    finally:
        cursor.close()


class _LazyContext:
    """A table's :class:`NormalizeContext` once the set-up it needs is done: a slice read
    before then waits for it in its normalization, not in its read."""

    def __init__(self, db_ready: Future[_BuildDb], nvtx_ready: Future[NvtxContext] | None) -> None:
        self._db_ready = db_ready
        self._nvtx_ready = nvtx_ready

    def __call__(self) -> NormalizeContext:
        nvtx = self._nvtx_ready.result() if self._nvtx_ready is not None else None
        return NormalizeContext(self._db_ready.result().strings, nvtx)


def _string_lookup(con: duckdb.DuckDBPyConnection) -> StringLookup:
    """The ``strings`` table of *con* (one value per id) for the Arrow normalizations."""
    table = to_arrow(con.sql("SELECT id, value FROM strings"))
    return StringLookup(table.column("id").combine_chunks(), table.column("value").combine_chunks())


#: Named with the pid, so that a later run can sweep the folder of a killed process.
SCRATCH_PREFIX = "specnsys-scratch-"


def _scratch_folder(parquet_folder: Path | None) -> Path | None:
    """A private folder for DuckDB's spills: inside the cache entry being built, else a new
    temporary folder; None when neither can be written (then DuckDB does not spill)."""
    try:
        if parquet_folder is not None:
            scratch = parquet_folder / ".scratch"
            scratch.mkdir()
            return scratch
        return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    except OSError:
        return None


def _register_small(con: duckdb.DuckDBPyConnection, export: SqliteExport, src: SourceRead) -> None:
    """Read a small source whole into a DuckDB table named after its alias."""
    arrow = export.read_tables([(src.table, src.columns, src.with_rowid)])[0]
    con.register("_specnsys_small", arrow)
    con.execute(f"CREATE OR REPLACE TABLE {src.alias} AS SELECT * FROM _specnsys_small")
    con.unregister("_specnsys_small")


def _prepare_nvtx(con: duckdb.DuckDBPyConnection, export: SqliteExport) -> NvtxContext:
    """Gather what each NVTX row needs from the whole table, before the rows are built.

    Two narrow reads that SQLite filters (so only the rows concerned are handed over): the
    domain and category definition rows, whose names are grouped in *con* (it holds the
    ``strings``), and the push/pop ranges, whose depth and parent (:func:`nvtx_nesting`, in
    id order) each slice then takes for its own rowid range.
    """
    table = NVTX.sources[0].table
    has_types = "eventType" in export.columns(table)

    def rows_of(columns: tuple[RawColumn, ...], types: str, with_rowid: bool) -> pa.Table:
        where = f"CAST(eventType AS INTEGER) IN ({types})" if has_types else "0"
        return export.read_tables([(table, columns, with_rowid)], where=where)[0]

    con.register("nvtx_definitions", rows_of(_NVTX_DEFINITION_COLUMNS, "33, 75", False))
    try:
        domains = to_arrow(con.sql(NVTX_DOMAINS))
        categories = to_arrow(con.sql(NVTX_CATEGORIES))
    finally:
        con.unregister("nvtx_definitions")
    nesting = nvtx_nesting(pl.from_arrow(rows_of(_NVTX_RANGE_COLUMNS, "59, 70", True)).lazy())
    return NvtxContext(domains, categories, nesting)


class _WorkerCursors:
    """One DuckDB cursor per reader thread (a connection is not to be shared by threads),
    created on first use and closed together."""

    def __init__(self, connection: Callable[[], duckdb.DuckDBPyConnection]) -> None:
        self._connection = connection  # asked for on first use: it may still be set up
        self._local = threading.local()
        self._all: list[duckdb.DuckDBPyConnection] = []
        self._lock = threading.Lock()

    def get(self) -> duckdb.DuckDBPyConnection:
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            with self._lock:
                cursor = self._local.cursor = self._connection().cursor()
                self._all.append(cursor)
        return cursor

    def close(self) -> None:
        for cursor in self._all:
            cursor.close()


def _side_sources(table: ModelTable) -> list[SourceRead]:
    """The sources of *table* read whole (small), besides the one it is built from."""
    return [src for src in table.sources if src.alias != ROW_LOCAL_SOURCE[table.name]]


def _row_local_read(
    db_ready: Future[_BuildDb],
    export: SqliteExport,
    table: ModelTable,
    cursors: _WorkerCursors,
    context: Callable[[], NormalizeContext],
) -> SliceRead:
    """The read that builds *table* slice by slice: through its Arrow normalization (given
    *context*, asked for by each slice's normalization), or through its query, after its
    side sources are registered in the build's DuckDB."""
    alias = ROW_LOCAL_SOURCE[table.name]
    (stream,) = [src for src in table.sources if src.alias == alias]
    if table.arrow is not None:
        arrow = table.arrow
        return SliceRead(
            stream.table, stream.columns, stream.with_rowid, lambda raw: arrow(raw, context())
        )
    for src in _side_sources(table):
        _register_small(db_ready.result().con, export, src)
    query = table.sql(export)

    def normalize(raw: pa.Table) -> pa.Table:
        cursor = cursors.get()
        cursor.register(alias, raw)
        try:
            return to_arrow(cursor.sql(query))
        finally:
            cursor.unregister(alias)

    return SliceRead(stream.table, stream.columns, stream.with_rowid, normalize)


def _write_parquet(slices: Iterable[pa.Table], target: Path) -> None:
    """Write *slices* (same columns) to one Parquet file, a row group per slice, as they come."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: pq.ParquetWriter | None = None
    try:
        for part in slices:
            if writer is None:
                # Dictionary pages only for text: trying them on timestamps and ids costs more
                # than a third of the write and gains nothing (they do not repeat). Min/max
                # statistics only for the others: no query prunes row groups by a kernel name,
                # and comparing every string cost 10-20% of the write (ingest bench export).
                # A dictionary-coded column is written with its own dictionary; no Arrow
                # schema is stored, so every reader sees text columns as plain strings.
                # Integers are delta-coded: times and ids mostly grow row by row, so their
                # bit-packed differences are small. On the 2M-kernel bench export the runtime
                # and kernels took 0.26-0.31 / 0.36-0.42 CPU-s to normalize and write against
                # 0.41-0.47 / 0.46-0.50 (plain + LZ4), and the analysis of the cache took
                # 3.0-3.4 CPU-s against 3.8; the real corpus's caches are 24-63% smaller.
                text = [
                    f.name
                    for f in part.schema
                    if pa.types.is_string(f.type) or pa.types.is_dictionary(f.type)
                ]
                others = [f.name for f in part.schema if f.name not in text]
                ints = [f.name for f in part.schema if pa.types.is_integer(f.type)]
                writer = pq.ParquetWriter(
                    target,
                    part.schema,
                    compression=PARQUET_COMPRESSION,
                    use_dictionary=text,
                    column_encoding=dict.fromkeys(ints, "DELTA_BINARY_PACKED"),
                    write_statistics=others,
                    store_schema=False,
                )
            elif part.schema != writer.schema:
                part = part.cast(writer.schema)
            writer.write_table(part)
    finally:
        if writer is not None:
            writer.close()
