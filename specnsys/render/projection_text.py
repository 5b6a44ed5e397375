"""Render the per-NVTX-range projection and the kernel summary (``specnsys ranges|kernels``).

Pure formatting of frames computed in :mod:`specnsys.attribution.projection` and
:mod:`specnsys.attribution.kernel_summary`.
"""

from __future__ import annotations

import json

import polars as pl

_MS = 1e6


#: Range and kernel names longer than these are cut with "…" in a terminal's table
#: (``--wide``, or a stdout that is not a terminal: whole, as ``nsys stats`` prints them).
RANGE_NAME_WIDTH = 48
KERNEL_NAME_WIDTH = 70


def _clip(name: str | None, width: int | None) -> str:
    name = name or "(unnamed)"
    return name if width is None or len(name) <= width else name[: width - 1] + "…"


def _cells(*cells: tuple[str, int]) -> str:
    """Right-aligned table cells of the given widths; a value wider than its column (sums
    reach 2**64 ns) keeps one space before it instead of running into its neighbour."""
    return "".join(text.rjust(width) if len(text) < width else f" {text}" for text, width in cells)


def render_frame_json(frame: pl.DataFrame, **header: object) -> str:
    """``{header..., "rows": [...]}``: every row, nothing rounded, for scripts."""
    return json.dumps({**header, "rows": frame.to_dicts()}, indent=2)


def render_ranges_text(
    summary: pl.DataFrame, max_rows: int = 30, name_width: int | None = RANGE_NAME_WIDTH
) -> str:
    """Per range name: instances, CPU time, projected GPU span and busy time, GPU ops; names
    longer than *name_width* cut, or whole when it is None."""
    if summary.height == 0:
        return "no NVTX range launched GPU work (nothing to project)"
    shown = summary.head(max_rows)
    names = [_clip(n, name_width) for n in shown["name"]]
    column = max([50, *(len(n) + 2 for n in names)])
    lines = [
        "NVTX ranges projected onto the GPU (nsys nvtxgpuproj semantics: an op counts for every",
        "range whose thread launched it inside the range); span = first op start to last op end,",
        "busy = union of the ops' intervals (never more than the span)",
        "",
        f"{'range':<{column}}{'style':>9}{'count':>8}{'CPU ms':>11}{'span ms':>11}{'busy ms':>11}"
        f"{'GPU ops':>9}",
    ]
    for name, r in zip(names, shown.iter_rows(named=True), strict=True):
        lines.append(
            f"{name:<{column}}"
            + _cells(
                (r["style"], 9), (f"{r['instances']:,}", 8), (f"{r['cpu_ns'] / _MS:.3f}", 11),
                (f"{r['proj_ns'] / _MS:.3f}", 11), (f"{r['gpu_busy_ns'] / _MS:.3f}", 11),
                (f"{r['gpu_ops']:,}", 9),
            )
        )  # fmt: skip
    if summary.height > max_rows:
        lines.append(f"({summary.height - max_rows} more range names; --json lists all)")
    return "\n".join(lines)


def render_kernels_text(
    summary: pl.DataFrame, max_rows: int = 30, name_width: int | None = KERNEL_NAME_WIDTH
) -> str:
    """Per kernel (name, grid, block): share of summed kernel time, total, count, avg; a
    summary grouped by name only (``kernels --by``) has no grid and block columns. Names
    longer than *name_width* are cut, or whole when it is None (the last column)."""
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
            + f"  {_clip(r['name'], name_width)}"
        )  # fmt: skip
    if summary.height > max_rows:
        lines.append(f"({summary.height - max_rows} more kernels; --json lists all)")
    return "\n".join(lines)
