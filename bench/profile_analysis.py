"""Where a warm analysis spends its time and memory: each step in its own process.

On one export (built by :mod:`common`, its cache built first so every step is warm), runs
separately and reports wall time and peak RSS of:

- ``open``: ``specnsys.open`` from the cache (the floor of every step below);
- ``gpu_ops_with_phase``: launch attribution of every GPU op, as a Polars frame;
- ``exclusive_phase_times``: the whole exclusive phase timeline;
- ``analyze_trace``: every metric (``specnsys analyze``);

then, for ``exclusive_phase_times`` and ``analyze_trace``, the statements (DuckDB ``execute``
/ ``sql(...).pl()`` calls and Polars ``collect``) that took the most time, with the line of
specnsys that issued them.

Usage: python bench/profile_analysis.py [--kernels 2000000] [--top 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from common import ensure_export, load_average, run_measured, usable_cores

ROOT = Path(__file__).resolve().parent.parent

STEP = r"""
import sys, time, resource
import specnsys
step, path = sys.argv[1], sys.argv[2]
started = time.perf_counter()
trace = specnsys.open(path)
assert trace.from_cache, "cache not warm"
opened = time.perf_counter()
trace.load_derived = lambda kind, key: None  # compute, do not read back a stored result
trace.store_derived = lambda kind, key, value: None
if step == "gpu_ops_with_phase":
    from specnsys.attribution import gpu_ops_with_phase
    gpu_ops_with_phase(trace)
elif step == "exclusive_phase_times":
    from specnsys.attribution import exclusive_phase_times
    exclusive_phase_times(trace)
elif step == "analyze_trace":
    from specnsys.metrics import analyze_trace
    analyze_trace(trace)
print(f"{opened - started:.3f} {time.perf_counter() - opened:.3f}")
"""

PROFILE = r"""
import inspect, resource, sys, time
import specnsys
step, path, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
trace = specnsys.open(path)
trace.load_derived = lambda kind, key: None  # compute, do not read back a stored result
trace.store_derived = lambda kind, key, value: None
if step == "exclusive_phase_times":
    from specnsys.attribution import exclusive_phase_times as run
else:
    from specnsys.metrics import analyze_trace as run
calls = []

def caller():
    for frame in inspect.stack()[2:]:
        if "/specnsys/" in frame.filename and "/ingest/trace.py" not in frame.filename:
            return f"{frame.filename.split('/specnsys/', 1)[1]}:{frame.lineno} {frame.function}"
    return "?"

def timed(kind, sql, where, fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    head = " ".join(str(sql).split())[:70]
    calls.append((time.perf_counter() - started, rss, where, kind, head))
    return result

class Relation:
    def __init__(self, rel, sql, where):
        self._rel, self._sql, self._where = rel, sql, where
    def __getattr__(self, name):
        attr = getattr(self._rel, name)
        if name in ("pl", "fetchall", "fetchone", "to_arrow_table", "arrow", "df", "fetchdf"):
            return lambda *a, **k: timed(name, self._sql, self._where, attr, *a, **k)
        return attr

class Connection:
    def __init__(self, con):
        self._con = con
    def sql(self, query, *a, **k):
        where = caller()
        rel = timed("sql", query, where, self._con.sql, query, *a, **k)
        return Relation(rel, query, where) if rel is not None else rel
    def execute(self, query, *a, **k):
        timed("execute", query, caller(), self._con.execute, query, *a, **k)
        return self._con
    def __getattr__(self, name):
        return getattr(self._con, name)

trace._con = Connection(trace.connection)  # opened here, then wrapped
started = time.perf_counter()
run(trace)
total = time.perf_counter() - started
print(f"total {total:.2f} s, {len(calls)} DuckDB calls taking {sum(c[0] for c in calls):.2f} s")
for t, rss, where, kind, head in sorted(calls, key=lambda c: -c[0])[:top]:
    print(f"{t:7.2f} s  rss-peak-after {rss:6d} MB  {where} .{kind}()  {head}")
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--rss-cap-gb", type=float, default=12.0)
    args = parser.parse_args()
    path, _ = ensure_export(args.kernels)
    cache = tempfile.mkdtemp(prefix="specnsys-profile-")
    env = {**os.environ, "SPECNSYS_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
    cap = args.rss_cap_gb * 1024
    warmup = run_measured([sys.executable, "-c", STEP, "open", str(path)], env=env)
    size = path.stat().st_size
    print(
        f"{path.name}: {size / 1e6:.0f} MB; cache built in {warmup.wall_s:.1f} s; "
        f"load {load_average()} ({usable_cores()} cores)"
    )
    print(
        f"{'step (own process, warm cache)':<32}{'open s':>8}{'step s':>9}{'peak RSS MB':>13}"
        f"{'RSS/file':>10}"
    )
    for step in ("open", "gpu_ops_with_phase", "exclusive_phase_times", "analyze_trace"):
        run = run_measured([sys.executable, "-c", STEP, step, str(path)], env=env, rss_cap_mb=cap)
        if not run.ok:
            reason = "memory cap" if run.killed_for_memory else (run.stderr.strip()[-300:])
            print(f"{step:<32} failed: {reason}")
            continue
        opened, took = (float(x) for x in run.stdout.split())
        print(
            f"{step:<32}{opened:>8.2f}{took:>9.2f}{run.peak_rss_mb:>13.0f}"
            f"{run.peak_rss_mb * 2**20 / size:>10.2f}"
        )
    for step in ("exclusive_phase_times", "analyze_trace"):
        print(f"-- {step}: engine calls by the specnsys line that made them (cumulative s)")
        run = run_measured(
            [sys.executable, "-c", PROFILE, step, str(path), str(args.top)],
            env=env,
            rss_cap_mb=cap,
        )
        print(run.stdout.rstrip() if run.ok else f"failed: {run.stderr.strip()[-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
