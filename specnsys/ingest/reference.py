"""The model reference: every table and column of the trace model, its type and its meaning.

``specnsys schema`` prints it and ``docs/model.md`` holds it. The meanings are written here,
one line per column; the columns and their types are *not*: they are read from a model that
the ingest code itself builds (:func:`model_reference` builds one from a small export with a
row in every source table and describes each table). The types are the code's, and they are
the same for every export: a source column an nsys version lacks comes back as a typed NULL
(tests/test_schema_command.py checks the reference against the sample traces, and that every
column the model produces has a meaning here and every meaning a column).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from specnsys.errors import OutputError

#: What each table holds: one line, read with the source table named beside it.
TABLE_MEANINGS: dict[str, str] = {
    "threads": "one row per named thread",
    "processes": "one row per process nsys recorded",
    "nvtx": "one row per NVTX event: ranges, marks and the rows that name domains, categories "
    "and threads (kind says which)",
    "runtime": "one row per CUDA runtime or driver API call (and per backtrace row of "
    "--cudabacktrace)",
    "kernels": "one row per CUDA kernel execution",
    "memcpy": "one row per memory copy on the GPU",
    "memset": "one row per memory set on the GPU",
    "graphs": "one row per whole-graph execution (--cuda-graph-trace=graph; its kernels are "
    "then not in kernels)",
    "graph_nodes": "one row per CUDA graph node created or cloned on the host (captured, added, "
    "or copied when its graph was instantiated or cloned)",
    "sync": "one row per CUDA synchronization (event, stream or context)",
    "gpu_metrics": "one row per GPU metrics sample (--gpu-metrics-devices)",
    "gpus": "one row per GPU of the target",
    "osrt": "one row per OS runtime library call on the host (-t osrt: read, poll, "
    "pthread_cond_wait, ...), and per marker of that tracing starting or finishing",
    "cpu_samples": "one row per CPU sample of a thread (--sample=cpu)",
}

# Columns that several GPU-activity tables share, with one meaning each.
_GPU_OP = {
    "start": "start on the GPU (ns, session clock)",
    "end": "end on the GPU (ns, session clock)",
    "duration": "end - start (ns)",
    "device_id": "GPU (TARGET_INFO_GPU id)",
    "context_id": "CUDA context",
    "stream_id": "CUDA stream",
    "correlation_id": "id of the API call that issued it: join runtime on "
    "(correlation_id, pid)",
    "pid": "process id (decoded from global_pid)",
    "global_pid": "nsys global process id, as in the export",
}
_MEMORY_KIND = "pageable, pinned, device, array, managed, device static, managed static, unknown"

#: One line per column of every model table: what the value is, in the model's own terms.
COLUMN_MEANINGS: dict[str, dict[str, str]] = {
    "threads": {
        "pid": "process id (decoded from global_tid)",
        "tid": "thread id (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
        "name": "thread name",
        "priority": "thread priority nsys recorded",
    },
    "processes": {
        "pid": "process id",
        "global_pid": "nsys global process id, as in the export",
        "name": "process name (executable)",
    },
    "nvtx": {
        "id": "the row's id in NVTX_EVENTS (its rowid; nsys's RangeId in its reports)",
        "start": "start, or the instant of a mark (ns, session clock)",
        "end": "end (ns); NULL for marks, definitions and ranges that never ended",
        "duration": "end - start (ns); NULL without an end",
        "kind": "push_pop, start_end, mark, domain_create, domain_destroy, category, "
        "thread_name or other (any other event_type: CUDA object names 97-99, or a type "
        "specnsys does not know, which a data-quality warning counts)",
        "event_type": "nsys eventType code (59/70 push/pop, 60/71 start/end, 34 mark, ...)",
        "text": "range or mark text: written inline or registered (by string id)",
        "domain_id": "NVTX domain id within the process (0: the default domain)",
        "domain": "domain name (NULL for the default domain)",
        "category_id": "NVTX category id",
        "category": "category name, where the process named it",
        "payload_int": "integer payload (any of the four integer payload columns)",
        "payload_float": "floating-point payload (double or float)",
        "json_text": "JSON payload text (newer nsys versions)",
        "color": "ARGB colour of the range",
        "range_id": "nsys rangeId of a start/end range",
        "pid": "process id (decoded from global_tid)",
        "tid": "thread that started the range (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
        "end_tid": "thread that ended a start/end range, when another thread did",
        "end_global_tid": "nsys global id of that ending thread",
        "depth": "push/pop nesting depth per (thread, domain): 0 outermost; NULL for other rows",
        "parent": "id of the enclosing push/pop range on the same thread and domain; NULL at the "
        "top",
    },
    "runtime": {
        "start": "call start on the host (ns, session clock)",
        "end": "call end on the host (ns, session clock)",
        "duration": "end - start (ns)",
        "name": "API name, version suffix stripped (cudaLaunchKernel_v7000 -> cudaLaunchKernel)",
        "raw_name": "API name as recorded",
        "correlation_id": "id shared with the GPU work the call issued (with pid)",
        "event_class": "nsys eventClass: 0 CUDA runtime, 1 CUDA driver, 67 CUDA backtrace",
        "is_backtrace": "a --cudabacktrace row duplicating a real call: filter before joining",
        "pid": "process id (decoded from global_tid)",
        "tid": "calling thread (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
    },
    "kernels": {
        **_GPU_OP,
        "short_name": "kernel name (function name only)",
        "demangled_name": "full demangled kernel name (with arguments and templates)",
        "grid_x": "grid size in x (blocks)",
        "grid_y": "grid size in y (blocks)",
        "grid_z": "grid size in z (blocks)",
        "block_x": "block size in x (threads)",
        "block_y": "block size in y (threads)",
        "block_z": "block size in z (threads)",
        "graph_node_id": "CUDA graph node the kernel ran as (NULL outside graphs)",
        "graph_id": "CUDA graph the kernel belongs to (NULL outside graphs)",
    },
    "memcpy": {
        **_GPU_OP,
        "bytes": "bytes copied",
        "copy_kind": "nsys copyKind code",
        "copy_kind_name": "direction: HtoD, DtoH, DtoD, HtoH, PtoP, UVM ..., unknown",
        "src_kind": f"source memory kind: {_MEMORY_KIND}",
        "dst_kind": "destination memory kind (as src_kind)",
        "graph_node_id": "CUDA graph node the copy ran as (NULL outside graphs)",
    },
    "memset": {
        **_GPU_OP,
        "bytes": "bytes set",
        "value": "the value written",
        "mem_kind": f"memory kind: {_MEMORY_KIND}",
        "graph_node_id": "CUDA graph node the memset ran as (NULL outside graphs)",
    },
    "graphs": {
        **_GPU_OP,
        "correlation_id": "id of the graph launch call: join runtime on (correlation_id, pid)",
        "graph_id": "CUDA graph id",
        "graph_exec_id": "id of the executable graph instance",
    },
    "graph_nodes": {
        "start": "start of the node's creation on the host (ns, session clock)",
        "end": "end of the node's creation (ns, session clock)",
        "event_class": "nsys eventClass of the event (77: graph node creation)",
        "pid": "process id (decoded from global_tid)",
        "tid": "thread that created the node (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
        "name": "what created the node, as nsys names it",
        "graph_node_id": "the node: what graph_node_id of kernels, memcpy and memset refers to",
        "original_graph_node_id": "the node this one is a clone of (instantiation or graph "
        "clone); NULL for a node captured or added",
    },
    "sync": {
        **_GPU_OP,
        "start": "start of the synchronization (ns, session clock)",
        "end": "end of the synchronization (ns, session clock)",
        "correlation_id": "id of the synchronizing API call: join runtime on "
        "(correlation_id, pid)",
        "sync_type": "nsys syncType code as recorded (renumbered in nsys 2025.3: classify by "
        "the API call's name instead)",
        "event_id": "CUDA event of an event synchronization",
    },
    "gpu_metrics": {
        "timestamp": "sample time (ns, session clock)",
        "device_id": "GPU sampled (the low byte of the source typeId)",
        "metric_name": "metric name as nsys names it (e.g. DRAM Read Bandwidth [Throughput %])",
        "metric_id": "nsys metric id (not stable across versions: use metric_name)",
        "value": "sampled value (the unit is in the metric name)",
    },
    "gpus": {
        "device_id": "GPU id (what device_id in the activity tables refers to)",
        "name": "product name",
        "sm_count": "streaming multiprocessors",
        "memory_bandwidth": "peak memory bandwidth (bytes/s)",
        "total_memory": "device memory (bytes)",
        "clock_rate_hz": "SM clock rate (Hz)",
        "cuda_device": "CUDA device ordinal",
        "chip_name": "chip name (e.g. GH100)",
        "bus_location": "PCI bus location",
        "uuid": "GPU UUID",
        "compute_major": "compute capability, major",
        "compute_minor": "compute capability, minor",
    },
    "osrt": {
        "start": "call start on the host (ns, session clock)",
        "end": "call end on the host (ns, session clock)",
        "duration": "end - start (ns)",
        "name": "function name (read, poll, ioctl, pthread_cond_wait, ...)",
        "kind": "call, or profiling_started / profiling_finished: the zero-length markers of "
        "OS runtime tracing (eventClass 31/32), not calls",
        "event_class": "nsys eventClass: 27 OS runtime call, 31/32 tracing started/finished",
        "return_value": "the function's return value",
        "nesting_level": "0 for a call made outside any other traced call; NULL for markers",
        "pid": "process id (decoded from global_tid)",
        "tid": "calling thread (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
    },
    "cpu_samples": {
        "id": "the sample's id in COMPOSITE_EVENTS (its call stack: SAMPLING_CALLCHAINS.id)",
        "timestamp": "sample time (ns, session clock)",
        "cpu": "CPU the thread was running on",
        "thread_state": "nsys threadState code (ENUM_SAMPLING_THREAD_STATE)",
        "cpu_cycles": "value of the PMU cycle counter nsys recorded with the sample",
        "pid": "process id (decoded from global_tid)",
        "tid": "sampled thread (decoded from global_tid)",
        "global_tid": "nsys global thread id, as in the export",
    },
}

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


@dataclass(frozen=True)
class ColumnReference:
    """One column: its name, its DuckDB type (what ``DESCRIBE`` and ``specnsys sql`` show),
    its Polars type (what ``Trace.table`` gives) and its meaning."""

    name: str
    type: str
    polars_type: str
    meaning: str


@dataclass(frozen=True)
class TableReference:
    """One model table: the nsys table(s) it is built from, what a row is, its columns."""

    name: str
    sources: tuple[str, ...]
    meaning: str
    columns: tuple[ColumnReference, ...]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def model_reference() -> tuple[TableReference, ...]:
    """Every model table, in the model's order, with its columns as the ingest code builds them.

    The model of a small export with a row in every source table is built in memory (no cache
    entry is written) and each table described; a column without a meaning in
    :data:`COLUMN_MEANINGS` gets an empty one (the tests refuse that)."""
    from specnsys.ingest.model import MODEL
    from specnsys.ingest.trace import open_trace

    try:
        folder = tempfile.TemporaryDirectory(prefix="specnsys-reference-")
    except OSError as exc:
        raise OutputError(f"cannot create a temporary folder for the reference: {exc}") from exc
    with folder as scratch, open_trace(_reference_export(Path(scratch)), use_cache=False) as trace:
        tables = []
        for table in MODEL:
            described = trace.sql(f'DESCRIBE "{table.name}"').fetchall()
            polars = trace.table(table.name).collect_schema()
            meanings = COLUMN_MEANINGS.get(table.name, {})
            columns = tuple(
                ColumnReference(name, str(sql_type), str(polars[name]), meanings.get(name, ""))
                for name, sql_type, *_ in described
            )
            sources = tuple(dict.fromkeys(s.table for s in table.sources))
            tables.append(
                TableReference(table.name, sources, TABLE_MEANINGS.get(table.name, ""), columns)
            )
    return tuple(tables)


def _reference_export(folder: Path) -> Path:
    """An export with one row in every table the model reads (built as nsys lays it out)."""
    from specnsys.testing.builder import NsysExportBuilder

    b = NsysExportBuilder()
    b.process(1, "python")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys")
    b.category(1, 1, "phases")
    b.push_pop(100, 900, "decode", domain_id=1, category=1, payload_int=1)
    b.start_end(100, 900, "request", domain_id=1, payload_float=0.5)
    b.mark(500, "tokens", domain_id=1, payload_int=4)
    b.runtime(200, 300, "cudaLaunchKernel_v7000", 1)
    b.kernel(310, 400, "gemm", 1)
    b.memcpy(410, 420, 64, 2)
    b.memset(430, 440, 64, 3)
    b.graph(450, 460, 4)
    b.graph_node(150, 160, 11)
    b.sync(470, 480, 5)
    b.gpu(0)
    b.gpu_metric(400, 0, 1, "DRAM Read Bandwidth [Throughput %]", 50)
    b.osrt(120, 140, "pthread_cond_wait")
    b.cpu_sample(130)
    return b.write(folder / "reference.sqlite")
