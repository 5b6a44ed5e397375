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
import uuid
from typing import TYPE_CHECKING, TypedDict

import polars as pl

from specnsys.attribution.context import attribution_context
from specnsys.attribution.launch import gpu_ops_with_phase
from specnsys.metrics.events import Scope, mark_phases
from specnsys.vocabulary import TARGET_BYTES_MARK

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = [
    "DEFAULT_THRESHOLD_PCT", "Bandwidth", "MarkedBandwidth", "SampledBandwidth",
    "memory_bandwidth",
]


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
    devices = sorted({int(d) for d in ops["device_id"].drop_nulls().to_list()})
    ops_name = f"_specnsys_bw_ops_{uuid.uuid4().hex}"
    con.register(ops_name, ops.select("phase", "start", "end", "device_id").to_arrow())
    try:
        rows = con.execute(
            f"""
            WITH samples AS (
                SELECT timestamp AS t, device_id, sum(value)::DOUBLE AS pct
                FROM gpu_metrics
                WHERE list_contains($metrics, metric_name) AND timestamp >= $ws
                  AND timestamp < $we AND list_contains($devices, device_id)
                GROUP BY ALL
            ),
            running AS (
                SELECT DISTINCT s.t, s.device_id, s.pct, o.phase
                FROM samples s JOIN {ops_name} o
                  ON o.device_id = s.device_id AND o.start <= s.t AND s.t < o."end"
            ),
            weighted AS (
                SELECT *, 1.0 / count(*) OVER (PARTITION BY t, device_id) AS w FROM running
            )
            SELECT phase, sum(w) AS samples, sum(w * pct) / sum(w) AS mean_pct,
                   sum(w * (pct >= $thr)::INT) / sum(w) AS above,
                   (SELECT count(*) FROM samples) AS all_samples,
                   (SELECT count(*) FROM (SELECT DISTINCT t, device_id FROM running)) AS busy
            FROM weighted GROUP BY phase ORDER BY phase
            """,
            {
                "metrics": metric_names,
                "ws": scope.start_ns,
                "we": scope.end_ns,
                "devices": devices,
                "thr": threshold,
            },
        ).fetchall()
    finally:
        con.unregister(ops_name)
    if not rows:
        return None, "no GPU_METRICS samples fall on GPU work of the process in the window"
    peak = _device_bandwidth(trace, devices)
    by_phase: dict[str, SampledPhase] = {
        str(phase): {
            "samples": float(samples),
            "mean_pct": float(mean_pct),
            "fraction_above_threshold": float(above),
            "mean_bytes_per_s": None if peak is None else peak * float(mean_pct) / 100.0,
        }
        for phase, samples, mean_pct, above, _, _ in rows
    }
    return {
        "source": "gpu_metrics",
        "metrics": metric_names,
        "threshold_pct": threshold,
        "peak_bytes_per_s": peak,
        "device_ids": devices,
        "samples": int(rows[0][4]),
        "busy_samples": int(rows[0][5]),
        "by_phase": by_phase,
    }, None


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
        .agg(pl.col("value").sum().alias("bytes"), pl.len().alias("marks"))
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
        # Only this source needs every GPU op with its phase and device.
        # the analysis's context supplies the phase index and the attributed calls
        with attribution_context(trace, scope.rules, scope.context) as shared:
            ops = gpu_ops_with_phase(
                trace, rules=scope.rules, pid=scope.pid, window=(scope.start_ns, scope.end_ns),
                index=shared.phase_index(), runtime=shared.runtime(scope.pid),
            ).filter(pl.col("end") > pl.col("start"))  # fmt: skip
        result, why = _from_gpu_metrics(trace, scope, ops, threshold_pct)
        if result is not None:
            return result, None
        reasons.append(str(why))
    marked, why = _from_target_bytes(trace, scope, gpu_busy, devices)
    if marked is not None:
        return marked, None
    reasons.append(str(why))
    return None, "; ".join(reasons)
