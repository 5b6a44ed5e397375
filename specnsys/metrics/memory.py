"""Peak device memory per phase: does verification's wider batch squeeze the KV cache?

The speculative verify pass runs the target over k + 1 positions per sequence, so its
activations are k + 1 times wider than a baseline forward's; on a full GPU that memory comes
out of the KV cache. Sources, best first:

1. CUDA memory usage events (``--cuda-memory-usage=true``): not part of specnsys's trace
   model yet, so an export that has them says so in the reason instead of being ignored
   silently.
2. ``device_memory_peak`` marks: the workload resets the allocator's peak when a phase range
   opens and marks ``torch.cuda.max_memory_allocated`` just before it closes (CUDA runs
   only); each mark belongs to the innermost phase open on its thread. Per phase: the
   largest peak and the mean of the per-range peaks.
3. Otherwise not available, with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import polars as pl

from specnsys.metrics.events import Scope, mark_phases
from specnsys.vocabulary import DEVICE_MEMORY_PEAK_MARK

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["DeviceMemory", "PhasePeak", "device_memory"]


class PhasePeak(TypedDict):
    """One phase's largest peak, the mean of its per-range peaks, and its marked ranges."""

    peak_bytes: int
    mean_peak_bytes: float
    ranges: int


class DeviceMemory(TypedDict):
    """Peak device memory per phase (``Analysis.device_memory``), and the GPU's total."""

    source: str
    total_memory_bytes: int | None
    by_phase: dict[str, PhasePeak]

_EVENTS_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"


def device_memory(trace: Trace, scope: Scope) -> tuple[DeviceMemory | None, str | None]:
    """Peak device memory per phase, or (None, reason)."""
    marked = mark_phases(trace, scope, DEVICE_MEMORY_PEAK_MARK)
    if marked.height:
        per = (
            marked.with_columns(pl.col("phase").fill_null("unannotated"))
            .group_by("phase")
            .agg(
                pl.col("value").max().alias("peak_bytes"),
                pl.col("value").mean().alias("mean_peak_bytes"),
                pl.len().alias("ranges"),
            )
            .sort("phase")
        )
        total = trace.connection.execute(
            "SELECT max(total_memory) FROM gpus WHERE total_memory > 0"
        ).fetchall()
        return {
            "source": "device_memory_peak marks",
            "total_memory_bytes": None if not total or total[0][0] is None else int(total[0][0]),
            "by_phase": {
                str(phase): {
                    "peak_bytes": int(peak),
                    "mean_peak_bytes": float(mean),
                    "ranges": int(n),
                }
                for phase, peak, mean, n in per.iter_rows()
            },
        }, None
    has_events = _EVENTS_TABLE in trace.summary.source_tables
    if not trace.summary.capabilities["gpu_activity"].available:
        return None, (
            "no GPU work in this trace (a CPU-only run, or captured without CUDA tracing), so "
            "device memory does not apply"
        )
    if has_events:
        return None, (
            f"the export has {_EVENTS_TABLE} but specnsys does not ingest them yet, and the "
            "workload recorded no device_memory_peak marks"
        )
    return None, (
        "no CUDA memory usage events (capture with --cuda-memory-usage=true) and no "
        "device_memory_peak marks in the window"
    )
