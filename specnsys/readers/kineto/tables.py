"""Raw trace-event columns -> the fourteen model tables (docs/model.md), in Polars.

What each Kineto event becomes (docs/design.md#readers):

* ``user_annotation`` (``record_function`` scopes) and ``cpu_op`` (operators) -> ``nvtx``
  push/pop ranges of their thread, the Kineto category in ``category``. A scope named after a
  phase of the vocabulary, or ``specnsys.range:<name>[=<int>]``, is a range of the
  ``specnsys`` domain (a ``request`` one a start/end range, as requests overlap); one named
  ``specnsys.mark:<name>[=<int>]`` is a mark of that domain at its start, the integer in
  ``payload_int``. Every other name stays in the default domain, where name rules and the
  engine packs map it. A scope the profiler saw unfinished has no end.
* ``cuda_runtime`` / ``cuda_driver`` -> ``runtime`` (event class 0 / 1), ``args.correlation``
  as the correlation id.
* ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync`` -> ``kernels``, ``memcpy``,
  ``memset``, ``sync``. Kineto draws them under a device's pseudo-process, so their ``pid``
  is the launching process's: the one whose API call has their correlation id (else, in a
  trace with one process, that process).
* ``process_name`` / ``thread_name`` metadata -> ``processes`` / ``threads``, for the processes
  with host events; ``deviceProperties`` -> ``gpus``.

Ids: ``pid`` and ``tid`` are the operating system's (Kineto records them); ``global_tid`` is
``pid * 2**24 + tid`` and ``global_pid`` ``pid * 2**24``, the layout of nsys global ids, so
that they decode as nsys ids do. Times are integer nanoseconds on the trace's own clock
(``ts`` x 1000: Kineto writes ``ts`` relative to ``baseTimeNanoseconds``); a trace whose
times lie beyond 2^59 ns (absolute epoch times of old torch versions) is shifted back by its
first event's whole second (``time_origin_ns`` in the version's parameters).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import polars as pl

from specnsys.ingest.model import COPY_KINDS, MEMORY_KINDS
from specnsys.ingest.nvtx_nesting import nvtx_nesting
from specnsys.model import MODEL_TABLES, ColumnType, table_schema
from specnsys.vocabulary import (
    DOMAIN,
    PHASES,
    REQUEST_PHASE,
    TORCH_MARK_PREFIX,
    TORCH_RANGE_PREFIX,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["GLOBAL_ID_SHIFT", "TIME_LIMIT_NS", "Model", "model_tables"]

#: ``global_tid = pid * 2**24 + tid``: the bit layout of nsys global ids.
GLOBAL_ID_SHIFT = 24
#: Times beyond this (18 years of nanoseconds) are absolute epoch times: shifted back.
TIME_LIMIT_NS = 1 << 59
#: The ``specnsys`` domain's id in ``nvtx.domain_id`` (0 is the default domain).
SPECNSYS_DOMAIN_ID = 1

#: Each declared column type as Polars builds it (:mod:`specnsys.model`).
_POLARS: dict[ColumnType, type[pl.DataType]] = {
    ColumnType.INT64: pl.Int64, ColumnType.INT32: pl.Int32, ColumnType.FLOAT64: pl.Float64,
    ColumnType.BOOL: pl.Boolean, ColumnType.STRING: pl.String,
}  # fmt: skip

#: nsys eventType codes of the rows' kinds, so that queries written for nsys traces hold.
_EVENT_TYPES = {"push_pop": 59, "start_end": 60, "mark": 34}
_PAYLOAD = r"=(-?[0-9]+)$"

_COPY_CODES = {name: code for code, name in COPY_KINDS.items()}
_MEMORY_NAMES = set(MEMORY_KINDS.values())


def _schema(table: str) -> dict[str, pl.DataType]:
    """The declared columns of *table* (:func:`specnsys.model.table_schema`) as Polars types."""
    return {c.name: _POLARS[c.type]() for c in table_schema(table).columns}


def _conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """*frame* with exactly the columns of *table*, in order and typed (absent ones NULL)."""
    return frame.select(
        [
            (pl.col(name) if name in frame.columns else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in _schema(table).items()
        ]
    )


def _global(pid: str, tid: str | None = None) -> pl.Expr:
    shifted = pl.col(pid) * (1 << GLOBAL_ID_SHIFT)
    return shifted if tid is None else shifted + pl.col(tid)


# --------------------------------------------------------------------------- time origin


def time_origin(raw: Mapping[str, pa.Table]) -> int:
    """What every time is shifted back by: 0, unless some time lies beyond
    :data:`TIME_LIMIT_NS` (then the first event's start, floored to a whole second)."""
    bounds = [
        _frame(raw[kind]).lazy().select(
            pl.col("ts").min().alias("lo"), (pl.col("ts") + pl.col("dur")).max().alias("hi")
        )
        for kind in ("ranges", "runtime", "kernels", "memcpy", "memset", "sync")
    ]
    lo, hi = pl.concat(bounds).select(pl.col("lo").min(), pl.col("hi").max()).collect().row(0)
    if lo is None or (abs(lo) < TIME_LIMIT_NS and abs(hi) < TIME_LIMIT_NS):
        return 0
    return int(lo) - int(lo) % 1_000_000_000


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


# --------------------------------------------------------------------------- nvtx


def _nvtx(ranges: pa.Table, origin: int) -> pl.DataFrame:
    """Host ranges and marks as ``nvtx`` rows (see the module docstring), ids in start order,
    with the depth and parent of every push/pop range."""
    name = pl.col("name")
    scope = pl.col("cat") == "user_annotation"
    is_mark = scope & name.str.starts_with(TORCH_MARK_PREFIX)
    is_range = scope & name.str.starts_with(TORCH_RANGE_PREFIX)
    body = (
        pl.when(is_mark)
        .then(name.str.slice(len(TORCH_MARK_PREFIX)))
        .when(is_range)
        .then(name.str.slice(len(TORCH_RANGE_PREFIX)))
    )
    frame = (
        _frame(ranges)
        .lazy()
        .with_columns(
            body.alias("body"),
            (is_mark | is_range | (scope & name.is_in(PHASES))).alias("ours"),
            is_mark.alias("is_mark"),
        )
        .with_columns(
            pl.col("body").str.extract(_PAYLOAD, 1).cast(pl.Int64, strict=False).alias("payload_int"),
            pl.when(pl.col("body").is_not_null())
            .then(pl.col("body").str.replace(_PAYLOAD, ""))
            .otherwise(name)
            .alias("text"),
        )
        .with_columns(
            pl.when(pl.col("is_mark"))
            .then(pl.lit("mark"))
            .when(pl.col("ours") & (pl.col("text") == REQUEST_PHASE))
            .then(pl.lit("start_end"))
            .otherwise(pl.lit("push_pop"))
            .alias("kind"),
        )
        .with_columns(
            (pl.col("ts") - origin).alias("start"),
            pl.when((pl.col("kind") == "mark") | ~pl.col("finished"))
            .then(None)
            .otherwise(pl.col("ts") + pl.col("dur") - origin)
            .alias("end"),
        )
        .sort(["start", "dur", "order"], descending=[False, True, False], nulls_last=True)
        .with_row_index("id", offset=1)
        .with_columns(
            pl.col("id").cast(pl.Int64),
            (pl.col("end") - pl.col("start")).alias("duration"),
            pl.col("kind").replace_strict(_EVENT_TYPES, return_dtype=pl.Int64).alias("event_type"),
            pl.when(pl.col("ours")).then(SPECNSYS_DOMAIN_ID).otherwise(0).alias("domain_id"),
            pl.when(pl.col("ours")).then(pl.lit(DOMAIN)).alias("domain"),
            pl.col("cat").alias("category"),
            _global("pid", "tid").alias("global_tid"),
        )
        .with_columns(
            pl.when(pl.col("kind") == "start_end").then(pl.col("id")).alias("range_id"),
        )
        .collect()
    )
    nesting = nvtx_nesting(
        frame.lazy().select(
            pl.col("id").alias("__rowid"),
            pl.col("event_type").alias("eventType"),
            pl.col("global_tid").alias("globalTid"),
            pl.col("domain_id").alias("domainId"),
            "start",
            "end",
        )
    )
    nested = _frame(nesting)
    return _conform("nvtx", frame.join(nested, on="id", how="left", maintain_order="left"))


# --------------------------------------------------------------------------- API calls, GPU work


def _runtime(calls: pa.Table, origin: int) -> pl.DataFrame:
    return _conform(
        "runtime",
        _frame(calls).with_columns(
            (pl.col("ts") - origin).alias("start"),
            (pl.col("ts") + pl.col("dur") - origin).alias("end"),
            pl.col("dur").alias("duration"),
            pl.col("name").str.replace(r"(_v[0-9]+)+$", "").alias("name"),
            pl.col("name").alias("raw_name"),
            pl.lit(False).alias("is_backtrace"),
            _global("pid", "tid").alias("global_tid"),
        ),
    )


@dataclass(frozen=True)
class Launches:
    """Which process launched GPU work: by correlation id (``correlation_id, launch_pid``,
    for the ids exactly one process's API calls carry), else the trace's only process with
    host events (None when it has several); the ids several processes' calls carry."""

    by_id: pl.DataFrame
    only: int | None
    shared_ids: pl.Series


def _launching_process(runtime: pl.DataFrame, host_pids: pl.Series) -> Launches:
    per_id = (
        runtime.filter(pl.col("correlation_id").is_not_null())
        .group_by("correlation_id")
        .agg(pl.col("pid").min().alias("launch_pid"), pl.col("pid").n_unique().alias("n"))
    )
    return Launches(
        per_id.filter(pl.col("n") == 1).drop("n"),
        int(host_pids[0]) if host_pids.len() == 1 else None,
        per_id.filter(pl.col("n") > 1)["correlation_id"],
    )


def _gpu_op(raw: pa.Table, origin: int, launches: Launches) -> pl.DataFrame:
    """GPU operations with their times and their launching process (NULL where the id is
    shared by several processes' calls, or matches none in a trace of several processes)."""
    shared = pl.col("correlation_id").is_in(launches.shared_ids.implode())
    frame = _frame(raw).join(
        launches.by_id, on="correlation_id", how="left", maintain_order="left"
    )
    return frame.with_columns(
        (pl.col("ts") - origin).alias("start"),
        (pl.col("ts") + pl.col("dur") - origin).alias("end"),
        pl.col("dur").alias("duration"),
        pl.when(shared.fill_null(False))
        .then(None)
        .otherwise(pl.col("launch_pid").fill_null(pl.lit(launches.only, pl.Int64)))
        .alias("pid"),
    ).with_columns(_global("pid").alias("global_pid"))


def _kernels(raw: pa.Table, origin: int, launches: Launches) -> pl.DataFrame:
    frame = _gpu_op(raw, origin, launches)
    names = frame["name"].drop_nulls().unique()
    short = {n: short_kernel_name(n) for n in names.to_list()}
    return _conform(
        "kernels",
        frame.with_columns(
            pl.col("name").alias("demangled_name"),
            pl.col("name").replace_strict(short, default=None, return_dtype=pl.String).alias("short_name"),
        ),
    )


_MEMCPY_NAME = re.compile(r"^Memcpy (\S+) \((.+) -> (.+)\)$")
_MEMSET_NAME = re.compile(r"^Memset \((.+)\)$")


def _memory_kind(text: str | None) -> str | None:
    if text is None:
        return None
    kind = text.strip().lower()
    return kind if kind in _MEMORY_NAMES else "unknown"


@cache
def _copy_parts(name: str) -> tuple[int | None, str | None, str | None, str | None]:
    """(copy kind code, direction, source and destination memory kinds) of a Kineto copy's
    name, ``Memcpy HtoD (Pageable -> Device)``."""
    found = _MEMCPY_NAME.match(name)
    if found is None:
        return None, None, None, None
    direction = found.group(1)
    code = _COPY_CODES.get(direction, 0)
    return code, COPY_KINDS[code], _memory_kind(found.group(2)), _memory_kind(found.group(3))


def _memcpy(raw: pa.Table, origin: int, launches: Launches) -> pl.DataFrame:
    frame = _gpu_op(raw, origin, launches)
    parts = [
        {"name": n, "copy_kind": c, "copy_kind_name": d, "src_kind": s, "dst_kind": t}
        for n in frame["name"].drop_nulls().unique().to_list()
        for c, d, s, t in [_copy_parts(n)]
    ]
    lookup = pl.DataFrame(
        parts,
        schema={"name": pl.String, "copy_kind": pl.Int64, "copy_kind_name": pl.String,
                "src_kind": pl.String, "dst_kind": pl.String},
    )  # fmt: skip
    return _conform("memcpy", frame.join(lookup, on="name", how="left", maintain_order="left"))


def _memset(raw: pa.Table, origin: int, launches: Launches) -> pl.DataFrame:
    frame = _gpu_op(raw, origin, launches)
    return _conform(
        "memset",
        frame.with_columns(
            pl.col("name").str.extract(_MEMSET_NAME.pattern, 1).str.strip_chars().str.to_lowercase()
            .alias("mem_kind_raw"),
        ).with_columns(
            pl.when(pl.col("mem_kind_raw").is_in(sorted(_MEMORY_NAMES)))
            .then(pl.col("mem_kind_raw"))
            .when(pl.col("mem_kind_raw").is_not_null())
            .then(pl.lit("unknown"))
            .alias("mem_kind"),
        ),
    )  # fmt: skip


def _sync(raw: pa.Table, origin: int, launches: Launches) -> pl.DataFrame:
    return _conform("sync", _gpu_op(raw, origin, launches))


@cache
def short_kernel_name(name: str) -> str:
    """A kernel's function name, as nsys's ``shortName``: the demangled name without its
    parameter list, template arguments, return type and namespaces
    (``void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)`` ->
    ``vectorized_elementwise_kernel``)."""
    text = name.strip()
    for close, open_ in ((")", "("), (">", "<")):
        if text.endswith(close):
            depth = 0
            for i in range(len(text) - 1, -1, -1):
                depth += {close: 1, open_: -1}.get(text[i], 0)
                if depth == 0:
                    text = text[:i].rstrip()
                    break
    last = text.rsplit("::", 1)[-1].split()
    return last[-1] if last else name


# --------------------------------------------------------------------------- names, devices


def _host_pids(raw: Mapping[str, pa.Table]) -> pl.Series:
    """The processes with host events (ranges or API calls), in order."""
    pids = [_frame(raw[kind]).lazy().select("pid") for kind in ("ranges", "runtime")]
    return pl.concat(pids).drop_nulls().unique().sort("pid").collect()["pid"]


def _processes(raw: pa.Table, pids: pl.Series) -> pl.DataFrame:
    first = _frame(raw).unique("pid", keep="first", maintain_order=True)
    frame = pids.to_frame().join(first, on="pid", how="left")
    return _conform("processes", frame.with_columns(_global("pid").alias("global_pid")))


def _threads(raw: pa.Table, pids: pl.Series) -> pl.DataFrame:
    frame = _frame(raw).filter(pl.col("pid").is_in(pids.implode())).unique(
        ["pid", "tid"], keep="first", maintain_order=True
    )
    return _conform("threads", frame.with_columns(_global("pid", "tid").alias("global_tid")))


def _gpus(metadata: Mapping[str, object]) -> pl.DataFrame:
    """``deviceProperties`` (Kineto's list of CUDA devices) as ``gpus`` rows."""
    devices = metadata.get("deviceProperties")
    rows = []
    for device in devices if isinstance(devices, list) else []:
        if not isinstance(device, dict):
            continue

        def number(key: str, d: Mapping[str, object] = device) -> int | None:
            value = d.get(key)
            return value if type(value) is int else None

        name = device.get("name")
        rows.append(
            {
                "device_id": number("id"),
                "name": name if isinstance(name, str) else None,
                "sm_count": number("numSms"),
                "total_memory": number("totalGlobalMem"),
                "compute_major": number("computeMajor"),
                "compute_minor": number("computeMinor"),
            }
        )
    frame = pl.DataFrame(
        rows,
        schema={"device_id": pl.Int64, "name": pl.String, "sm_count": pl.Int64,
                "total_memory": pl.Int64, "compute_major": pl.Int64, "compute_minor": pl.Int64},
    )  # fmt: skip
    return _conform("gpus", frame)


# --------------------------------------------------------------------------- all tables


@dataclass(frozen=True)
class Model:
    """The model tables of one trace, the time origin subtracted from every time, and the GPU
    operations whose launching process is unknown because several processes' calls carry
    their correlation id."""

    tables: dict[str, pa.Table]
    origin: int
    shared_launches: int


def model_tables(raw: Mapping[str, pa.Table], metadata: Mapping[str, object]) -> Model:
    """The fourteen model tables (Arrow, typed as the nsys reader types them) of one trace's
    raw columns (:class:`~specnsys.readers.kineto.events.RawEvents`) and its top-level
    *metadata*."""
    origin = time_origin(raw)
    pids = _host_pids(raw)
    runtime = _runtime(raw["runtime"], origin)
    launches = _launching_process(runtime, pids)
    gpu = {
        "kernels": _kernels(raw["kernels"], origin, launches),
        "memcpy": _memcpy(raw["memcpy"], origin, launches),
        "memset": _memset(raw["memset"], origin, launches),
        "sync": _sync(raw["sync"], origin, launches),
    }
    built = {
        "threads": _threads(raw["threads"], pids),
        "processes": _processes(raw["processes"], pids),
        "nvtx": _nvtx(raw["ranges"], origin),
        "runtime": runtime,
        **gpu,
        "gpus": _gpus(metadata),
    }
    tables = {}
    for name in MODEL_TABLES:
        frame = built.get(name)
        if frame is None:
            frame = pl.DataFrame(schema=_schema(name))
        tables[name] = _arrow(name, frame)
    shared = launches.shared_ids.implode()
    unknown = sum(
        frame.filter(pl.col("correlation_id").is_in(shared).fill_null(False)).height
        for frame in gpu.values()
    )
    return Model(tables, origin, unknown)


def _arrow(table: str, frame: pl.DataFrame) -> pa.Table:
    """*frame* as Arrow with the declared schema as stored (plain ``string`` text, as the
    cache reads back; see :meth:`specnsys.model.TableSchema.stored_schema`)."""
    return frame.to_arrow().cast(table_schema(table).stored_schema())
