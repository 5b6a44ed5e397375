"""GPU_METRICS at a capture's density: what the samples cost a cold analysis, and the bandwidth
step against the interval join it replaced.

nsys samples GPU metrics at 10 kHz by default (``--gpu-metrics-frequency``), one row per metric
of the set per sample (about 25 on recent GPUs): a 10 s capture holds 2.5M ``GPU_METRICS``
rows, more than the kernels of most inference loops in that time. The bench export
(``bench/common.py``) is a dense synthetic run whose kernels fit in a few seconds, so
``--samples`` sets the count of sample instants directly; they are spread evenly over the
kernels' span, each with ``--metrics`` rows (DRAM read and write among them).

Prints, for the bench export of ``--kernels`` and its copy with the samples:

* a cold ``specnsys analyze --json`` of each (the median of ``--repeat`` runs, a new cache
  each time): wall, CPU and peak RSS, and the copy's time over the export's;
* on the copy's cached model, in this process: the bandwidth step
  (``metrics.bandwidth._from_gpu_metrics``) against the reference, the DuckDB interval join of
  every sample with every op of its device that the step ran before; both results compared
  (``--no-reference`` skips it: it grows with samples x ops).

Usage: python bench/gpu_metrics.py [--kernels 200000] [--samples 100000] [--metrics 25]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import (
    OUT,
    Run,
    Shape,
    bare_scan_command,
    compile_specnsys,
    ensure_export,
    load_average,
    run_measured,
)

from specnsys.testing.builder import VM_BITS

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DRAM = ("DRAM Read Bandwidth [Throughput %]", "DRAM Write Bandwidth [Throughput %]")


def with_samples(base: Path, samples: int, metrics: int) -> Path:
    """A copy of *base* with *samples* GPU_METRICS instants of *metrics* rows each on device 0,
    evenly over its kernels' span (built once, kept under bench/out/)."""
    path = OUT / f"{base.stem}_gm{samples}x{metrics}.sqlite"
    if path.exists():
        return path
    tmp = path.with_suffix(".tmp")
    shutil.copyfile(base, tmp)
    con = sqlite3.connect(tmp)
    lo, hi = con.execute('SELECT min(start), max("end") FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()
    type_id = VM_BITS | 0
    names = [*DRAM, *(f"Metric {i} [Throughput %]" for i in range(metrics - len(DRAM)))]
    con.execute(
        "CREATE TABLE TARGET_INFO_GPU_METRICS (typeId INTEGER NOT NULL, sourceId INTEGER NOT "
        "NULL, typeName TEXT NOT NULL, metricId INTEGER NOT NULL, metricName TEXT NOT NULL)"
    )
    con.execute(
        "CREATE TABLE GPU_METRICS (timestamp INTEGER, typeId INTEGER NOT NULL, "
        "metricId INTEGER NOT NULL, value INTEGER NOT NULL)"
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 0, 'GPU', ?, ?)",
        [(type_id, i, name) for i, name in enumerate(names)],
    )
    step = max((hi - lo) // samples, 1)
    con.execute(
        f"""INSERT INTO GPU_METRICS
            WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {samples - 1}),
                 m(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM m WHERE j < {len(names) - 1})
            SELECT {lo} + i * {step}, {type_id}, j, (i * 7 + j * 13) % 100 FROM s, m"""
    )
    con.commit()
    con.close()
    os.replace(tmp, path)
    return path


def cold(path: Path, repeat: int) -> tuple[Run, Run]:
    """The median of *repeat* cold ``analyze --json`` runs of *path*, and of as many bare
    ``sqlite3`` scans of the columns specnsys reads (each before its cold run)."""
    runs, scans = [], []
    cmd, script = bare_scan_command(path)
    for _ in range(repeat):
        scans.append(run_measured(cmd, stdin=script))
        cache = Path(tempfile.mkdtemp(prefix="specnsys-gm-cache-"))
        env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
        try:
            runs.append(run_measured(
                [sys.executable, "-m", "specnsys", "analyze", "--json", str(path)], env=env
            ))  # fmt: skip
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if not runs[-1].ok:
            raise SystemExit(f"analyze failed on {path}: {runs[-1].stderr.strip()[-400:]}")
    return tuple(sorted(r, key=lambda r: r.wall_s)[len(r) // 2] for r in (runs, scans))  # type: ignore[return-value]


def reference(trace, scope, ops, threshold: float) -> list[tuple[object, ...]]:  # type: ignore[no-untyped-def]
    """The step as it was: each sample joined with every op of its device (DuckDB), weighted by
    the phases running at its instant; rows ``phase, samples, mean_pct, above``."""
    con = trace.connection
    name = f"_bench_ops_{uuid.uuid4().hex}"
    con.register(name, ops.select("phase", "start", "end", "device_id").to_arrow())
    devices = sorted({int(d) for d in ops["device_id"].drop_nulls().to_list()})
    try:
        return con.execute(
            f"""
            WITH samples AS (
                SELECT timestamp AS t, device_id, sum(value)::DOUBLE AS pct FROM gpu_metrics
                WHERE list_contains($metrics, metric_name) AND timestamp >= $ws
                  AND timestamp < $we AND list_contains($devices, device_id)
                GROUP BY ALL
            ),
            running AS (
                SELECT DISTINCT s.t, s.device_id, s.pct, o.phase FROM samples s JOIN {name} o
                  ON o.device_id = s.device_id AND o.start <= s.t AND s.t < o."end"
            ),
            weighted AS (
                SELECT *, 1.0 / count(*) OVER (PARTITION BY t, device_id) AS w FROM running
            )
            SELECT phase, sum(w), sum(w * pct) / sum(w), sum(w * (pct >= $thr)::INT) / sum(w)
            FROM weighted GROUP BY phase ORDER BY phase
            """,
            {"metrics": list(DRAM), "ws": scope.start_ns, "we": scope.end_ns,
             "devices": devices, "thr": threshold},
        ).fetchall()  # fmt: skip
    finally:
        con.unregister(name)


def in_process(path: Path, with_reference: bool) -> None:
    """The bandwidth step on *path*'s cached model, against the reference."""
    import specnsys
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.timeline import exclusive_phase_times
    from specnsys.metrics.bandwidth import DEFAULT_THRESHOLD_PCT, _from_gpu_metrics, metric_ops
    from specnsys.metrics.events import Scope, resolve

    with specnsys.open(path) as trace:
        rules = resolve(None)
        with AttributionContext(trace, rules) as context:
            scope = Scope.of(exclusive_phase_times(trace, context=context), rules, context)
            context.release_lean_runtime()  # as an analysis does after its breakdown
            started = time.perf_counter()
            ops = metric_ops(trace, scope)
            print(f"  the ops the step reads ({ops.height:,}, with their phase and device): "
                  f"{time.perf_counter() - started:.2f} s")  # fmt: skip
            started = time.perf_counter()
            result, why = _from_gpu_metrics(trace, scope, ops, DEFAULT_THRESHOLD_PCT)
            ours = time.perf_counter() - started
            assert result is not None, why
            print(f"  bandwidth step: {ours:.2f} s ({result['samples']:,} samples, "
                  f"{result['busy_samples']:,} on GPU work)")  # fmt: skip
            if not with_reference:
                return
            started = time.perf_counter()
            rows = reference(trace, scope, ops, DEFAULT_THRESHOLD_PCT)
            theirs = time.perf_counter() - started
            same = [r[0] for r in rows] == list(result["by_phase"]) and all(
                abs(a - b) <= 1e-9 * max(1.0, abs(a))
                for r in rows
                for a, b in zip(r[1:], _figures(result["by_phase"][str(r[0])]), strict=True)
            )
            print(f"  reference (interval join): {theirs:.2f} s = {theirs / ours:.1f}x the step; "
                  f"results {'equal' if same else 'DIFFER'}")  # fmt: skip


def _figures(phase: dict[str, object]) -> tuple[float, float, float]:
    return (
        float(phase["samples"]),  # type: ignore[arg-type]
        float(phase["mean_pct"]),  # type: ignore[arg-type]
        float(phase["fraction_above_threshold"]),  # type: ignore[arg-type]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--metrics", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    if args.metrics < len(DRAM) or args.samples < 1:
        parser.error(f"--metrics must be at least {len(DRAM)} and --samples at least 1")
    compile_specnsys()
    base, _ = ensure_export(args.kernels, Shape())
    copy = with_samples(base, args.samples, args.metrics)
    print(f"load {load_average()}; {base.name} and its copy with {args.samples:,} samples x "
          f"{args.metrics} metrics = {args.samples * args.metrics:,} GPU_METRICS rows")  # fmt: skip
    (plain, plain_scan), (sampled, sampled_scan) = cold(base, args.repeat), cold(copy, args.repeat)
    for label, path, run, scan in (
        ("without samples", base, plain, plain_scan), ("with samples", copy, sampled, sampled_scan),
    ):  # fmt: skip
        budget = 300 + 1.5 * path.stat().st_size / 2**20
        print(f"  cold analyze {label}: {run.wall_s:.2f} s = {run.wall_s / scan.wall_s:.2f}x "
              f"the bare scan ({scan.wall_s:.2f} s), {run.cpu_s or 0:.2f} CPU-s, peak "
              f"{run.peak_rss_mb:.0f} MiB = {run.peak_rss_mb / budget:.2f}x 300 MiB + 1.5x the "
              "file")  # fmt: skip
    print(f"  with / without: {sampled.wall_s / plain.wall_s:.2f}x; the samples' own time "
          f"{sampled.wall_s - plain.wall_s:.2f} s against their bare scan's "
          f"{sampled_scan.wall_s - plain_scan.wall_s:.2f} s (medians of {args.repeat})")  # fmt: skip
    in_process(copy, not args.no_reference)
    print(f"load {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
