"""Ingest benchmark: cold and warm open of a large nsys-schema export against a bare SQLite scan.

Builds (once, cached under bench/out/) an export shaped like a speculative-decoding loop:
per decode step one ``decode`` range holding ``draft``/``verify``/``sample``/``kv``/``sync``
ranges, 24 kernels (4 draft forwards x 4 kernels + an 8-kernel verify) each with its
``cudaLaunchKernel`` runtime row. Default: 2,000,016 kernels, as many runtime rows, 500,004
NVTX ranges.

Printed, all measured in this run on this file (and the size of the cache it writes):
- bare scan: the ``sqlite3`` command-line shell totalling every column specnsys reads (the floor
  for any reader that goes through SQLite);
- cold open: ``specnsys.open`` with an empty cache (SQLite -> Arrow -> normalized model ->
  Parquet cache);
- warm open: ``specnsys.open`` again (cache hit) and a first query over the kernels;
- for context, what a hand-written reader pays: Python ``sqlite3`` ``fetchall`` of the same
  columns (measured once);
and the ratios against the goals of the ingest issue (cold <= 2x bare scan, warm >= 10x
faster than cold). Each figure is the median of ``--repeat`` runs.

Usage: python bench/ingest.py [--kernels 2000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bare_scan_script, compile_specnsys, read_columns

import specnsys
from specnsys.cores import usable_cores
from specnsys.testing.builder import VM_BITS, create_tables

KERNELS_PER_STEP = 24
NVTX_PER_STEP = 6
STEP_NS = 40_000
PID, TID = 31337, 31337

PHASES = ("decode", "draft", "verify", "sample", "kv", "sync")
KERNEL_NAMES = (
    "draft_gemm",
    "draft_attn",
    "draft_norm",
    "draft_act",
    "verify_gemm",
    "verify_attn",
    "verify_norm",
    "verify_act",
)


def build_export(path: Path, steps: int) -> None:
    """Write the synthetic export with SQL (recursive CTEs), not Python loops over rows."""
    tmp = path.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    create_tables(
        con,
        [
            "StringIds",
            "ThreadNames",
            "PROCESSES",
            "META_DATA_EXPORT",
            "NVTX_EVENTS",
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            "CUPTI_ACTIVITY_KIND_KERNEL",
            "TARGET_INFO_GPU",
        ],
    )
    strings = [
        "specnsys",
        "python3",
        "cudaLaunchKernel_v7000",
        *PHASES,
        *KERNEL_NAMES,
        *(f"void {k}<float>(float const*, float*, int)" for k in KERNEL_NAMES),
    ]
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings, start=1)))
    sid = {s: i for i, s in enumerate(strings, start=1)}
    gtid = VM_BITS | (PID << 24) | TID
    gpid = VM_BITS | (PID << 24)
    con.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (sid["python3"], gtid))
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, PID))
    con.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
        [("EXPORT_PRODUCT_VERSION", "2026.2.1.210"), ("EXPORT_SCHEMA_VERSION", "3.25.0")],
    )
    con.execute(
        "INSERT INTO TARGET_INFO_GPU (vmId, id, name, memoryBandwidth, smCount) "
        "VALUES (?, 0, 'NVIDIA H200', 4800000000000, 132)",
        (VM_BITS,),
    )
    con.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
        "VALUES (0, 75, 'specnsys', ?, 1)",
        (gtid,),
    )
    steps_cte = (
        f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {steps - 1})"
    )
    # decode [0, 38us]; draft [1, 17]; verify [17, 30]; sample [30, 33]; kv [33, 35]; sync [35, 37]
    spans = [
        (0, 38_000),
        (1_000, 17_000),
        (17_000, 30_000),
        (30_000, 33_000),
        (33_000, 35_000),
        (35_000, 37_000),
    ]
    phase_rows = " UNION ALL ".join(
        f"SELECT {j} AS j, {a} AS a, {b} AS b, {sid[p]} AS tid_text"
        for j, (p, (a, b)) in enumerate(zip(PHASES, spans, strict=True))
    )
    con.execute(
        f"""{steps_cte}, p AS ({phase_rows})
        INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId, domainId)
        SELECT s.i * {STEP_NS} + p.a, s.i * {STEP_NS} + p.b, 59, {gtid}, p.tid_text, 1
        FROM s CROSS JOIN p ORDER BY s.i, p.j"""
    )
    # kernel j of a step: 16 draft kernels launched in [1, 17) us, 8 verify kernels in [17, 30).
    kernel_cte = f"""{steps_cte}, k(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM k WHERE j < {KERNELS_PER_STEP - 1}),
        launches AS (
            SELECT s.i, k.j, s.i * {KERNELS_PER_STEP} + k.j + 1 AS corr,
                   s.i * {STEP_NS} + CASE WHEN k.j < 16 THEN 1000 + k.j * 1000
                                          ELSE 17000 + (k.j - 16) * 1600 END AS t
            FROM s CROSS JOIN k)"""
    con.execute(
        f"""{kernel_cte}
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
        SELECT t, t + 300, 0, {gtid}, corr, {sid["cudaLaunchKernel_v7000"]}, 0, NULL
        FROM launches ORDER BY corr"""
    )
    first_name = sid[KERNEL_NAMES[0]]
    first_demangled = sid[f"void {KERNEL_NAMES[0]}<float>(float const*, float*, int)"]
    con.execute(
        f"""{kernel_cte}
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
        SELECT t + 2000, t + 2900, 0, 1, 7, corr, {gpid},
               {first_demangled} + ((j / 4) % 8), {first_name} + ((j / 4) % 8), 1, 64,
               128, 1, 1, 256, 1, 1, 0, 16384, NULL
        FROM launches ORDER BY t + 2000"""
    )
    con.commit()
    con.close()
    os.replace(tmp, path)


def time_bare_scan(path: Path, script: str) -> float:
    if shutil.which("sqlite3"):
        started = time.perf_counter()
        subprocess.run(
            ["sqlite3", f"file:{path}?mode=ro&immutable=1"],
            input=script,
            capture_output=True,
            text=True,
            check=True,
        )
        return time.perf_counter() - started
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    started = time.perf_counter()
    for statement in script.splitlines():
        con.execute(statement).fetchall()
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed


def time_naive_python_read(path: Path) -> float:
    """The read a hand-written tool does: Python's sqlite3 ``fetchall`` of the same columns."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    started = time.perf_counter()
    for table, cols in read_columns(path):
        names = ", ".join(f'"{c}"' for c, _ in cols)
        con.execute(f'SELECT {names} FROM "{table}"').fetchall()
    elapsed = time.perf_counter() - started
    con.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    compile_specnsys()
    steps = -(-args.kernels // KERNELS_PER_STEP)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    path = out / f"spec_loop_{steps * KERNELS_PER_STEP}k.sqlite"
    if not path.exists():
        started = time.perf_counter()
        build_export(path, steps)
        print(f"built {path.name} in {time.perf_counter() - started:.1f} s")
    size_mb = path.stat().st_size / 1e6
    path.read_bytes()  # page cache warm for every contender alike
    script = bare_scan_script(path)

    bare, cold, warm, warm_query = [], [], [], []
    for _ in range(args.repeat):
        bare.append(time_bare_scan(path, script))
        cache = Path(tempfile.mkdtemp(prefix="specnsys-bench-cache-"))
        os.environ["SPECNSYS_CACHE_DIR"] = str(cache)
        started = time.perf_counter()
        with specnsys.open(path) as trace:
            cold.append(time.perf_counter() - started)
            counts = trace.summary.row_counts
        started = time.perf_counter()
        with specnsys.open(path) as trace:
            warm.append(time.perf_counter() - started)
            assert trace.from_cache
            trace.sql("SELECT short_name, sum(duration) FROM kernels GROUP BY 1").fetchall()
            warm_query.append(time.perf_counter() - started)
        cache_mb = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) / 1e6
        shutil.rmtree(cache, ignore_errors=True)

    naive = time_naive_python_read(path)
    med = statistics.median
    print(
        f"export: {path.name}, {size_mb:.0f} MB, kernels {counts['kernels']:,}, "
        f"runtime {counts['runtime']:,}, nvtx {counts['nvtx']:,}; "
        f"{usable_cores()} cores, median of {args.repeat}; its cache {cache_mb:.2f} MB"
    )
    print(f"{'bare sqlite3 scan of the same columns':<44}{med(bare):8.2f} s   1.00x")
    print(
        f"{'specnsys cold open (export -> model+cache)':<44}{med(cold):8.2f} s"
        f"   {med(cold) / med(bare):.2f}x bare scan   (goal <= 2x)"
    )
    print(
        f"{'python sqlite3 fetchall of the same columns':<44}{naive:8.2f} s"
        f"   {naive / med(cold):.1f}x slower than specnsys cold (measured once)"
    )
    print(
        f"{'specnsys warm open (from cache)':<44}{med(warm):8.3f} s"
        f"   {med(cold) / med(warm):.0f}x faster than cold   (goal >= 10x)"
    )
    print(
        f"{'warm open + kernel summary query':<44}{med(warm_query):8.3f} s"
        f"   {med(cold) / med(warm_query):.0f}x faster than cold"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
