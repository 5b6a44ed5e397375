"""Every table of the trace model, declared: its columns' names, Arrow types, nullability and
meanings, one line each (docs/model.md is generated from this, by ``specnsys schema``).

This is the contract every reader fills (:mod:`specnsys.readers`: the nsys export's SQL and
Arrow normalizations in :mod:`specnsys.ingest.model`, the Kineto reader's Polars frames):
each builds exactly these columns, in this order, with these types
(tests/test_model_schema.py checks every reader's output against it).
"""

from __future__ import annotations

from specnsys.model.columns import Column, ColumnType, TableSchema

__all__ = ["CONVENTIONS", "MODEL_SCHEMA", "MODEL_TABLES", "MODEL_VERSION", "table_schema"]

#: Bump when the model's tables or columns change, so old caches are not reused.
MODEL_VERSION = 5  # 4: osrt, cpu_samples; 5: text that is no number NULL, summary counts

_I, _I32, _F, _B, _S = (
    ColumnType.INT64, ColumnType.INT32, ColumnType.FLOAT64, ColumnType.BOOL, ColumnType.STRING,
)  # fmt: skip


def _c(name: str, kind: ColumnType, meaning: str, *, nullable: bool = True) -> Column:
    return Column(name, kind, meaning, nullable)


def _pid(of: str) -> Column:
    return _c("pid", _I, f"process id (decoded from {of})")


def _tid(who: str) -> Column:
    return _c("tid", _I, f"{who} (decoded from global_tid)")


_GLOBAL_TID = _c("global_tid", _I, "nsys global thread id, as in the export")
_GLOBAL_PID = _c("global_pid", _I, "nsys global process id, as in the export")
_DURATION = _c("duration", _I, "end - start (ns)")
_MEMORY_KIND = "pageable, pinned, device, array, managed, device static, managed static, unknown"
_JOIN = "join runtime on (correlation_id, pid)"


def _gpu_op(
    start: str = "start on the GPU", end: str = "end on the GPU",
    correlation: str = "the API call that issued it",
) -> tuple[Column, ...]:  # fmt: skip
    """The columns every GPU-activity table starts with."""
    return (
        _c("start", _I, f"{start} (ns, session clock)"),
        _c("end", _I, f"{end} (ns, session clock)"),
        _DURATION,
        _c("device_id", _I, "GPU (TARGET_INFO_GPU id)"),
        _c("context_id", _I, "CUDA context"),
        _c("stream_id", _I, "CUDA stream"),
        _c("correlation_id", _I, f"id of {correlation}: {_JOIN}"),
        _pid("global_pid"),
        _GLOBAL_PID,
    )


THREADS = TableSchema("threads", "one row per named thread", (
    _pid("global_tid"),
    _tid("thread id"),
    _GLOBAL_TID,
    _c("name", _S, "thread name"),
    _c("priority", _I, "thread priority nsys recorded"),
))  # fmt: skip

PROCESSES = TableSchema("processes", "one row per process nsys recorded", (
    _c("pid", _I, "process id"),
    _GLOBAL_PID,
    _c("name", _S, "process name (executable)"),
))  # fmt: skip

NVTX = TableSchema(
    "nvtx",
    "one row per NVTX event: ranges, marks and the rows that name domains, categories and "
    "threads (kind says which)",
    (
        _c("id", _I, "the row's id in NVTX_EVENTS (its rowid; nsys's RangeId in its reports)",
           nullable=False),
        _c("start", _I, "start, or the instant of a mark (ns, session clock)"),
        _c("end", _I, "end (ns); NULL for marks, definitions and ranges that never ended"),
        _c("duration", _I, "end - start (ns); NULL without an end"),
        _c("kind", _S, "push_pop, start_end, mark, domain_create, domain_destroy, category, "
           "thread_name or other (any other event_type: CUDA object names 97-99, or a type "
           "specnsys does not know, which a data-quality warning counts)", nullable=False),
        _c("event_type", _I, "nsys eventType code (59/70 push/pop, 60/71 start/end, 34 mark, "
           "...)"),
        _c("text", _S, "range or mark text: written inline or registered (by string id)"),
        _c("domain_id", _I, "NVTX domain id within the process (0: the default domain)",
           nullable=False),
        _c("domain", _S, "domain name (NULL for the default domain)"),
        _c("category_id", _I, "NVTX category id"),
        _c("category", _S, "category name, where the process named it"),
        _c("payload_int", _I, "integer payload (any of the four integer payload columns)"),
        _c("payload_float", _F, "floating-point payload (double or float)"),
        _c("json_text", _S, "JSON payload text (newer nsys versions)"),
        _c("color", _I, "ARGB colour of the range"),
        _c("range_id", _I, "nsys rangeId of a start/end range"),
        _pid("global_tid"),
        _tid("thread that started the range"),
        _GLOBAL_TID,
        _c("end_tid", _I, "thread that ended a start/end range, when another thread did"),
        _c("end_global_tid", _I, "nsys global id of that ending thread"),
        _c("depth", _I32, "push/pop nesting depth per (thread, domain): 0 outermost; NULL for "
           "other rows"),
        _c("parent", _I, "id of the enclosing push/pop range on the same thread and domain; "
           "NULL at the top"),
    ),
)  # fmt: skip

RUNTIME = TableSchema(
    "runtime",
    "one row per CUDA runtime or driver API call (and per backtrace row of --cudabacktrace)",
    (
        _c("start", _I, "call start on the host (ns, session clock)"),
        _c("end", _I, "call end on the host (ns, session clock)"),
        _DURATION,
        _c("name", _S, "API name, version suffix stripped (cudaLaunchKernel_v7000 -> "
           "cudaLaunchKernel)"),
        _c("raw_name", _S, "API name as recorded"),
        _c("correlation_id", _I, "id shared with the GPU work the call issued (with pid)"),
        _c("event_class", _I, "nsys eventClass: 0 CUDA runtime, 1 CUDA driver, 67 CUDA "
           "backtrace"),
        _c("is_backtrace", _B, "a --cudabacktrace row duplicating a real call: filter before "
           "joining"),
        _pid("global_tid"),
        _tid("calling thread"),
        _GLOBAL_TID,
    ),
)  # fmt: skip

KERNELS = TableSchema("kernels", "one row per CUDA kernel execution", (
    *_gpu_op(),
    _c("short_name", _S, "kernel name (function name only)"),
    _c("demangled_name", _S, "full demangled kernel name (with arguments and templates)"),
    *(_c(f"grid_{a}", _I, f"grid size in {a} (blocks)") for a in "xyz"),
    *(_c(f"block_{a}", _I, f"block size in {a} (threads)") for a in "xyz"),
    _c("graph_node_id", _I, "CUDA graph node the kernel ran as (NULL outside graphs)"),
    _c("graph_id", _I, "CUDA graph the kernel belongs to (NULL outside graphs)"),
))  # fmt: skip

MEMCPY = TableSchema("memcpy", "one row per memory copy on the GPU", (
    *_gpu_op(),
    _c("bytes", _I, "bytes copied"),
    _c("copy_kind", _I, "nsys copyKind code"),
    _c("copy_kind_name", _S, "direction: HtoD, DtoH, DtoD, HtoH, PtoP, UVM ..., unknown"),
    _c("src_kind", _S, f"source memory kind: {_MEMORY_KIND}"),
    _c("dst_kind", _S, "destination memory kind (as src_kind)"),
    _c("graph_node_id", _I, "CUDA graph node the copy ran as (NULL outside graphs)"),
))  # fmt: skip

MEMSET = TableSchema("memset", "one row per memory set on the GPU", (
    *_gpu_op(),
    _c("bytes", _I, "bytes set"),
    _c("value", _I, "the value written"),
    _c("mem_kind", _S, f"memory kind: {_MEMORY_KIND}"),
    _c("graph_node_id", _I, "CUDA graph node the memset ran as (NULL outside graphs)"),
))  # fmt: skip

GRAPHS = TableSchema(
    "graphs",
    "one row per whole-graph execution (--cuda-graph-trace=graph; its kernels are then not "
    "in kernels)",
    (
        *_gpu_op(correlation="the graph launch call"),
        _c("graph_id", _I, "CUDA graph id"),
        _c("graph_exec_id", _I, "id of the executable graph instance"),
    ),
)  # fmt: skip

GRAPH_NODES = TableSchema(
    "graph_nodes",
    "one row per CUDA graph node created or cloned on the host (captured, added, or copied "
    "when its graph was instantiated or cloned)",
    (
        _c("start", _I, "start of the node's creation on the host (ns, session clock)"),
        _c("end", _I, "end of the node's creation (ns, session clock)"),
        _c("event_class", _I, "nsys eventClass of the event (77: graph node creation)"),
        _pid("global_tid"),
        _tid("thread that created the node"),
        _GLOBAL_TID,
        _c("name", _S, "what created the node, as nsys names it"),
        _c("graph_node_id", _I, "the node: what graph_node_id of kernels, memcpy and memset "
           "refers to"),
        _c("original_graph_node_id", _I, "the node this one is a clone of (instantiation or "
           "graph clone); NULL for a node captured or added"),
    ),
)  # fmt: skip

SYNC = TableSchema(
    "sync", "one row per CUDA synchronization (event, stream or context)", (
        *_gpu_op("start of the synchronization", "end of the synchronization",
                 "the synchronizing API call"),
        _c("sync_type", _I, "nsys syncType code as recorded (renumbered in nsys 2025.3: "
           "classify by the API call's name instead)"),
        _c("event_id", _I, "CUDA event of an event synchronization"),
    ),
)  # fmt: skip

GPU_METRICS = TableSchema("gpu_metrics", "one row per GPU metrics sample (--gpu-metrics-devices)", (
    _c("timestamp", _I, "sample time (ns, session clock)"),
    _c("device_id", _I, "GPU sampled (the low byte of the source typeId)"),
    _c("metric_name", _S, "metric name as nsys names it (e.g. DRAM Read Bandwidth "
       "[Throughput %])"),
    _c("metric_id", _I, "nsys metric id (not stable across versions: use metric_name)"),
    _c("value", _I, "sampled value (the unit is in the metric name)"),
))  # fmt: skip

GPUS = TableSchema("gpus", "one row per GPU of the target", (
    _c("device_id", _I, "GPU id (what device_id in the activity tables refers to)"),
    _c("name", _S, "product name"),
    _c("sm_count", _I, "streaming multiprocessors"),
    _c("memory_bandwidth", _I, "peak memory bandwidth (bytes/s)"),
    _c("total_memory", _I, "device memory (bytes)"),
    _c("clock_rate_hz", _I, "SM clock rate (Hz)"),
    _c("cuda_device", _I, "CUDA device ordinal"),
    _c("chip_name", _S, "chip name (e.g. GH100)"),
    _c("bus_location", _S, "PCI bus location"),
    _c("uuid", _S, "GPU UUID"),
    _c("compute_major", _I, "compute capability, major"),
    _c("compute_minor", _I, "compute capability, minor"),
))  # fmt: skip

OSRT = TableSchema(
    "osrt",
    "one row per OS runtime library call on the host (-t osrt: read, poll, "
    "pthread_cond_wait, ...), and per marker of that tracing starting or finishing",
    (
        _c("start", _I, "call start on the host (ns, session clock)"),
        _c("end", _I, "call end on the host (ns, session clock)"),
        _DURATION,
        _c("name", _S, "function name (read, poll, ioctl, pthread_cond_wait, ...)"),
        _c("kind", _S, "call, or profiling_started / profiling_finished: the zero-length "
           "markers of OS runtime tracing (eventClass 31/32), not calls", nullable=False),
        _c("event_class", _I, "nsys eventClass: 27 OS runtime call, 31/32 tracing "
           "started/finished"),
        _c("return_value", _I, "the function's return value"),
        _c("nesting_level", _I, "0 for a call made outside any other traced call; NULL for "
           "markers"),
        _pid("global_tid"),
        _tid("calling thread"),
        _GLOBAL_TID,
    ),
)  # fmt: skip

CPU_SAMPLES = TableSchema("cpu_samples", "one row per CPU sample of a thread (--sample=cpu)", (
    _c("id", _I, "the sample's id in COMPOSITE_EVENTS (its call stack: "
       "SAMPLING_CALLCHAINS.id)"),
    _c("timestamp", _I, "sample time (ns, session clock)"),
    _c("cpu", _I, "CPU the thread was running on"),
    _c("thread_state", _I, "nsys threadState code (ENUM_SAMPLING_THREAD_STATE)"),
    _c("cpu_cycles", _I, "value of the PMU cycle counter nsys recorded with the sample"),
    _pid("global_tid"),
    _tid("sampled thread"),
    _GLOBAL_TID,
))  # fmt: skip

#: Every model table, in the model's order.
MODEL_SCHEMA: tuple[TableSchema, ...] = (
    THREADS, PROCESSES, NVTX, RUNTIME, KERNELS, MEMCPY, MEMSET, GRAPHS, GRAPH_NODES, SYNC,
    GPU_METRICS, GPUS, OSRT, CPU_SAMPLES,
)
MODEL_TABLES: tuple[str, ...] = tuple(t.name for t in MODEL_SCHEMA)
_BY_NAME = {t.name: t for t in MODEL_SCHEMA}


def table_schema(name: str) -> TableSchema:
    """The declaration of model table *name* (KeyError for a name the model lacks)."""
    return _BY_NAME[name]


#: What holds for every table (printed above the tables).
CONVENTIONS: tuple[str, ...] = (
    "Every nsys version (2020.3 to 2026.2) maps onto these tables, columns and types; a "
    "source column or table the version lacks comes back as NULL (or no rows).",
    "Each model table keeps every row of its source table, so counts can be checked against "
    "the export.",
    "Times are integer nanoseconds on the session clock; pid/tid are decoded from nsys global "
    "ids (pid = (g >> 24) & 0xFFFFFF, tid = g & 0xFFFFFF); names are resolved from StringIds.",
    "What the export holds that the model cannot is NULL and counted in a data-quality "
    "warning: a name whose string id is not in StringIds, a value of a numeric column that is "
    "no number (text that holds none, or bytes; a text holding a number is read as it).",
    "Join GPU work to its launch on correlation_id AND pid (correlation ids repeat across "
    "processes), after dropping runtime rows with is_backtrace.",
    "Query the tables with specnsys sql TRACE \"SELECT ...\" (DuckDB types, as printed) or "
    "Trace.table(name) in Python (Polars types, as printed).",
    "A PyTorch-profiler (Kineto) Chrome trace fills the same tables (design.md#readers): "
    "record_function scopes and operators are nvtx push/pop ranges (category = the Kineto "
    "category); a scope named after a phase, or specnsys.range:<name>[=<int>], is in the "
    "specnsys domain (a request a start/end range, its id in payload_int), and a zero-length "
    "specnsys.mark:<name>[=<int>] is a mark of it; pid/tid are the OS ids, global_tid = "
    "pid * 2^24 + tid and global_pid = pid * 2^24; times are ts x 1000 ns; GPU work takes "
    "the process whose API call has its correlation id; tables without such events are empty.",
)
