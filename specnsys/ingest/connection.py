"""The DuckDB connection analyses run on, and the model's tables made visible in it.

Shared by :class:`specnsys.ingest.trace.Trace` (its connection, opened on first use) and the
readers that summarize a model they just built on the connection the trace then keeps
(:mod:`specnsys.readers.nsys`).
"""

from __future__ import annotations

import contextlib
import functools
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from specnsys.cores import usable_cores
from specnsys.ingest import cache
from specnsys.ingest.build import SCRATCH_PREFIX
from specnsys.ingest.interrupts import interruptible
from specnsys.ingest.memory_limits import (
    ANALYSIS_MEMORY_FRACTION,
    ANALYSIS_MEMORY_MIN,
    duckdb_memory_limit,
)
from specnsys.ingest.nsys_rep import EXPORT_PREFIX
from specnsys.model import MODEL_TABLES

if TYPE_CHECKING:  # DuckDB and pyarrow load where they are used (a warm run needs neither)
    import duckdb
    import pyarrow as pa

__all__ = [
    "HAND_BACK_PREFIX",
    "SCRATCH_PREFIXES",
    "SPILL_PREFIX",
    "analysis_connection",
    "closed_on_error",
    "model_views",
]

#: Private temporary folders of specnsys processes (DuckDB's spills while analyzing or
#: building, ``.nsys-rep`` exports read without a cache): ``<prefix><pid>-...``.
SPILL_PREFIX = "specnsys-spill-"
#: ``collect``'s folder of the records its pool workers hand back (specnsys.runset.collect).
HAND_BACK_PREFIX = "specnsys-collect-"
SCRATCH_PREFIXES = (SPILL_PREFIX, SCRATCH_PREFIX, EXPORT_PREFIX, HAND_BACK_PREFIX)


@functools.cache
def _sweep_scratch() -> None:
    """Once per process: remove the scratch folders of specnsys processes that died without
    cleaning up (SIGKILL, a crash), from the temporary folder."""
    cache.sweep_stale(Path(tempfile.gettempdir()), SCRATCH_PREFIXES)


def analysis_connection(
    export_bytes: int | None = None, reuse: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for analyses: quiet, bounded, spilling into a private temp folder.

    *reuse*: a connection to an empty database with DuckDB's default settings (a build's,
    :class:`~specnsys.ingest.build.DatabaseHandover`), set up here instead of a new one, which
    costs 15-20 ms of CPU; closed, and a new one made, if DuckDB refuses a setting.

    DuckDB draws a progress bar on stdout for queries over about two seconds (on a large
    trace that corrupts ``--json`` output), and spills to ``.tmp`` in the working directory by
    default (writing beside whatever the user ran from); both are turned away here. With
    *export_bytes*, its memory is limited in proportion to the export (see
    :func:`~specnsys.ingest.memory_limits.duckdb_memory_limit`), trading some time for a
    much lower peak (docs/performance.md#memory-limits).
    """
    import duckdb

    _sweep_scratch()
    if reuse is not None:
        with contextlib.suppress(duckdb.Error):  # closed by _set_up: a new one below
            return _set_up(reuse, export_bytes)
    return _set_up(duckdb.connect(), export_bytes)


def _set_up(con: duckdb.DuckDBPyConnection, export_bytes: int | None) -> duckdb.DuckDBPyConnection:
    """*con* (a new database's, or one as empty and with DuckDB's defaults) with the
    analysis settings (see :func:`analysis_connection`); closed if DuckDB refuses one."""
    with closed_on_error(interruptible(con)):
        con.execute("SET enable_progress_bar = false")
        # An ASOF join whose left side DuckDB estimates under 64 rows runs as a nested loop
        # over both sides; the estimate of a CTE over the phase ranges is often ~15 rows when
        # there are hundreds of thousands, and the decode steps' ASOF join then took 82 s
        # instead of 0.7 s (docs/performance.md#attribution-and-metrics). Always the ASOF join.
        con.execute("SET asof_loop_join_threshold = 0")
        # DuckDB keeps what a query freed in its allocator's caches (flushed only past 128 MB
        # per task): the phase ranges' query left 300 MB resident after its frame was dropped
        # (2M-kernel bench export). Flushed after each task past 4 MB, by background threads:
        # the cold analysis peaked at 1.23 GB against 1.36-1.45 GB, in the same time
        # (docs/performance.md#memory-of-an-analysis).
        con.execute("SET allocator_flush_threshold = '4MB'")
        con.execute("SET allocator_background_threads = true")
        # DuckDB counts the host's cores; a pinned process or a collect worker has fewer
        con.execute("SET threads = ?", [usable_cores()])
        if export_bytes is not None:
            limit = duckdb_memory_limit(
                export_bytes, ANALYSIS_MEMORY_FRACTION, ANALYSIS_MEMORY_MIN
            )
            con.execute("SET memory_limit = ?", [limit])
        spill = (
            Path(tempfile.gettempdir())
            / f"{cache.tmp_prefix(SPILL_PREFIX)}{uuid.uuid4().hex[:8]}"
        )
        con.execute("SET temp_directory = ?", [str(spill)])
        return con


@contextlib.contextmanager
def closed_on_error(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """*con*, closed if the block raises (else it passes to the trace, which closes it)."""
    try:
        yield con
    except BaseException:
        con.close()
        raise


def model_views(
    con: duckdb.DuckDBPyConnection, folder: Path | None, tables: dict[str, pa.Table] | None
) -> duckdb.DuckDBPyConnection:
    """*con* with every model table under its name: a view over its Parquet file in *folder*
    (replacing a view of the same name: the summary's views point into the entry before it is
    committed), or else the Arrow table of *tables*."""
    for name in MODEL_TABLES:
        if folder is not None:
            source = str(folder / f"{name}.parquet").replace("'", "''")
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{source}')")
        elif tables is not None:
            con.register(name, tables[name])
        else:
            raise ValueError("give a folder or tables")
    return con
