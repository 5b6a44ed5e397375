"""Cache format benchmark: Parquet (what the cache uses) against Arrow IPC (Feather v2).

A cold open writes the model once; every warm run reads it. This measures both sides for the
model of one export (built by :mod:`common`), per format:

- write: CPU and wall time to write every model table from Arrow batches already in memory
  (the reading and normalizing a cold open does first are the same for every format), and
  the size on disk;
- read: a fresh process opening the tables the way :class:`specnsys.Trace` would (DuckDB
  views over Parquet; memory-mapped IPC registered in DuckDB) and running a warm-analysis
  style query (kernels joined to their launches, NVTX phase ranges counted), wall time and
  peak RSS (memory-mapped pages that are touched count as resident).

Usage: python bench/cache_format.py [--kernels 2000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from common import ensure_export, load_average, run_measured

import specnsys
from specnsys.ingest.model import MODEL_TABLES

FORMATS = {
    "parquet-snappy": ("parquet", "snappy"),
    "parquet-lz4": ("parquet", "lz4"),
    "ipc": ("ipc", None),
    "ipc-lz4": ("ipc", "lz4"),
}

WORKLOAD = """
SELECT k.short_name, count(*) AS n, sum(k."end" - k.start) AS busy,
       avg(k.start - r.start) AS launch_latency
FROM kernels k JOIN runtime r ON r.correlation_id = k.correlation_id AND r.pid = k.pid
GROUP BY 1 ORDER BY 1;
SELECT text, count(*), sum(duration) FROM nvtx WHERE kind = 'push_pop' GROUP BY 1 ORDER BY 1;
"""

READER = """
import sys, duckdb, pyarrow as pa, pyarrow.ipc as ipc
folder, kind, workload = sys.argv[1], sys.argv[2], sys.argv[3]
con = duckdb.connect()
for name in sys.argv[4:]:
    if kind == "parquet":
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{folder}/{name}.parquet')")
    else:
        con.register(name, ipc.open_file(pa.memory_map(f"{folder}/{name}.arrow")).read_all())
for statement in workload.strip().split(";"):
    if statement.strip():
        con.execute(statement).fetchall()
"""


def write_all(tables: dict[str, list[pa.RecordBatch]], folder: Path, fmt: str) -> None:
    kind, compression = FORMATS[fmt]
    for name, batches in tables.items():
        schema = batches[0].schema
        if kind == "parquet":
            text = [f.name for f in schema if pa.types.is_string(f.type)]
            with pq.ParquetWriter(
                folder / f"{name}.parquet", schema, compression=compression, use_dictionary=text
            ) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        else:
            options = ipc.IpcWriteOptions(compression=compression)
            with ipc.new_file(folder / f"{name}.arrow", schema, options=options) as writer:
                for batch in batches:
                    writer.write_batch(batch)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path, _ = ensure_export(args.kernels)
    work = Path(tempfile.mkdtemp(prefix="specnsys-format-"))
    try:
        os.environ["SPECNSYS_CACHE_DIR"] = str(work / "cache")
        with specnsys.open(path) as trace:
            source = trace.cache_folder
            assert source is not None
            tables = {
                name: list(pq.ParquetFile(source / f"{name}.parquet").iter_batches(250_000))
                for name in MODEL_TABLES
            }
        tables = {name: batches for name, batches in tables.items() if batches}
        rows = sum(b.num_rows for batches in tables.values() for b in batches)
        print(
            f"model of {path.name}: {rows:,} rows in {len(tables)} tables; "
            f"load {load_average()}; median of {args.repeat}"
        )
        print(
            f"{'format':<16}{'write cpu s':>12}{'write s':>9}{'size MB':>9}"
            f"{'read+query s':>14}{'peak RSS MB':>13}"
        )
        for fmt, (kind, _) in FORMATS.items():
            folder = work / fmt
            cpu, wall, reads = [], [], []
            for _ in range(args.repeat):
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                c, t = time.process_time(), time.perf_counter()
                write_all(tables, folder, fmt)
                cpu.append(time.process_time() - c)
                wall.append(time.perf_counter() - t)
                reads.append(
                    run_measured(
                        [sys.executable, "-c", READER, str(folder), kind, WORKLOAD, *tables]
                    )
                )
            size = sum(f.stat().st_size for f in folder.iterdir())
            med = sorted(range(args.repeat), key=lambda i: reads[i].wall_s)[args.repeat // 2]
            assert all(r.ok for r in reads), reads[med].stderr
            print(
                f"{fmt:<16}{sorted(cpu)[args.repeat // 2]:>12.2f}"
                f"{sorted(wall)[args.repeat // 2]:>9.2f}{size / 1e6:>9.0f}"
                f"{reads[med].wall_s:>14.2f}{reads[med].peak_rss_mb:>13.0f}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
