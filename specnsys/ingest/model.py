"""How an nsys export becomes the trace model: each model table's source reads and normalization.

The model's tables and columns (names, types, nullability, meanings) are declared in
:mod:`specnsys.model`; this module says how the nsys reader fills them. Each model table is
defined by the source table(s) it reads, the raw columns it needs (read by
:mod:`specnsys.ingest.sqlite_reader`, all-NULL when a version lacks them) and one DuckDB query
that turns the raw Arrow columns into the model's columns (for the three big tables, NVTX
events, runtime calls and kernels, an Arrow function does the same at a fraction of the cost).
Row counts are preserved: a model table has exactly as many rows as its source table (``nvtx``
keeps domain/category/thread-name rows and says what each row is in ``kind``), so a count in
the model can be checked against a count in SQLite.

Conventions: times are integer nanoseconds on the export's session timeline; ``pid``/``tid`` are
decoded from nsys global ids (``pid = (g >> 24) & 0xFFFFFF``, ``tid = g & 0xFFFFFF``); the raw
global ids stay available as ``global_tid``/``global_pid``; names are resolved from ``StringIds``.

This module holds the definitions; building the model from an export is
:mod:`specnsys.ingest.build`, the Arrow normalizations :mod:`specnsys.ingest.normalize`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specnsys.ingest.normalize import (
    KERNEL_COLUMNS,
    KERNEL_LAUNCH_COLUMNS,
    PID,
    TID,
    ArrowNormalize,
    kernels_arrow,
    nvtx_arrow,
    runtime_arrow,
)
from specnsys.ingest.sqlite_reader import RawColumn, SqliteExport

# The declaration's names, here too for the modules that read them beside the definitions.
from specnsys.model import MODEL_TABLES as MODEL_TABLES
from specnsys.model import MODEL_VERSION as MODEL_VERSION

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
    """One raw table registered in DuckDB under ``alias`` before the model query runs.

    *fallbacks* are ``(table, column)`` pairs read instead when the export lacks *table*: the
    first whose table has that column (a table that changed its name across nsys versions,
    while its old name now holds other rows: told apart by its columns, never by a version).
    """

    alias: str
    table: str
    columns: tuple[RawColumn, ...]
    with_rowid: bool = False
    fallbacks: tuple[tuple[str, str], ...] = ()

    def resolve(self, export: SqliteExport) -> SourceRead:
        """This read, of the table *export* holds these rows in (*table* when it is absent
        everywhere: an absent table reads as no rows)."""
        if export.has_table(self.table):
            return self
        for table, column in self.fallbacks:
            if column in export.columns(table):
                return replace(self, table=table, fallbacks=())
        return self


@dataclass(frozen=True)
class ModelTable:
    """A model table: the raw reads it needs and how they are normalized: a DuckDB query
    (*query*), or for the biggest tables, whose rows only need arithmetic and name look-ups,
    an Arrow function (*arrow*) that costs a fraction of the query's CPU time (each slice's
    round trip into DuckDB and back, and its hash joins, are what the query pays for; see
    docs/performance.md#normalization)."""

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
NVTX_DEFINITION_COLUMNS = (
    *_ints("globalTid", "domainId", "category", "eventType", "textId"),
    RawColumn("text", "text"),
)
#: What the nesting of push/pop ranges (types 59, 70) needs; read before the rows.
NVTX_RANGE_COLUMNS = tuple(_ints("globalTid", "domainId", "eventType", "start", "end"))

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

NVTX = ModelTable(
    "nvtx",
    (SourceRead("raw_nvtx", "NVTX_EVENTS", _NVTX_COLUMNS, with_rowid=True),),
    # Built slice by slice like the other tables, for tens of millions of rows: what needs the
    # whole table is gathered first from narrow reads (see :func:`.build._prepare_nvtx`) and
    # handed to each slice (:class:`.normalize.NvtxContext`).
    None,
    "NVTX_EVENTS",
    arrow=nvtx_arrow,
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
    arrow=runtime_arrow,
)

KERNELS = ModelTable(
    "kernels",
    (
        SourceRead(
            "raw_kernels",
            "CUPTI_ACTIVITY_KIND_KERNEL",
            tuple(_ints("start", "end", *KERNEL_COLUMNS.values(), "globalPid", "shortName",
                        "demangledName", *KERNEL_LAUNCH_COLUMNS.values())),
        ),
    ),
    None,
    "CUPTI_ACTIVITY_KIND_KERNEL",
    arrow=kernels_arrow,
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

GRAPH_NODES = ModelTable(
    "graph_nodes",
    (
        SourceRead(
            "raw_graph_nodes",
            "CUDA_GRAPH_NODE_EVENTS",
            tuple(_ints("start", "end", "eventClass", "globalTid", "nameId", "graphNodeId",
                        "originalGraphNodeId")),
            # Up to nsys 2022.x the node events were in CUDA_GRAPH_EVENTS, a name that now
            # holds graph-level events (graphId, no graphNodeId): the column tells them apart.
            fallbacks=(("CUDA_GRAPH_EVENTS", "graphNodeId"),),
        ),
    ),
    f"""SELECT n.start, n."end", n.eventClass AS event_class,
               CAST({PID.format(g="n.globalTid")} AS BIGINT) AS pid,
               CAST({TID.format(g="n.globalTid")} AS BIGINT) AS tid,
               n.globalTid AS global_tid, s.value AS name, n.graphNodeId AS graph_node_id,
               n.originalGraphNodeId AS original_graph_node_id
        FROM raw_graph_nodes n LEFT JOIN strings s ON s.id = n.nameId""",
    "CUDA_GRAPH_NODE_EVENTS",
)
"""CUDA graph node creations and clones, on the host (``CUDA_GRAPH_NODE_EVENTS``; the node
events of old ``CUDA_GRAPH_EVENTS``): the thread and time a node was captured or added, and for
a node cloned when its graph was instantiated or cloned, the node it copies. A kernel, copy or
memset run from a graph carries its node in ``graph_node_id``."""

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

#: nsys eventClass codes of OSRT_API rows (ENUM_NSYS_EVENT_CLASS): a traced call, and the two
#: zero-length markers of OS runtime tracing starting and finishing (nestingLevel NULL).
OSRT_KINDS = {27: "call", 31: "profiling_started", 32: "profiling_finished"}

OSRT = ModelTable(
    "osrt",
    (
        SourceRead(
            "raw_osrt",
            "OSRT_API",
            tuple(_ints("start", "end", "eventClass", "globalTid", "nameId", "returnValue",
                        "nestingLevel")),
        ),
    ),
    # An eventClass other than the two markers is a call: a class nsys adds later is counted
    # rather than dropped.
    f"""SELECT o.start, o."end", o."end" - o.start AS duration, s.value AS name,
               CASE o.eventClass WHEN 31 THEN '{OSRT_KINDS[31]}' WHEN 32 THEN '{OSRT_KINDS[32]}'
                    ELSE '{OSRT_KINDS[27]}' END AS kind,
               o.eventClass AS event_class, o.returnValue AS return_value,
               o.nestingLevel AS nesting_level,
               CAST({PID.format(g="o.globalTid")} AS BIGINT) AS pid,
               CAST({TID.format(g="o.globalTid")} AS BIGINT) AS tid,
               o.globalTid AS global_tid
        FROM raw_osrt o LEFT JOIN strings s ON s.id = o.nameId""",
    "OSRT_API",
)
"""OS runtime library calls (``-t osrt``: read, poll, pthread_cond_wait, ioctl, ...) on the
host: what the CPU threads waited on or did outside CUDA."""

CPU_SAMPLES = ModelTable(
    "cpu_samples",
    (
        SourceRead(
            "raw_cpu_samples",
            "COMPOSITE_EVENTS",
            tuple(_ints("id", "start", "cpu", "threadState", "globalTid", "cpuCycles")),
        ),
    ),
    f"""SELECT c.id, c.start AS timestamp, c.cpu, c.threadState AS thread_state,
               c.cpuCycles AS cpu_cycles,
               CAST({PID.format(g="c.globalTid")} AS BIGINT) AS pid,
               CAST({TID.format(g="c.globalTid")} AS BIGINT) AS tid,
               c.globalTid AS global_tid
        FROM raw_cpu_samples c""",
    "COMPOSITE_EVENTS",
)
"""CPU instruction-pointer samples (``--sample=cpu``): one row per sample of a thread, at an
instant; its call stack is in SAMPLING_CALLCHAINS (keyed by ``id``), not read here."""

MODEL = (
    THREADS, PROCESSES, NVTX, RUNTIME, KERNELS, MEMCPY, MEMSET, GRAPHS, GRAPH_NODES, SYNC,
    GPU_METRICS, GPUS, OSRT, CPU_SAMPLES,
)
assert tuple(t.name for t in MODEL) == MODEL_TABLES
#: The order tables are built in: the runtime calls first, their raw slices read while
#: DuckDB and the strings are set up (the tables normalized by a query need that set-up);
#: NVTX after the two big tables, so that its preparation runs while they are read (see
#: :func:`.build.build_model`).
BUILD_ORDER = (
    RUNTIME, KERNELS, THREADS, PROCESSES, NVTX, MEMCPY, MEMSET, GRAPHS, GRAPH_NODES, SYNC,
    GPU_METRICS, GPUS, OSRT, CPU_SAMPLES,
)
assert set(BUILD_ORDER) == set(MODEL) and len(BUILD_ORDER) == len(MODEL)

STRINGS = SourceRead("raw_strings", "StringIds", (RawColumn("id"), RawColumn("value", "text")))

#: The model columns resolved from ``StringIds``, per table: (the raw id column, the model
#: column). A row whose id is set but not in ``StringIds`` gets a NULL name; the build counts
#: them (:class:`specnsys.ingest.build.BuildNotes`), so that the data-quality notes say so
#: (a kernel "(unnamed)", a range that is no phase, a request that is no request).
NAME_REFERENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "threads": (("nameId", "name"),),
    "nvtx": (("textId", "text"), ("jsonTextId", "json_text")),
    "runtime": (("nameId", "name"),),
    "kernels": (("shortName", "short_name"), ("demangledName", "demangled_name")),
    "graph_nodes": (("nameId", "name"),),
    "osrt": (("nameId", "name"),),
}


#: The source (by alias) each model table is built from, slice by slice on the reader's
#: threads and written as each slice arrives, so no whole source table is ever in memory.
#: Each row of it gives one row of the model table, joined only with small tables (other
#: sources, read whole) or, for ``nvtx``, with what :func:`.build._prepare_nvtx` gathered first.
ROW_LOCAL_SOURCE = {
    "threads": "raw_threads",
    "processes": "raw_processes",
    "nvtx": "raw_nvtx",
    "runtime": "raw_runtime",
    "kernels": "raw_kernels",
    "memcpy": "raw_memcpy",
    "memset": "raw_memset",
    "graphs": "raw_graphs",
    "graph_nodes": "raw_graph_nodes",
    "sync": "raw_sync",
    "gpu_metrics": "raw_gpu_metrics",
    "gpus": "raw_gpus",
    "osrt": "raw_osrt",
    "cpu_samples": "raw_cpu_samples",
}
assert set(ROW_LOCAL_SOURCE) == set(MODEL_TABLES)
# Consecutive tables are built overlapping (see :func:`.build.build_model`): their side tables
# must not share a name, or one table's clean-up would drop what the next one reads.
_SIDE_ALIASES = [s.alias for t in MODEL for s in t.sources if s.alias != ROW_LOCAL_SOURCE[t.name]]
assert len(_SIDE_ALIASES) == len(set(_SIDE_ALIASES))
