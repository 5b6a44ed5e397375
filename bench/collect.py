"""``specnsys collect`` throughput: 1 vs 2 workers (local pool, and Dask LocalCluster), and the
per-trace overhead of a collect against a single ``analyze``.

Load: N copies (default 48) of the 8 bundled sample traces (CPU captures, 0.4-1 MB each,
0.7-1.8k NVTX rows), each copy its own file so that every trace is a cold ingest. Every
contender starts from an empty cache folder (``SPECNSYS_CACHE_DIR``) and an empty dataset, and
runs as a CLI subprocess (interpreter start and imports included):

- ``analyze`` of one trace, cold, repeated over the first traces: the per-trace reference;
- ``collect --workers 1`` and ``--workers 2`` over all N traces (process pool);
- ``collect --dask local --workers 1|2`` (LocalCluster; skipped without ``distributed``);
- ``collect --dask tcp://HOST:PORT`` against a scheduler with 1 or 2 worker processes that the
  bench starts before the command (as a user points collect at a running cluster: the
  cluster's start is not in the wall time; its workers get an empty cache folder).

Printed: wall time, traces per second, the 2-worker speedup over 1 worker, and two per-trace
figures of each collect:

- ``x analyze``: ``(collect_wall / N) / analyze_wall``, below 1 when collecting N traces costs
  less per trace than N separate ``analyze`` runs (one interpreter per worker, not per trace);
- ``overhead s``: the seconds per trace that collect adds to the analysis itself,
  ``collect_wall * workers / N - work``, where ``work`` is the median time of
  ``analyse_trace`` (what a worker runs per trace) on a cold cache in an interpreter whose
  imports are already paid: pool and worker start, the dataset writes in the parent, the
  hand-over of results, and idle workers at the end. It is a difference of two measured
  times: near zero, machine noise can make it come out slightly negative.

- ``CPU s`` and ``busy cores``: the command's user + system time (its pool's or
  LocalCluster's processes included; not for ``tcp://``, whose workers outlive the command)
  and that time over the wall time.

The machine's core count bounds the speedup (the cores the bench may use, by its affinity
and CPU quota, are printed), and so does the 1-worker run's own parallelism: its analyses'
Polars and DuckDB threads already keep more than one core busy, so two workers doing the same work gain at most ``cores / busy cores`` of
it (printed beside each speedup).

Usage:
  python bench/collect.py [--traces 48] [--repeat 1] [--no-dask]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specnsys.cores import usable_cores

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _children_cpu() -> float:
    """User + system seconds of this process's waited-for children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(args: list[str], cache: Path) -> tuple[float, float]:
    """Wall time and CPU time of ``specnsys *args*`` (its pool's or cluster's processes
    included: the command waits for them)."""
    env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache)}
    cpu = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", *args], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"specnsys {' '.join(args)} failed: {done.stderr.strip()}")
    return wall, _children_cpu() - cpu


_WORK = """
import os, statistics, sys, tempfile, time
from specnsys.runset.collect import analyse_trace
settings = {"rules": None, "pid": None, "specnsys": "bench"}
times = []
for i, trace in enumerate(sys.argv[1:]):
    os.environ["SPECNSYS_CACHE_DIR"] = tempfile.mkdtemp(prefix="work-cache-")
    started = time.perf_counter()
    analyse_trace(trace, settings, {})
    if i:  # the first pays the imports of the analysis: not per-trace work
        times.append(time.perf_counter() - started)
print(statistics.median(times))
"""


def _work_per_trace(traces: list[Path]) -> float:
    """Median seconds of one trace's analysis as a worker runs it, imports already paid."""
    done = subprocess.run(
        [sys.executable, "-c", _WORK, *map(str, traces)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"analyse_trace failed: {done.stderr.strip()}")
    return float(done.stdout.split()[-1])


def _run_tcp(args: list[str], workers: int, cache: Path) -> float:
    """*args* with ``--dask`` at a tcp:// scheduler of *workers* worker processes started
    here (their cache folder *cache*); the wall time of the command only (the workers' CPU
    time is not the command's: they outlive it)."""
    from distributed import LocalCluster

    os.environ["SPECNSYS_CACHE_DIR"] = str(cache)  # the worker processes inherit it
    try:
        with LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        ) as cluster:
            return _run([*args, "--dask", cluster.scheduler_address], cache)[0]
    finally:
        del os.environ["SPECNSYS_CACHE_DIR"]


def _traces(folder: Path, n: int) -> list[Path]:
    samples = sorted(SAMPLES.glob("*.sqlite"))
    folder.mkdir(parents=True)
    out = []
    for i in range(n):
        src = samples[i % len(samples)]
        target = folder / f"{src.stem}_copy{i:03d}.sqlite"
        shutil.copyfile(src, target)
        out.append(target)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=int, default=48, help="traces collected (>= 9)")
    ap.add_argument("--repeat", type=int, default=1, help="repetitions (median reported)")
    ap.add_argument("--no-dask", action="store_true", help="skip the Dask LocalCluster runs")
    args = ap.parse_args()
    dask = not args.no_dask and importlib.util.find_spec("distributed") is not None
    print(f"usable cores {usable_cores()}  load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="specnsys-bench-collect-") as tmp:
        root = Path(tmp)
        traces = _traces(root / "traces", args.traces)
        size = sum(p.stat().st_size for p in traces)
        print(f"load: {len(traces)} traces, {size / 1e6:.1f} MB ({len(traces) // 8} copies of "
              "each of the 8 sample traces)")
        contenders: dict[str, list[str]] = {
            "collect pool, 1 worker": ["--workers", "1"],
            "collect pool, 2 workers": ["--workers", "2"],
        }
        if dask:
            contenders["collect dask local, 1 worker"] = ["--dask", "local", "--workers", "1"]
            contenders["collect dask local, 2 workers"] = ["--dask", "local", "--workers", "2"]
            contenders["collect dask tcp, 1 worker"] = ["tcp", "1"]
            contenders["collect dask tcp, 2 workers"] = ["tcp", "2"]
        walls: dict[str, list[float]] = {name: [] for name in ["analyze (one trace)", *contenders]}
        cpus: dict[str, list[float]] = {name: [] for name in contenders}
        works: list[float] = []
        for rep in range(args.repeat):
            works.append(_work_per_trace(traces[:9]))
            singles = []
            for i, trace in enumerate(traces[:8]):
                singles.append(_run(["analyze", str(trace)], root / f"cache-a{rep}-{i}")[0])
            walls["analyze (one trace)"].append(statistics.median(singles))
            for name, extra in contenders.items():
                tag = f"{rep}-{name.replace(' ', '_').replace(',', '')}"
                command = ["collect", str(root / "traces"), "-o", str(root / f"ds-{tag}")]
                if extra[0] == "tcp":
                    walls[name].append(_run_tcp(command, int(extra[1]), root / f"cache-{tag}"))
                else:
                    wall, cpu = _run([*command, *extra], root / f"cache-{tag}")
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        single = statistics.median(walls["analyze (one trace)"])
        work = statistics.median(works)
        print(f"\nwork per trace (analyse_trace, imports paid, cold cache, median of 8): "
              f"{work:.3f} s")
        print(f"{'contender':<32}{'wall s':>9}{'traces/s':>10}{'x analyze':>11}{'overhead s':>12}"
              f"{'CPU s':>8}{'busy cores':>12}")
        print(f"{'analyze (one trace, median of 8)':<32}{single:>9.2f}{1 / single:>10.2f}"
              f"{1.0:>11.2f}{single - work:>12.3f}")
        medians = {name: statistics.median(w) for name, w in walls.items()}
        cpu_of = {name: statistics.median(c) for name, c in cpus.items() if c}
        for name in contenders:
            wall = medians[name]
            per = wall / len(traces)
            workers = 2 if "2 workers" in name else 1
            cpu = cpu_of.get(name)
            busy = f"{cpu:>8.2f}{cpu / wall:>12.2f}" if cpu is not None else f"{'n/a':>8}{'':>12}"
            print(f"{name:<32}{wall:>9.2f}{len(traces) / wall:>10.2f}{per / single:>11.2f}"
                  f"{per * workers - work:>12.3f}{busy}")
        cores = usable_cores()
        for kind in ("pool", "dask local", "dask tcp"):
            one, two = f"collect {kind}, 1 worker", f"collect {kind}, 2 workers"
            if one in medians and two in medians:
                line = f"{kind}: 2 workers / 1 worker throughput = {medians[one] / medians[two]:.2f}x"
                if one in cpu_of:
                    # the same work on every core at once is the most 2 workers can gain
                    line += (f" (the 1-worker run kept {cpu_of[one] / medians[one]:.2f} cores busy: "
                             f"on {cores} cores the same work gains at most "
                             f"{cores * medians[one] / cpu_of[one]:.2f}x)")
                print(line)
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
