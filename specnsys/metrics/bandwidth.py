"""Memory bandwidth per phase (docs/design.md#metrics), from the best source the trace has.

1. ``GPU_METRICS`` (``nsys profile --gpu-metrics-devices=...``): DRAM read + write
   throughput (percent of peak) sampled on the device. Each sample taken while GPU work of
   the process runs belongs to the phase(s) that launched that work (split evenly when
   several phases run at once, as in the exclusive timeline); per phase: the mean throughput
   and the fraction of its samples at or above a threshold. Samples are periodic, so sample
   fractions are time fractions.
2. ``target_bytes`` marks (bytes one target forward reads, emitted inside its range) against
   the GPU's ``memoryBandwidth`` from ``TARGET_INFO_GPU``: achieved bytes/s per phase =
   marked bytes / the phase's GPU busy time (the union of its GPU work: the time the device
   spent on it).
3. Otherwise not available, with the reason -- never a guess shown as a number. A CPU-only
   capture has no device bandwidth to measure at all.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypedDict

import polars as pl

from specnsys.attribution.context import attribution_context
from specnsys.attribution.intervals import islands_frame
from specnsys.attribution.launch import attributed_gpu_ops
from specnsys.metrics.events import Scope, mark_phases
from specnsys.vocabulary import TARGET_BYTES_MARK

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "DEFAULT_THRESHOLD_PCT", "Bandwidth", "MarkedBandwidth", "SampledBandwidth",
    "memory_bandwidth", "metric_ops", "running_phases",
]

_I64 = pl.Int64


class SampledPhase(TypedDict):
    """A phase's GPU_METRICS samples: their mean DRAM throughput (percent of peak), the
    fraction at or above the threshold, and the mean in bytes/s when the peak is known."""

    samples: float
    mean_pct: float
    fraction_above_threshold: float
    mean_bytes_per_s: float | None


class SampledBandwidth(TypedDict):
    """Bandwidth from GPU_METRICS samples (``source`` ``gpu_metrics``)."""

    source: str
    metrics: list[str]
    threshold_pct: float
    peak_bytes_per_s: float | None
    device_ids: list[int]
    samples: int
    busy_samples: int
    by_phase: dict[str, SampledPhase]


class MarkedPhase(TypedDict):
    """A phase's ``target_bytes`` marks over its GPU busy time, and that rate's share of peak."""

    bytes: int
    marks: int
    gpu_busy_ns: int
    bytes_per_s: float | None
    fraction_of_peak: float | None


class MarkedBandwidth(TypedDict):
    """Bandwidth from the ``target_bytes`` marks (``source`` ``target_bytes``)."""

    source: str
    peak_bytes_per_s: float
    time_basis: str
    device_ids: list[int]
    by_phase: dict[str, MarkedPhase]


#: ``Analysis.bandwidth``: from whichever source the trace has (``source`` says which).
Bandwidth = SampledBandwidth | MarkedBandwidth

DEFAULT_THRESHOLD_PCT = 80.0
"""DRAM throughput (percent of peak) from which a sample counts as bandwidth-saturated."""

_READ_WRITE = r"^DRAM (Read|Write) Bandwidth"
_ANY_DRAM = r"^DRAM.*Bandwidth"


def _device_bandwidth(trace: Trace, device_ids: list[int]) -> float | None:
    """Peak memory bandwidth (bytes/s) of the device(s) the process used, if recorded."""
    rows = trace.connection.execute(
        "SELECT device_id, memory_bandwidth FROM gpus WHERE memory_bandwidth > 0"
    ).fetchall()
    known = {int(d): float(b) for d, b in rows if d is not None}
    picked = {known[d] for d in device_ids if d in known}
    if len(picked) == 1:
        return picked.pop()
    if not device_ids and len(set(known.values())) == 1:
        return next(iter(known.values()))
    return None


def _devices(trace: Trace, scope: Scope) -> list[int]:
    """Devices that ran GPU work of the process inside the window."""
    rows = trace.connection.execute(
        """SELECT DISTINCT device_id FROM (
               SELECT device_id, pid, start, "end" FROM kernels
               UNION ALL SELECT device_id, pid, start, "end" FROM memcpy
               UNION ALL SELECT device_id, pid, start, "end" FROM memset)
           WHERE pid = $pid AND start < $we AND "end" > $ws AND device_id IS NOT NULL""",
        {"pid": scope.pid, "ws": scope.start_ns, "we": scope.end_ns},
    ).fetchall()
    return sorted(int(r[0]) for r in rows)


def _from_gpu_metrics(
    trace: Trace, scope: Scope, ops: pl.DataFrame, threshold: float
) -> tuple[SampledBandwidth | None, str | None]:
    con = trace.connection
    names = [
        r[0]
        for r in con.execute(
            "SELECT DISTINCT metric_name FROM gpu_metrics WHERE metric_name IS NOT NULL"
        ).fetchall()
    ]
    pattern = _READ_WRITE if any(_matches(n, _READ_WRITE) for n in names) else _ANY_DRAM
    metric_names = sorted(n for n in names if _matches(n, pattern))
    if not metric_names:
        shown = ", ".join(sorted(names)[:6]) or "none"
        return None, f"GPU_METRICS has no DRAM bandwidth metric (metrics: {shown})"
    devices = ops["device_id"].drop_nulls().unique().sort().cast(_I64).to_list()
    samples = _samples(trace, scope, metric_names, devices)
    running = running_phases(samples, ops)
    if running.height == 0:
        return None, "no GPU_METRICS samples fall on GPU work of the process in the window"
    peak = _device_bandwidth(trace, devices)
    by_phase: dict[str, SampledPhase] = {
        str(phase): {
            "samples": float(n),
            "mean_pct": float(mean_pct),
            "fraction_above_threshold": float(above),
            "mean_bytes_per_s": None if peak is None else peak * float(mean_pct) / 100.0,
        }
        for phase, n, mean_pct, above in _per_phase(running, threshold).iter_rows()
    }
    return {
        "source": "gpu_metrics",
        "metrics": metric_names,
        "threshold_pct": threshold,
        "peak_bytes_per_s": peak,
        "device_ids": devices,
        "samples": samples.height,
        "busy_samples": running.select("t", "device_id").n_unique(),
        "by_phase": by_phase,
    }, None


def _samples(
    trace: Trace, scope: Scope, metric_names: list[str], devices: list[int]
) -> pl.DataFrame:
    """The window's samples of *devices* (``t, device_id, pct``): per instant and device, the
    chosen metrics' percentages summed (DRAM read + write: the share of its peak in use)."""
    return (
        trace.table("gpu_metrics")
        .filter(
            pl.col("metric_name").is_in(metric_names)
            & (pl.col("timestamp") >= scope.start_ns)
            & (pl.col("timestamp") < scope.end_ns)
            & pl.col("device_id").is_in(devices)
        )
        .group_by(pl.col("timestamp").cast(_I64).alias("t"), pl.col("device_id").cast(_I64))
        .agg(pl.col("value").cast(pl.Float64).sum().alias("pct"))
        .collect()
    )


def running_phases(samples: pl.DataFrame, ops: pl.DataFrame) -> pl.DataFrame:
    """Each sample (``t, device_id, pct``) once per phase with GPU work running at its instant
    on its device (``[start, end)`` holds ``t``; *ops*: ``phase, start, end, device_id``):
    ``t, device_id, pct, phase``, in no particular order.

    Per device and phase, the ops are merged into disjoint islands first; a sample then runs
    in that phase when the last island starting at or before it has not ended: an as-of join
    per (device, phase), a sorted merge. The interval join it replaces (each sample against
    every op of its device) took 49 s for 100k samples and 200k kernels
    (docs/performance.md#issue-35-twelfth-session-gpu-metrics-samples-against-the-ops)."""
    schema = {"t": _I64, "device_id": _I64, "pct": pl.Float64, "phase": pl.String}
    by_device = {
        key[0]: part.sort("t") for key, part in samples.partition_by("device_id", as_dict=True).items()
    }
    parts = [pl.DataFrame(schema=schema)]
    busy = ops.filter(pl.col("device_id").is_not_null() & (pl.col("end") > pl.col("start")))
    for (device, phase), mine in busy.partition_by("device_id", "phase", as_dict=True).items():
        mine_samples = by_device.get(device)
        if mine_samples is None:
            continue
        islands = islands_frame(
            mine.select(pl.lit(0).alias("k"), pl.col("start").alias("s"), pl.col("end").alias("e")),
            "k",
        ).select(pl.col("a").cast(_I64), pl.col("b").cast(_I64)).sort("a")
        hit = mine_samples.join_asof(islands, left_on="t", right_on="a", strategy="backward")
        parts.append(
            hit.filter(pl.col("t") < pl.col("b")).select(
                "t", "device_id", "pct", pl.lit(phase, pl.String).alias("phase")
            )
        )
    return pl.concat(parts)


def _per_phase(running: pl.DataFrame, threshold: float) -> pl.DataFrame:
    """Per phase (sorted): its samples, each weighted by 1 / the phases running at its instant
    (a sample two phases share counts half to each), their weighted mean percentage and the
    weighted fraction at or above *threshold*."""
    w = 1.0 / pl.len().over("t", "device_id")
    return (
        running.with_columns(w.alias("w"))
        .group_by("phase")
        .agg(
            pl.col("w").sum().alias("samples"),
            ((pl.col("w") * pl.col("pct")).sum() / pl.col("w").sum()).alias("mean_pct"),
            ((pl.col("w") * (pl.col("pct") >= threshold)).sum() / pl.col("w").sum()).alias(
                "above"
            ),
        )
        .sort("phase")
    )


def metric_ops(trace: Trace, scope: Scope) -> pl.DataFrame:
    """The process's GPU ops in the window that the samples fall on: ``op_kind, start, end,
    phase, device_id``, empty ones dropped.

    Only the GPU_METRICS source needs every op with its phase and device: the lean launch
    attribution with the device (the detailed frame, every op's names and ids sorted, took
    1.8 s and 1.3 GiB more at 2M kernels); the analysis's context, when *scope* has one,
    supplies the phase index and the attributed calls."""
    with attribution_context(trace, scope.rules, scope.context) as shared:
        return attributed_gpu_ops(
            trace, shared.phase_index(), pid=scope.pid, window=(scope.start_ns, scope.end_ns),
            runtime=shared.runtime(scope.pid, details=False), devices=True,
        ).filter(pl.col("end") > pl.col("start"))  # fmt: skip


def _matches(name: str, pattern: str) -> bool:
    return re.search(pattern, name) is not None


def _from_target_bytes(
    trace: Trace, scope: Scope, gpu_busy: dict[str, int], devices: list[int]
) -> tuple[MarkedBandwidth | None, str | None]:
    marked = mark_phases(trace, scope, TARGET_BYTES_MARK)
    if marked.height == 0:
        return None, (
            "no GPU_METRICS (capture with --gpu-metrics-devices) and no target_bytes marks "
            "(bytes per target forward) in the window"
        )
    peak = _device_bandwidth(trace, devices)
    if peak is None:
        return None, (
            "target_bytes marks are present but TARGET_INFO_GPU records no memory bandwidth "
            "for the GPU this process used"
        )
    per = (
        marked.with_columns(pl.col("phase").fill_null("unannotated"))
        .group_by("phase")
        # 128-bit: a 64-bit sum wraps past 2**63 bytes (a hostile export's marks)
        .agg(pl.col("value").cast(pl.Int128).sum().alias("bytes"), pl.len().alias("marks"))
        .sort("phase")
    )
    by_phase: dict[str, MarkedPhase] = {}
    for phase, nbytes, n in per.iter_rows():
        busy = int(gpu_busy.get(phase, 0))
        rate = nbytes / (busy / 1e9) if busy > 0 else None
        by_phase[phase] = {
            "bytes": int(nbytes),
            "marks": int(n),
            "gpu_busy_ns": busy,
            "bytes_per_s": rate,
            "fraction_of_peak": None if rate is None else rate / peak,
        }
    return {
        "source": "target_bytes",
        "peak_bytes_per_s": peak,
        "time_basis": "gpu_busy_ns (union of the phase's GPU work)",
        "device_ids": devices,
        "by_phase": by_phase,
    }, None


def memory_bandwidth(
    trace: Trace,
    scope: Scope,
    gpu_busy: dict[str, int],
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
) -> tuple[Bandwidth | None, str | None]:
    """Bandwidth per phase, or (None, reason). *gpu_busy* maps phase -> GPU busy ns."""
    caps = trace.summary.capabilities
    if not caps["gpu_activity"].available:
        return None, (
            "no GPU work in this trace (a CPU-only run, or captured without CUDA tracing), so "
            "there is no device memory bandwidth to measure: neither GPU_METRICS nor bytes "
            "against a GPU's peak apply"
        )
    devices = _devices(trace, scope)
    reasons = []
    if caps["gpu_metrics"].available:
        result, why = _from_gpu_metrics(trace, scope, metric_ops(trace, scope), threshold_pct)
        if result is not None:
            return result, None
        reasons.append(str(why))
    marked, why = _from_target_bytes(trace, scope, gpu_busy, devices)
    if marked is not None:
        return marked, None
    reasons.append(str(why))
    return None, "; ".join(reasons)
