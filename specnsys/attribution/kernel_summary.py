"""Per-kernel time summary, the semantics of NVIDIA's ``nsys stats -r gpukernsum``.

Kernels are grouped by demangled name, grid and block dimensions, as NVIDIA's report does;
``share`` is the kernel's fraction of the summed kernel time of the trace (not of wall time:
kernels on different streams overlap, so this is the denominator NVIDIA uses and says so).
tests/test_projection.py checks the figures against ``nsys stats`` on the real corpus.

``total_ns`` is a 128-bit integer (Polars ``Int128``): the ingest accepts times up to
+-2**60 ns, so one duration fits int64 but a sum of eight need not
(tests/test_reliability_numbers.py). Averages and spreads are floats, as in NVIDIA's report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["KERNEL_NAMES", "kernel_summary"]

_SQL = """
SELECT {keys},
       sum("end" - start)::HUGEINT AS total_ns,
       count(*)::BIGINT AS instances,
       avg("end" - start) AS avg_ns,
       median("end" - start) AS median_ns,
       min("end" - start)::BIGINT AS min_ns,
       max("end" - start)::BIGINT AS max_ns,
       stddev_samp("end" - start) AS stddev_ns
FROM kernels
WHERE start IS NOT NULL AND "end" >= start  -- malformed rows: skipped, as in attribution
GROUP BY ALL
"""

_PER_LAUNCH_CONFIG = (
    "coalesce(demangled_name, short_name) AS name, "
    "grid_x, grid_y, grid_z, block_x, block_y, block_z"
)
"""The default grouping: NVIDIA's gpukernsum rows (demangled name, grid, block)."""


KERNEL_NAMES = {
    "short": "coalesce(short_name, demangled_name)",
    "demangled": "coalesce(demangled_name, short_name)",
}
"""``kernels --by``: one row per kernel name, every launch configuration together -- the short
name (``ampere_sgemm_128x64_nn``, template arguments and parameters dropped, so instantiations
of one kernel merge) or the demangled name (each instantiation its own row)."""


def kernel_summary(trace: Trace, by: str | None = None) -> pl.DataFrame:
    """One row per (kernel name, grid, block), largest total time first, with its share; with
    *by* (a key of :data:`KERNEL_NAMES`), one row per kernel name, without grid and block."""
    keys = _PER_LAUNCH_CONFIG
    if by is not None:
        if by not in KERNEL_NAMES:
            raise ValueError(f"by must be one of {sorted(KERNEL_NAMES)}, not {by!r}")
        keys = f"{KERNEL_NAMES[by]} AS name"
    # read through the Arrow C stream (``.pl()`` would import pyarrow, a quarter second);
    # DuckDB hands HUGEINT over as Decimal(38, 0), Int128 keeps it an exact integer
    frame = pl.DataFrame(trace.connection.sql(_SQL.format(keys=keys)))
    frame = frame.with_columns(pl.col("total_ns").cast(pl.Int128))
    total = int(frame["total_ns"].sum()) if frame.height else 0
    # Divided by a column of the total, not by the scalar: Polars divides by a scalar as a
    # product with its reciprocal on some layouts, one unit in the last place off, so the
    # same trace's share could differ in its last digit between runs.
    share = (
        pl.col("total_ns").cast(pl.Float64)
        / pl.lit(pl.repeat(float(total), frame.height, eager=True))
        if total
        else pl.lit(0.0)
    )
    return frame.with_columns(share.alias("share")).sort(
        ["total_ns", "name"], descending=[True, False]
    )
