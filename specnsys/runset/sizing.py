"""How many traces ``collect`` analyses at once on this machine: one per usable core
(:mod:`specnsys.cores`), fewer where the memory for that many analyses of its largest trace
is not there (:mod:`specnsys.memory_room`).

Each worker holds one analysis, and a pool fed the largest traces first starts with every
worker on one of the largest: by default (no ``--workers``) the pool is no wider than the
available memory holds analyses of the largest trace, so that the kernel's OOM killer, which
may end another program than specnsys, is not what sizes it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANALYSIS_MEMORY_FIXED",
    "ANALYSIS_MEMORY_PER_BYTE",
    "PoolSize",
    "analysis_memory",
    "pool_size",
]

#: An analysis's memory, as the benches hold it to: a fixed part (the interpreter, Polars,
#: DuckDB, Arrow) and a multiple of the export's size on disk. The cold peaks measured
#: against it were 0.84-1.10x of it from 0.24 to 2.7 GB (bench/scale.py; docs/performance.md).
ANALYSIS_MEMORY_FIXED = 300 << 20
ANALYSIS_MEMORY_PER_BYTE = 1.5


def analysis_memory(export_bytes: int) -> int:
    """The memory one analysis of an export of *export_bytes* is expected to peak at."""
    return ANALYSIS_MEMORY_FIXED + int(ANALYSIS_MEMORY_PER_BYTE * max(export_bytes, 0))


@dataclass(frozen=True)
class PoolSize:
    """The workers for a pool, and why they are fewer than the cores when they are."""

    workers: int
    cores: int
    """The workers one per usable core would give (no more than the traces)."""
    largest_bytes: int
    available_bytes: int | None

    @property
    def note(self) -> str | None:
        """One line saying why the pool is narrower than the cores (None when it is not)."""
        if self.workers >= self.cores or self.available_bytes is None:
            return None
        return (
            f"collect runs {self.workers} worker{'s' if self.workers != 1 else ''}, not "
            f"{self.cores} (one per usable core): {self._sizes()}; --workers sets the count"
        )

    def asked_note(self, asked: int, jobs: int) -> str | None:
        """One line saying that *asked* workers (``--workers``) on *jobs* traces run more
        analyses at once than the memory holds (None when they do not): they run as asked."""
        if self.available_bytes is None:
            return None
        fit = max(1, self.available_bytes // analysis_memory(self.largest_bytes))
        if min(asked, jobs) <= fit:
            return None
        return (
            f"--workers {asked}: more analyses at once than the memory holds, {fit} "
            f"({self._sizes()}); a worker the system kills for memory is retried alone"
        )

    def _sizes(self) -> str:
        each = analysis_memory(self.largest_bytes)
        return (
            f"an analysis of the largest trace ({self.largest_bytes / 1e9:.2f} GB) may take "
            f"{each / 2**30:.1f} GiB, and {(self.available_bytes or 0) / 2**30:.1f} GiB is "
            "available"
        )


def pool_size(cores: int, largest_bytes: int, available_bytes: int | None) -> PoolSize:
    """At most *cores* workers, no more than *available_bytes* holds analyses of an export of
    *largest_bytes* (:func:`analysis_memory`), at least one; *available_bytes* None (not
    known): *cores*."""
    workers = max(1, cores)
    if available_bytes is not None:
        workers = max(1, min(workers, available_bytes // analysis_memory(largest_bytes)))
    return PoolSize(workers, max(1, cores), largest_bytes, available_bytes)
