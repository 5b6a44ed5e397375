"""How much memory DuckDB may take, building a model and analyzing it.

DuckDB's own default (80% of RAM, kept once allocated) lets a large trace take most of the
machine; the limits here are proportional to the export, with floors that keep small and
mid-sized traces from spilling and a ceiling under an address-space limit (``ulimit -v``).
The trade-off between peak memory and time is measured in docs/performance.md#memory-limits.
"""

from __future__ import annotations

import os
import re

from specnsys.errors import UsageError, address_space_limit

#: DuckDB memory, as a fraction of the export's size on disk, within the bounds below: while
#: building the model (each slice's joins spill beyond it) and while analyzing it (see
#: :func:`specnsys.ingest.trace.analysis_connection`). ``$SPECNSYS_MEMORY_LIMIT`` (DuckDB's
#: syntax, e.g. ``4GB``) overrides both.
#: The floors keep small and mid-sized traces from spilling (a spill costs time, and the
#: memory a small trace needs is no burden; docs/performance.md#memory-limits).
BUILD_MEMORY_FRACTION = 0.5
BUILD_MEMORY_MIN = 1 << 30
ANALYSIS_MEMORY_FRACTION = 1.0
ANALYSIS_MEMORY_MIN = 2 << 30
DUCKDB_MEMORY_MAX_OF_RAM = 0.5


def duckdb_memory_limit(export_bytes: int, fraction: float, floor: int) -> str:
    """DuckDB's ``memory_limit`` for work on an export of *export_bytes*.

    DuckDB's own default (80% of RAM, kept once allocated) lets a large trace take most of
    the machine (docs/performance.md#memory-limits); a limit
    proportional to the export, above *floor* and below half the RAM, keeps peak memory near
    the export's size on large traces at the cost of some spilling. Under an address-space
    limit (``ulimit -v``) DuckDB gets at most half of the room left in it, so that DuckDB
    refuses an allocation (exit status 4) before malloc fails somewhere that aborts.
    """
    explicit = explicit_memory_limit()
    if explicit is not None:
        return explicit
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 8 << 30
    limit = min(max(int(export_bytes * fraction), floor), int(ram * DUCKDB_MEMORY_MAX_OF_RAM))
    room = address_space_room()
    if room is not None:
        limit = min(limit, room // 2)
    return f"{max(limit >> 20, 64)}MB"


#: ``$SPECNSYS_MEMORY_LIMIT``: a number and a unit (e.g. ``8GB``, ``512MiB``): DuckDB's units and
#: PB/PiB, which DuckDB does not take but the range below reaches (the value is handed to
#: DuckDB in KiB, so every unit here is one DuckDB reads).
_MEMORY_LIMIT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|[KMGTP]i?B)\s*", re.IGNORECASE)
_MEMORY_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
                 "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
                 "pib": 1 << 50}  # fmt: skip
#: The sizes accepted, in bytes, and as the message says them: the two must agree.
MEMORY_LIMIT_RANGE = (10**6, 10**18)
_RANGE_TEXT = "1MB to 1000PB"


def explicit_memory_limit() -> str | None:
    """``$SPECNSYS_MEMORY_LIMIT`` checked, or None when unset. DuckDB reads a bad value as a
    parser error deep in a command ("lots", "1e400") or as no limit at all ("-1GB"): here it is
    one line naming the variable (exit status 2). :func:`specnsys.ingest.trace.open_trace` calls
    this on every run, so that a bad value is refused on a warm cache too (where a command may
    read stored results and never open DuckDB)."""
    text = os.environ.get("SPECNSYS_MEMORY_LIMIT", "").strip()
    if not text:
        return None
    match = _MEMORY_LIMIT.fullmatch(text)
    amount = float(match[1]) * _MEMORY_UNITS[match[2].lower()] if match else 0
    low, high = MEMORY_LIMIT_RANGE
    if not low <= amount <= high:
        raise UsageError(
            f"SPECNSYS_MEMORY_LIMIT={text!r} is not a memory size from {_RANGE_TEXT}: give a "
            "number and a unit (B, KB, MB, GB, TB, PB or KiB ... PiB), e.g. 8GB or 512MiB"
        )
    return f"{int(amount) >> 10}KiB"


def address_space_room() -> int | None:
    """Bytes left under the address-space limit (``ulimit -v``), or None when there is none."""
    limit = address_space_limit()
    if limit is None:
        return None
    try:
        with open("/proc/self/statm") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    return max(limit - used, 0)

