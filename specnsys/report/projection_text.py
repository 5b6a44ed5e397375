"""Render the per-NVTX-range projection and the kernel summary (``specnsys ranges|kernels``).

Pure formatting of frames computed in :mod:`specnsys.attribution.projection` and
:mod:`specnsys.attribution.kernel_summary`.
"""

from __future__ import annotations

import json

import polars as pl

_MS = 1e6


def _clip(name: str | None, width: int) -> str:
    name = name or "(unnamed)"
    return name if len(name) <= width else name[: width - 1] + "…"


def _cells(*cells: tuple[str, int]) -> str:
    """Right-aligned table cells of the given widths; a value wider than its column (sums
    reach 2**64 ns) keeps one space before it instead of running into its neighbour."""
    return "".join(text.rjust(width) if len(text) < width else f" {text}" for text, width in cells)


def render_frame_json(frame: pl.DataFrame, **header: object) -> str:
    """``{header..., "rows": [...]}``: every row, nothing rounded, for scripts."""
    return json.dumps({**header, "rows": frame.to_dicts()}, indent=2)


def render_ranges_text(summary: pl.DataFrame, max_rows: int = 30) -> str:
    """Per range name: instances, CPU time, projected GPU span and busy time, GPU ops."""
    if summary.height == 0:
        return "no NVTX range launched GPU work (nothing to project)"
    lines = [
        "NVTX ranges projected onto the GPU (nsys nvtxgpuproj semantics: an op counts for every",
        "range whose thread launched it inside the range); span = first op start to last op end,",
        "busy = union of the ops' intervals (never more than the span)",
        "",
        f"{'range':<50}{'style':>9}{'count':>8}{'CPU ms':>11}{'span ms':>11}{'busy ms':>11}"
        f"{'GPU ops':>9}",
    ]
    for r in summary.head(max_rows).iter_rows(named=True):
        lines.append(
            f"{_clip(r['name'], 48):<50}"
            + _cells(
                (r["style"], 9), (f"{r['instances']:,}", 8), (f"{r['cpu_ns'] / _MS:.3f}", 11),
                (f"{r['proj_ns'] / _MS:.3f}", 11), (f"{r['gpu_busy_ns'] / _MS:.3f}", 11),
                (f"{r['gpu_ops']:,}", 9),
            )
        )  # fmt: skip
    if summary.height > max_rows:
        lines.append(f"({summary.height - max_rows} more range names; --json lists all)")
    return "\n".join(lines)


def render_kernels_text(summary: pl.DataFrame, max_rows: int = 30) -> str:
    """Per kernel (name, grid, block): share of summed kernel time, total, count, avg; a
    summary grouped by name only (``kernels --by``) has no grid and block columns."""
    if summary.height == 0:
        return "no CUDA kernels in this trace"
    per_config = "grid_x" in summary.columns
    total = int(summary["total_ns"].sum())
    lines = [
        f"CUDA kernels: {int(summary['instances'].sum()):,} launches, {total / _MS:.3f} ms summed "
        "kernel time (share = of that sum, not of wall time; streams overlap)",
        "",
        f"{'share':>7}{'total ms':>11}{'count':>9}{'avg us':>10}"
        + (f"{'grid':>16}{'block':>14}" if per_config else "")
        + "  kernel",
    ]
    for r in summary.head(max_rows).iter_rows(named=True):
        config: tuple[tuple[str, int], ...] = ()
        if per_config:
            grid = f"{r['grid_x']}x{r['grid_y']}x{r['grid_z']}"
            block = f"{r['block_x']}x{r['block_y']}x{r['block_z']}"
            config = ((grid, 16), (block, 14))
        lines.append(
            _cells(
                (f"{r['share']:.1%}", 7), (f"{r['total_ns'] / _MS:.3f}", 11),
                (f"{r['instances']:,}", 9), (f"{r['avg_ns'] / 1e3:.2f}", 10), *config,
            )
            + f"  {_clip(r['name'], 70)}"
        )  # fmt: skip
    if summary.height > max_rows:
        lines.append(f"({summary.height - max_rows} more kernels; --json lists all)")
    return "\n".join(lines)
