"""How many cores this process may use: what sizes specnsys's own pools of threads and workers.

``os.cpu_count()`` counts every core of the host. A job pinned to a few of them (``taskset``,
a Slurm allocation, ``docker --cpuset-cpus``) or given a CPU quota (``docker --cpus``, a
Kubernetes limit: a cgroup's ``cpu.max``) gets less: sized by the host's count, ``collect``
started a worker per host core on a 4-core allocation of a 64-core node, each holding an
analysis's memory, and the export reader as many threads, all time-sliced on the few cores
granted. Polars sizes its own pool the same way (Rust's ``available_parallelism`` reads the
affinity and the cgroup quota); DuckDB is told its thread count from here.

A base module: the command line reads it before the analysis stack loads.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from specnsys.allocator import large_input_options, set_own_option
from specnsys.cgroups import CGROUP_ROOT, PROC_CGROUP, cgroup_values

__all__ = [
    "THREADS_VARIABLE",
    "cgroup_cpu_limit",
    "hold_to_threads",
    "set_worker_environment",
    "share_of_cores",
    "usable_cores",
    "worker_environment",
]

#: At most this many threads in each of specnsys's pools (the reader's, DuckDB's): what
#: ``collect`` gives each of its workers, so that workers sharing the cores do not each run a
#: pool as wide as all of them.
THREADS_VARIABLE = "SPECNSYS_THREADS"

def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, lowered to its cgroup's CPU
    quota (rounded up: a quota of 1.5 cores keeps two threads busy part of the time), at
    least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        cores = min(cores, max(1, math.ceil(limit)))
    cap = _threads_cap()
    if cap is not None:
        cores = min(cores, cap)
    return max(1, cores)


def _threads_cap() -> int | None:
    """:data:`THREADS_VARIABLE` as a positive count, else None: a value that is no plain
    ASCII number (``²`` is a digit to ``str.isdigit``), or too long for ``int``, is ignored."""
    given = os.environ.get(THREADS_VARIABLE, "")
    if not (given.isascii() and given.isdigit()) or len(given) > 9:
        return None
    return int(given) or None


def share_of_cores(workers: int) -> int:
    """The threads each of *workers* processes sharing this process's cores may run.

    One worker per core (``collect``'s default) leaves each worker one thread: pools as wide
    as all the cores in every worker time-slice their threads against each other's. On the
    sample traces two such workers took 2.6 % longer at the median, and 4 % more CPU, than
    two of one thread each (docs/performance.md#issue-35-tenth-session-how-the-cold-run-
    scales-with-cores-and-the-allocators-trade-at-three-sizes)."""
    return max(1, usable_cores() // max(1, workers))


def worker_environment(threads: int, largest_input_bytes: int = 0) -> dict[str, str]:
    """The variables that hold a worker process to *threads* threads: specnsys's own pools
    (:data:`THREADS_VARIABLE`) and Polars's (``POLARS_MAX_THREADS``, read once, when Polars
    loads). A ``POLARS_MAX_THREADS`` the user set is theirs: it is left out. With them, the
    allocator's options for exports of up to *largest_input_bytes*
    (:func:`specnsys.allocator.large_input_options`)."""
    env = {THREADS_VARIABLE: str(threads)}
    if "POLARS_MAX_THREADS" not in os.environ:
        env["POLARS_MAX_THREADS"] = str(threads)
    return env | large_input_options(largest_input_bytes)


def hold_to_threads(threads: int) -> None:
    """:func:`worker_environment` set in this process (:func:`set_worker_environment`)."""
    set_worker_environment(worker_environment(threads))


def set_worker_environment(env: dict[str, str]) -> None:
    """A pool worker's initializer: *env*, the parent's :func:`worker_environment` (which
    reads the parent's state), set in this process. It runs
    before the worker's first task imports Polars (this module imports nothing heavy), so
    Polars's pool gets the same size; a program that ``profile`` runs gets the values
    specnsys was given (:func:`specnsys.allocator.without_own_options`). A spawned worker
    first imports its parent's main module: when a script calling :func:`~specnsys.runset.
    collect.collect` imports Polars at its top, Polars's pool in the workers keeps its full
    size (the reader's and DuckDB's still get the share)."""
    for variable, value in env.items():
        set_own_option(variable, value)


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, membership: Path = PROC_CGROUP) -> float | None:
    """The CPU quota, in cores, of this process's cgroup and every cgroup above it (the
    least of them): cgroup v2's ``cpu.max``, or v1's ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``; None without a quota, or where the files cannot be read
    (*root*, *membership*: :func:`specnsys.cgroups.cgroup_values`)."""
    limits = cgroup_values("cpu", _v2_quota, _v1_quota, root, membership)
    return min(limits) if limits else None


def _v2_quota(folder: Path) -> float | None:
    """``cpu.max`` of a v2 cgroup: ``$MAX $PERIOD``, ``max`` when unlimited."""
    try:
        quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
        return _ratio(quota, period)
    except OSError:
        return None


def _v1_quota(folder: Path) -> float | None:
    """``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` of a v1 cgroup; -1 when unlimited."""
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    """*quota* over *period* (microseconds), None when unlimited or not a positive pair."""
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max", or something unexpected: no limit known
        return None
    return q / p if q > 0 and p > 0 else None

