"""Polars's and DuckDB's allocators told to hand freed memory back promptly, before they load.

Polars allocates with its own jemalloc (symbols prefixed ``_rjem_``), which reads its options
from ``_RJEM_MALLOC_CONF`` once, at its first allocation; no API changes them later. Polars's
``__init__`` sets ``dirty_decay_ms:500,muzzy_decay_ms:1000`` there and appends what the variable
held before, so options set before the import win. An analysis builds and drops frames of
millions of rows step after step; with Polars's settings their pages stay resident for a
second or more (a "muzzy" page is only marked free, and counts in RSS until the kernel needs
it), so the peak of a cold analysis comes near the sum of its steps instead of the largest one
(docs/performance.md#memory-of-an-analysis). Allocations above 256 KiB (a column chunk, a
hash table's partition) go to jemalloc's dedicated arena for large requests, which returns
them at once (its default threshold is 8 MiB). DuckDB's own jemalloc (``DUCKDB_JE_MALLOC_CONF``)
keeps freed pages for a second by default: the phase ranges' query left 280 MiB resident into
the breakdown; 100 ms here. Together: the 2M-kernel cold analysis peaked 10-14 % lower, in the
same time (docs/performance.md#issue-35-sixth-session-the-launched-ops-summed-in-smaller-
slices). A base module: the command line calls it before it imports anything that loads
Polars or DuckDB.

Under an address-space limit (``ulimit -v``) the same call also keeps both allocators from
holding idle address space: Arrow's default pool becomes glibc's malloc (Arrow's jemalloc
reserves address space ahead), and Polars's jemalloc runs without background threads and with
one arena per pool thread. With their defaults a cold analysis of a sample trace peaked at
1,036,908-1,048,224 KiB of address space, against the 1,048,576 KiB of a 1 GiB limit, and
crashed there (SIGSEGV, SIGABRT) one run in a few; with these, 840,732-889,336 KiB
(docs/performance.md#issue-35-fourth-session-the-address-space-limit-and-two-cuts-tried).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

POLARS_ALLOCATOR_VARIABLE = "_RJEM_MALLOC_CONF"
#: Freed pages go back to the system after 100 ms, at once, not after 0.5 + 1 s; requests
#: above 256 KiB at once (jemalloc's arena for large requests purges without delay).
POLARS_ALLOCATOR_OPTIONS = "dirty_decay_ms:100,muzzy_decay_ms:0,oversize_threshold:262144"
#: For a large export: freed pages kept 1 s. An analysis that returns pages after 100 ms maps
#: and zeroes fresh ones in every step (7-8M page faults, a third of its CPU time at 20M
#: kernels); keeping them made the cold run 6 % faster (medians of 3 interleaved pairs at 20M
#: kernels) for 3-11 % more peak memory, which
#: the budget of 300 MiB + 1.5x the file leaves room for only at large sizes
#: (docs/performance.md#issue-35-eleventh-session-the-allocator-by-the-exports-size).
POLARS_LARGE_INPUT_OPTIONS = "dirty_decay_ms:1000,muzzy_decay_ms:0,oversize_threshold:262144"
#: From this size, the largest regular file the command line names, Polars's allocator gets
#: :data:`POLARS_LARGE_INPUT_OPTIONS`.
LARGE_INPUT_BYTES = 2 * 1024**3
#: What Polars's ``__init__`` writes into the variable when it was unset. Every process that a
#: Python program which imported Polars starts inherits it (a bench, a test, a notebook): it
#: is Polars's default, not the user's choice.
POLARS_OWN_OPTIONS = "dirty_decay_ms:500,muzzy_decay_ms:1000"

#: DuckDB's jemalloc reads its options from this variable once, when DuckDB loads; they
#: apply on top of DuckDB's own (``dirty_decay_ms:1000``, its arenas and thresholds).
DUCKDB_ALLOCATOR_VARIABLE = "DUCKDB_JE_MALLOC_CONF"
#: Freed pages go back to the system after 100 ms, not after 1 s.
DUCKDB_ALLOCATOR_OPTIONS = "dirty_decay_ms:100"

#: Arrow's choice of default memory pool, read when Arrow loads.
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"

#: Each variable set here, as this process was given it before (None: unset).
_GIVEN: dict[str, str | None] = {}
#: The options :func:`return_freed_memory` gave Polars's allocator (empty: it gave none, the
#: user's own or Polars's already loaded).
_POLARS_SET: list[str] = []


def return_freed_memory(
    address_space_threads: int | None = None, largest_input_bytes: int = 0
) -> None:
    """Set :data:`POLARS_ALLOCATOR_OPTIONS` and :data:`DUCKDB_ALLOCATOR_OPTIONS` for this
    process and the workers it starts, each unless the user set its variable (for Polars: to
    anything but Polars's own default) or its library is already loaded (its allocator may have
    read it). Under an address-space limit, whose pools run *address_space_threads* threads,
    also hold the allocators' idle reservations down (the module's docstring); otherwise, when
    the command reads an export of at least :data:`LARGE_INPUT_BYTES`
    (*largest_input_bytes*), keep Polars's freed pages longer
    (:data:`POLARS_LARGE_INPUT_OPTIONS`). Either way the given values are kept for
    :func:`without_own_options`: Polars's import rewrites its variable too."""
    if "duckdb" not in sys.modules and "_duckdb" not in sys.modules:
        given = _GIVEN[DUCKDB_ALLOCATOR_VARIABLE] = os.environ.get(DUCKDB_ALLOCATOR_VARIABLE)
        if not given:
            os.environ[DUCKDB_ALLOCATOR_VARIABLE] = DUCKDB_ALLOCATOR_OPTIONS
    if "polars" in sys.modules:
        return
    given = os.environ.get(POLARS_ALLOCATOR_VARIABLE)
    _GIVEN[POLARS_ALLOCATOR_VARIABLE] = given
    if given in (None, "", POLARS_OWN_OPTIONS):
        options = POLARS_ALLOCATOR_OPTIONS
        if address_space_threads is not None:
            options += f",background_thread:false,narenas:{address_space_threads}"
        elif largest_input_bytes >= LARGE_INPUT_BYTES:
            options = POLARS_LARGE_INPUT_OPTIONS
        os.environ[POLARS_ALLOCATOR_VARIABLE] = options
        _POLARS_SET[:] = [options]
    if address_space_threads is not None and "pyarrow" not in sys.modules:
        given = _GIVEN[ARROW_POOL_VARIABLE] = os.environ.get(ARROW_POOL_VARIABLE)
        if not given:
            os.environ[ARROW_POOL_VARIABLE] = "system"


def large_input_options(largest_input_bytes: int) -> dict[str, str]:
    """The allocator variable a worker process analysing exports of up to
    *largest_input_bytes* gets (``collect``'s workers: the traces are in folders the command
    line's words do not size): :data:`POLARS_LARGE_INPUT_OPTIONS` from
    :data:`LARGE_INPUT_BYTES`, where this process set its own options for Polars (not the
    user's, nor an address-space limit's); otherwise nothing."""
    if largest_input_bytes < LARGE_INPUT_BYTES or _POLARS_SET not in (
        [POLARS_ALLOCATOR_OPTIONS], [POLARS_LARGE_INPUT_OPTIONS]
    ):
        return {}
    return {POLARS_ALLOCATOR_VARIABLE: POLARS_LARGE_INPUT_OPTIONS}


def set_own_option(variable: str, value: str) -> None:
    """Set *variable* for this process and the workers it starts, keeping the value it was
    given for :func:`without_own_options` (the thread caps of :mod:`specnsys.cores`)."""
    _GIVEN.setdefault(variable, os.environ.get(variable))
    os.environ[variable] = value


def without_own_options(env: Mapping[str, str]) -> dict[str, str]:
    """*env* with each variable as this process was given it, where *env* holds this process's
    own value (a caller's deliberate other value stays): a program that specnsys runs
    (``profile``) gets the environment it was given, neither these options, nor the thread
    caps (:func:`set_own_option`), nor what Polars's import wrote (it prepends its defaults to
    the variable)."""
    result = dict(env)
    for variable, given in _GIVEN.items():
        if result.get(variable) != os.environ.get(variable):
            continue
        if given is None:
            result.pop(variable, None)
        else:
            result[variable] = given
    return result
