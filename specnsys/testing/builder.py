"""A small writer of nsys-schema SQLite exports, for tests, benchmarks and bug reports.

It writes the tables and columns that ``nsys export --type sqlite`` writes (schema 3.x layout by
default; ``legacy=True`` gives the pre-2022 layout without metadata and with
``TARGET_INFO_GPU.deviceId``), with global ids encoded the way nsys encodes them, so the ingester
under test cannot tell a built trace from a captured one by its shape. Only the tables that get
rows are created, as nsys's lazy export does.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

VM_BITS = 1 << 48  # nsys sets the VM id byte; decoding must mask it off

DDL = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "EXPORT_META_DATA": "name TEXT, value TEXT",
    "NVTX_EVENTS": (
        'start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, '
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, "
        "doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, "
        "jsonTextId INTEGER, jsonText TEXT"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL, callchainId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
        "launchType INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, "
        "gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, "
        "blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, "
        "dynamicSharedMemory INTEGER NOT NULL, graphNodeId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, srcKind INTEGER, "
        "dstKind INTEGER, graphNodeId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, "
        "graphNodeId INTEGER, memKind INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
        "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
        "correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, "
        "graphExecId INTEGER NOT NULL"
    ),
    "CUDA_GRAPH_NODE_EVENTS": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
        "globalTid INTEGER, nameId INTEGER NOT NULL, graphNodeId INTEGER NOT NULL, "
        "originalGraphNodeId INTEGER"
    ),
    # graph-level events since ~2023; before, this name held the node events (OLD_GRAPH_DDL)
    "CUDA_GRAPH_EVENTS": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
        "globalTid INTEGER, nameId INTEGER NOT NULL, graphId INTEGER NOT NULL, "
        "originalGraphId INTEGER, graphExecId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER NOT NULL, '
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, syncType INTEGER NOT NULL, eventId INTEGER NOT NULL"
    ),
    "GPU_METRICS": (
        "timestamp INTEGER, typeId INTEGER NOT NULL, metricId INTEGER NOT NULL, "
        "value INTEGER NOT NULL"
    ),
    "TARGET_INFO_GPU_METRICS": (
        "typeId INTEGER NOT NULL, sourceId INTEGER NOT NULL, typeName TEXT NOT NULL, "
        "metricId INTEGER NOT NULL, metricName TEXT NOT NULL"
    ),
    # as nsys 2023.x-2026.x write them (2024.6+ adds argumentsId to OSRT_API, not read)
    "OSRT_API": (
        'start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER NOT NULL, '
        "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, "
        "nestingLevel INTEGER, callchainId INTEGER NOT NULL"
    ),
    "COMPOSITE_EVENTS": (
        "id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, cpu INTEGER, "
        "threadState INTEGER, globalTid INTEGER, cpuCycles INTEGER NOT NULL"
    ),
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, "
        "totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, "
        "uuid TEXT, chipName TEXT, cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER"
    ),
}

LEGACY_GPU_DDL = "vmId INTEGER NOT NULL, deviceId INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER"

#: ``CUDA_GRAPH_EVENTS`` as nsys 2022.2 (schema 2.9.1) wrote it: the node events, later moved
#: to ``CUDA_GRAPH_NODE_EVENTS`` (same columns).
OLD_GRAPH_DDL = DDL["CUDA_GRAPH_NODE_EVENTS"]

#: nsys eventClass codes of the graph events (ENUM_NSYS_EVENT_CLASS).
GRAPH_NODE_CREATED, GRAPH_EXEC_CREATED, GRAPH_CREATED, GRAPH_CLONED = 77, 94, 95, 96
#: nsys eventClass codes of OSRT_API rows: a call; OS runtime tracing started / finished.
OSRT_CALL, OSRT_STARTED, OSRT_FINISHED = 27, 31, 32


def global_tid(pid: int, tid: int) -> int:
    return VM_BITS | (pid << 24) | tid


def global_pid(pid: int) -> int:
    return VM_BITS | (pid << 24)


def create_tables(
    con: sqlite3.Connection,
    names: list[str],
    *,
    legacy: bool = False,
    old_graph_events: bool = False,
) -> None:
    """Create the nsys tables *names* (schema 3.x columns, or the legacy GPU table, or with
    *old_graph_events* the node-event layout of ``CUDA_GRAPH_EVENTS``)."""
    for name in names:
        ddl = DDL[name]
        if legacy and name == "TARGET_INFO_GPU":
            ddl = LEGACY_GPU_DDL
        elif old_graph_events and name == "CUDA_GRAPH_EVENTS":
            ddl = OLD_GRAPH_DDL
        con.execute(f'CREATE TABLE IF NOT EXISTS "{name}" ({ddl})')


def gpu_loop(request_end: int) -> NsysExportBuilder:
    """The start most built GPU traces share: process 1 (``python3``) with its main thread
    in specnsys's domain (id 1), GPU 0, and one request over ``[0, request_end)``."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.gpu(0)
    b.start_end(0, request_end, "request", pid=1, tid=1, domain_id=1)
    return b


class NsysExportBuilder:
    """Collects events in memory and writes them as one nsys-schema SQLite export."""

    def __init__(
        self,
        *,
        product_version: str | None = "2026.2.1.210",
        schema_version: str | None = "3.25.0",
        legacy: bool = False,
        old_graph_events: bool = False,
    ) -> None:
        self.legacy = legacy
        #: node events written to ``CUDA_GRAPH_EVENTS`` in its pre-2023 layout (nsys 2022.2)
        self.old_graph_events = old_graph_events
        self.product_version = None if legacy else product_version
        self.schema_version = None if legacy else schema_version
        self.rows: dict[str, list[tuple[object, ...]]] = defaultdict(list)
        self._strings: dict[str, int] = {}

    # -- strings, threads, processes -------------------------------------------------------
    def string(self, value: str) -> int:
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
            self.rows["StringIds"].append((self._strings[value], value))
        return self._strings[value]

    def thread(self, pid: int, tid: int, name: str, priority: int = 0) -> None:
        self.rows["ThreadNames"].append((self.string(name), priority, global_tid(pid, tid)))

    def process(self, pid: int, name: str) -> None:
        self.rows["PROCESSES"].append((global_pid(pid), pid, name))

    # -- NVTX -------------------------------------------------------------------------------
    def domain(self, domain_id: int, name: str, *, pid: int = 1, tid: int = 1, t: int = 0) -> None:
        self._nvtx(t, None, 75, name, pid, tid, domain_id=domain_id)

    def category(
        self, domain_id: int, category_id: int, name: str, *, pid: int = 1, tid: int = 1
    ) -> None:
        self._nvtx(0, None, 33, name, pid, tid, domain_id=domain_id, category=category_id)

    def push_pop(self, start: int, end: int | None, text: str, **kw: object) -> int:
        return self._nvtx(start, end, 59, text, **kw)  # type: ignore[arg-type]

    def start_end(self, start: int, end: int | None, text: str, **kw: object) -> int:
        return self._nvtx(start, end, 60, text, **kw)  # type: ignore[arg-type]

    def mark(self, t: int, text: str, **kw: object) -> int:
        return self._nvtx(t, None, 34, text, **kw)  # type: ignore[arg-type]

    def _nvtx(
        self,
        start: int,
        end: int | None,
        event_type: int,
        text: str,
        pid: int = 1,
        tid: int = 1,
        *,
        domain_id: int = 0,
        category: int | None = None,
        registered: bool = True,
        payload_int: int | None = None,
        payload_float: float | None = None,
        end_tid: int | None = None,
        range_id: int | None = None,
    ) -> int:
        """Append an NVTX_EVENTS row; returns its rowid (rows are written in order)."""
        text_id = self.string(text) if registered else None
        self.rows["NVTX_EVENTS"].append(
            (
                start, end, event_type, range_id, category, None,
                None if registered else text, global_tid(pid, tid),
                None if end_tid is None else global_tid(pid, end_tid), text_id, domain_id,
                None, payload_int, payload_float, None, None, None, None, None,
            )
        )
        return len(self.rows["NVTX_EVENTS"])

    # -- CUDA -------------------------------------------------------------------------------
    def runtime(
        self, start: int, end: int, name: str, correlation_id: int, *, pid: int = 1,
        tid: int = 1, event_class: int = 0,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_RUNTIME"].append(
            (start, end, event_class, global_tid(pid, tid), correlation_id, self.string(name), 0, None)
        )

    def kernel(
        self, start: int, end: int, name: str, correlation_id: int, *, pid: int = 1,
        device: int = 0, stream: int = 7, grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (128, 1, 1), demangled: str | None = None,
        graph_node_id: int | None = None,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_KERNEL"].append(
            (
                start, end, device, 1, stream, correlation_id, global_pid(pid),
                self.string(demangled or f"{name}(float*, int)"), self.string(name), 1, 32,
                *grid, *block, 0, 0, graph_node_id,
            )
        )

    def memcpy(
        self, start: int, end: int, nbytes: int, correlation_id: int, *, copy_kind: int = 1,
        pid: int = 1, device: int = 0, stream: int = 7, src_kind: int = 1, dst_kind: int = 2,
        graph_node_id: int | None = None,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMCPY"].append(
            (start, end, device, 1, stream, correlation_id, global_pid(pid), nbytes, copy_kind,
             src_kind, dst_kind, graph_node_id)
        )

    def memset(
        self, start: int, end: int, nbytes: int, correlation_id: int, *, pid: int = 1,
        device: int = 0, stream: int = 7, value: int = 0, mem_kind: int = 2,
        graph_node_id: int | None = None,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_MEMSET"].append(
            (start, end, device, 1, stream, correlation_id, global_pid(pid), value, nbytes,
             graph_node_id, mem_kind)
        )

    def graph(
        self, start: int, end: int, correlation_id: int, *, graph_id: int = 1,
        graph_exec_id: int = 1, pid: int = 1, device: int = 0, stream: int = 7,
    ) -> None:
        """One whole-graph execution row (``--cuda-graph-trace=graph``)."""
        self.rows["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"].append(
            (start, end, device, 1, None, stream, correlation_id, global_pid(pid), graph_id,
             graph_exec_id)
        )

    def graph_node(
        self, start: int, end: int, graph_node_id: int, *, original: int | None = None,
        pid: int = 1, tid: int = 1, event_class: int = GRAPH_NODE_CREATED,
        name: str = "cudaGraphAddKernelNode",
    ) -> None:
        """One graph node event on the host: node *graph_node_id* created (captured or added)
        on thread (*pid*, *tid*) during ``[start, end)``, or, with *original*, cloned from that
        node (as ``cudaGraphInstantiate`` copies every node of the graph it instantiates).
        Written to ``CUDA_GRAPH_NODE_EVENTS``, or to ``CUDA_GRAPH_EVENTS`` with
        ``old_graph_events``."""
        table = "CUDA_GRAPH_EVENTS" if self.old_graph_events else "CUDA_GRAPH_NODE_EVENTS"
        self.rows[table].append(
            (start, end, event_class, global_tid(pid, tid), self.string(name), graph_node_id,
             original)
        )

    def graph_event(
        self, start: int, end: int, graph_id: int, *, original: int | None = None,
        graph_exec_id: int | None = None, pid: int = 1, tid: int = 1,
        event_class: int = GRAPH_CREATED, name: str = "cudaStreamEndCapture",
    ) -> None:
        """One graph-level event (graph created, cloned or instantiated) in the layout
        ``CUDA_GRAPH_EVENTS`` has had since ~2023 (graphId, no graphNodeId)."""
        if self.old_graph_events:
            raise ValueError("old_graph_events: CUDA_GRAPH_EVENTS holds node events")
        self.rows["CUDA_GRAPH_EVENTS"].append(
            (start, end, event_class, global_tid(pid, tid), self.string(name), graph_id,
             original, graph_exec_id)
        )

    def sync(
        self, start: int, end: int, correlation_id: int, *, sync_type: int = 3, pid: int = 1,
        device: int = 0, stream: int = 7,
    ) -> None:
        self.rows["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"].append(
            (start, end, device, 1, stream, correlation_id, global_pid(pid), sync_type, 0)
        )

    def gpu(
        self, device_id: int, name: str = "NVIDIA H200", *, sm_count: int = 132,
        memory_bandwidth: int = 4_800_000_000_000, total_memory: int = 143_771_336_704,
    ) -> None:
        if self.legacy:
            self.rows["TARGET_INFO_GPU"].append((VM_BITS, device_id, name, "0000:00:00.0", 1))
        else:
            self.rows["TARGET_INFO_GPU"].append(
                (VM_BITS, device_id, name, "0000:00:00.0", total_memory, memory_bandwidth,
                 1_980_000_000, sm_count, "GPU-0", "GH100", device_id, 9, 0)
            )

    def gpu_metric(self, t: int, device: int, metric_id: int, name: str, value: int) -> None:
        type_id = VM_BITS | device
        names = self.rows["TARGET_INFO_GPU_METRICS"]
        if not any(r[0] == type_id and r[3] == metric_id for r in names):
            names.append((type_id, 0, "GPU", metric_id, name))
        self.rows["GPU_METRICS"].append((t, type_id, metric_id, value))

    # -- CPU side ---------------------------------------------------------------------------
    def osrt(
        self, start: int, end: int, name: str, *, pid: int = 1, tid: int = 1,
        event_class: int = OSRT_CALL, return_value: int = 0,
    ) -> None:
        """One OS runtime library row (``-t osrt``): a call of *name* on (*pid*, *tid*) during
        ``[start, end)``, or with ``OSRT_STARTED``/``OSRT_FINISHED`` the zero-length marker
        nsys writes when that tracing starts or finishes (nestingLevel NULL, as nsys writes
        it)."""
        nesting = 0 if event_class == OSRT_CALL else None
        self.rows["OSRT_API"].append(
            (start, end, event_class, global_tid(pid, tid), self.string(name), return_value,
             nesting, 0)
        )

    def cpu_sample(
        self, t: int, *, pid: int = 1, tid: int = 1, cpu: int = 0, thread_state: int = 1,
        cpu_cycles: int = 0,
    ) -> None:
        """One CPU sample (``--sample=cpu``) of thread (*pid*, *tid*) at instant *t*."""
        rows = self.rows["COMPOSITE_EVENTS"]
        rows.append((len(rows) + 1, t, cpu, thread_state, global_tid(pid, tid), cpu_cycles))

    # -- output -------------------------------------------------------------------------------
    def write(self, path: str | Path) -> Path:
        """Write the export to *path* (replacing it) and return the path."""
        path = Path(path)
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        try:
            rows = dict(self.rows)
            if self.schema_version is not None:
                major, minor, micro = (self.schema_version.split(".") + ["0", "0"])[:3]
                rows["META_DATA_EXPORT"] = [
                    ("EXPORT_PRODUCT_VERSION", self.product_version),
                    ("EXPORT_SCHEMA_VERSION", self.schema_version),
                    ("EXPORT_SCHEMA_VERSION_MAJOR", major),
                    ("EXPORT_SCHEMA_VERSION_MINOR", minor),
                    ("EXPORT_SCHEMA_VERSION_MICRO", micro),
                ]
            rows.setdefault("StringIds", [])
            rows.setdefault("ThreadNames", [])
            create_tables(
                con, list(rows), legacy=self.legacy, old_graph_events=self.old_graph_events
            )
            for table, table_rows in rows.items():
                if table_rows:
                    marks = ", ".join("?" * len(table_rows[0]))
                    con.executemany(f'INSERT INTO "{table}" VALUES ({marks})', table_rows)
            con.commit()
        finally:
            con.close()
        return path
