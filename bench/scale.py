"""Scale benchmark (issue 7): specnsys on large exports, side by side with the usual tools.

For each size, on one export built by :mod:`common` (a speculative-decoding server: many
requests, draft/verify/sample/kv/sync per step, marks, runtime rows with correlation ids), and
all in the same run with the file in the page cache:

- bare scan: the ``sqlite3`` shell totalling every column specnsys reads (the floor for any
  reader that goes through SQLite);
- specnsys reader alone: specnsys's own SQLite reader over the same sources, every slice
  dropped as it arrives (``bench/reader_floor.py``): what turning SQLite's values into Arrow
  costs before the build does anything with them;
- specnsys cold: ``specnsys analyze --json`` (``phases --json`` on builds without ``analyze``)
  with an empty cache: export -> model -> cache -> attribution -> metrics;
- specnsys ingest only: a cold ``specnsys.open`` (how much of the cold run is ingest);
- specnsys warm: the same command again, from the cache;
- ``nsys stats -r nvtxgpuproj,gpukernsum`` (NVIDIA's own projection), with a timeout;
- a straightforward pandas implementation of the same attribution
  (``bench/pandas_attribution.py``), with a timeout and an address-space cap; its per-phase
  times are checked against specnsys's.

Each contender runs in its own process; wall time, peak RSS and CPU time (user + system) come
from ``wait4`` (that process and its children). The cold run's CPU time divided by the cores is
the least wall time any schedule of that work could take on the cores the bench may use (its
CPU affinity and quota: ``taskset -c 0`` measures one core): printed beside the goal, it says
how much of the cold/bare ratio parallelism could still remove. The load average is printed
with each size: other work on the machine slows every contender, so compare ratios within one
size. ``--repeat N`` runs the bare
scan and the three specnsys runs in turn N times and reports each one's median run and every
repetition's cold/bare ratio (this machine's speed drifts by up to 30% within the hour).

Usage:
  python bench/scale.py                      # quick: 0.2M, 0.63M, 2M kernels (a few minutes)
  python bench/scale.py --preset full        # 2M, 6.3M, 20M kernels (>= 20M kernels, 10M NVTX)
  python bench/scale.py --kernels 5000000 --no-nsys --no-pandas
  python bench/scale.py --kernels 2000000 --no-nsys --no-pandas --repeat 5
  taskset -c 0 python bench/scale.py --kernels 2000000 --no-nsys --no-pandas --repeat 3  # 1 core
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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
    usable_cores,
)

from specnsys.runset.sizing import analysis_memory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PRESETS = {
    "quick": (200_000, 632_000, 2_000_000),
    "full": (2_000_000, 6_325_000, 20_000_000),
}
#: nsys stats timeouts per preset (seconds): its nvtxgpuproj does not finish on 1M kernels in
#: 5 minutes here, so the quick preset only shows that it is still running.
NSYS_TIMEOUT = {"quick": 60.0, "full": 600.0}


def _page_cache(path: Path) -> None:
    """Read *path* once so every contender starts with it in the page cache."""
    with path.open("rb") as handle:
        while handle.read(1 << 24):
            pass


def _analysis_command() -> list[str]:
    """``specnsys analyze --json`` when this build has it, else ``specnsys phases --json``."""
    probe = subprocess.run(
        [sys.executable, "-m", "specnsys", "analyze", "--help"],
        capture_output=True,
        cwd=ROOT,
        check=False,
    )
    command = "analyze" if probe.returncode == 0 else "phases"
    return [sys.executable, "-m", "specnsys", command, "--json"]


def _phase_walls(doc: dict) -> dict[str, float]:
    return {
        name: float(row["wall_ns"])
        for name, row in doc.get("phases", {}).items()
        if isinstance(row, dict) and row.get("wall_ns")
    }


def _agreement(ours: dict[str, float], theirs: dict[str, float], window: float) -> str:
    """Largest per-phase difference between two attributions, as a fraction of the window."""
    names = set(ours) | set(theirs)
    worst = max((abs(ours.get(n, 0.0) - theirs.get(n, 0.0)) for n in names), default=0.0)
    return f"max per-phase difference {worst:.0f} ns ({worst / window:.1e} of the window)"


def measure(kernels: int, args: argparse.Namespace, analysis: list[str]) -> dict[str, object]:
    path, built = ensure_export(kernels, Shape())
    size = path.stat().st_size
    row = {"export": path.name, "bytes": size, "build_s": built}
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    for name, table in (
        ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"),
        ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME"),
        ("nvtx", "NVTX_EVENTS"),
    ):
        row[name] = con.execute(f'SELECT max(rowid) FROM "{table}"').fetchall()[0][0]
    con.close()
    _page_cache(path)
    row["load_before"] = load_average()
    results: dict[str, Run] = {}
    cap = args.rss_cap_gb * 1024

    # With --repeat, bare scan, cold, warm and cold open run in turn N times, so that each
    # repetition's ratios come from the same minutes of a machine whose speed drifts; the
    # row keeps each contender's median run and every repetition's cold/bare ratio.
    repeats: dict[str, list[Run]] = {
        "bare": [], "reader": [], "cold": [], "warm": [], "ingest": []
    }  # fmt: skip
    cmd, script = bare_scan_command(path)
    for _ in range(args.repeat):
        repeats["bare"].append(run_measured(cmd, stdin=script, timeout=args.timeout))
        cache = Path(tempfile.mkdtemp(prefix="specnsys-scale-cache-"))
        env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
        repeats["reader"].append(
            run_measured(
                [sys.executable, str(HERE / "reader_floor.py"), str(path)],
                env=env, timeout=args.timeout, rss_cap_mb=cap,
            )  # fmt: skip
        )
        try:
            for key in ("cold", "warm"):
                repeats[key].append(
                    run_measured(
                        [*analysis, str(path)], env=env, timeout=args.timeout, rss_cap_mb=cap
                    )
                )
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            repeats["ingest"].append(
                run_measured(
                    [
                        sys.executable,
                        "-c",
                        "import sys, specnsys; specnsys.open(sys.argv[1]).close()",
                        str(path),
                    ],
                    env=env,
                    timeout=args.timeout,
                    rss_cap_mb=cap,
                )
            )
            row["cache_bytes"] = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    for key, runs in repeats.items():
        results[key] = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]  # the median run
    row["repeat"] = args.repeat
    row["cold_over_bare"] = [
        round(c.wall_s / b.wall_s, 3)
        for b, c in zip(repeats["bare"], repeats["cold"], strict=True)
        if c.ok
    ]

    if not args.no_nsys and shutil.which("nsys"):
        with tempfile.TemporaryDirectory(prefix="specnsys-scale-nsys-") as tmp:
            results["nsys"] = run_measured(
                [
                    "nsys",
                    "stats",
                    "-r",
                    "nvtxgpuproj,gpukernsum",
                    "-f",
                    "csv",
                    "--force-export",
                    "false",
                    "-o",
                    str(Path(tmp) / "stats"),
                    str(path),
                ],
                timeout=args.nsys_timeout,
                rss_cap_mb=cap,
            )
    if not args.no_pandas:
        results["pandas"] = run_measured(
            [sys.executable, str(HERE / "pandas_attribution.py"), str(path)],
            timeout=args.pandas_timeout,
            rss_cap_mb=cap,
        )
    row["load_after"] = load_average()

    for key, run in results.items():
        row[key] = {
            "wall_s": run.wall_s,
            "peak_rss_mb": run.peak_rss_mb,
            "returncode": run.returncode,
            "killed_for_memory": run.killed_for_memory,
            "cpu_s": run.cpu_s,
        }
        if not run.ok and not run.timed_out:
            row[key]["error"] = (run.stderr.strip().splitlines() or ["?"])[-1][:200]
    cold = results["cold"]
    if cold.ok and "pandas" in results and results["pandas"].ok:
        ours = json.loads(cold.stdout)
        theirs = json.loads(results["pandas"].stdout)
        row["pandas_check"] = _agreement(
            _phase_walls(ours), theirs["phases"], float(ours["window_ns"])
        )
    return row


def _fmt_run(row: dict, key: str, ref: float | None, ref_name: str, size: int) -> str:
    r = row.get(key)
    if r is None:
        return "not run"
    if r["killed_for_memory"]:
        return f"killed after {r['wall_s']:.0f} s: resident memory passed the cap"
    if r["returncode"] is None:
        return f"> {r['wall_s']:.0f} s (timed out), peak RSS >= {r['peak_rss_mb']:.0f} MiB"
    text = f"{r['wall_s']:8.2f} s   peak RSS {r['peak_rss_mb']:6.0f} MiB ({r['peak_rss_mb'] * 2**20 / size:.2f}x file)"
    if r.get("cpu_s") is not None:
        text += f"   CPU {r['cpu_s']:6.2f} s"
    if r["returncode"] != 0:
        return text + f"   FAILED (exit {r['returncode']}: {r.get('error', '')})"
    if ref:
        text += f"   {r['wall_s'] / ref:.2f}x {ref_name}"
    return text


def report(row: dict, analysis_name: str) -> str:
    size = int(row["bytes"])  # type: ignore[arg-type]
    bare = row["bare"]["wall_s"]
    cold = row["cold"]["wall_s"] if row["cold"]["returncode"] == 0 else None
    built = f", built in {row['build_s']:.1f} s" if row["build_s"] else ""
    lines = [
        f"== {row['export']}: {size / 1e6:,.0f} MB, kernels {row['kernels']:,}, runtime "
        f"{row['runtime']:,}, nvtx {row['nvtx']:,}{built}",
        f"   load average before {row['load_before']}, after {row['load_after']} "
        f"({_cores_text(usable_cores())} usable)",
        f"   {'bare sqlite3 scan of the columns read':<40}{_fmt_run(row, 'bare', None, '', size)}",
        *(
            [f"   {'specnsys reader alone (rows dropped)':<40}"
             f"{_fmt_run(row, 'reader', bare, 'bare scan', size)}"]
            if "reader" in row else []
        ),  # fmt: skip
        f"   {f'specnsys {analysis_name} cold':<40}"
        f"{_fmt_run(row, 'cold', bare, 'bare scan', size)}   (goal <= 2x, issue 35)",
        *_floor_lines(row),
        *(
            [
                f"   {'  cold/bare of each repetition':<40}"
                + ", ".join(f"{r:.2f}x" for r in row["cold_over_bare"])
                + f" (median {statistics.median(row['cold_over_bare']):.2f}x; each figure "
                f"above is the median of {row['repeat']} runs)"
            ]
            if row.get("repeat", 1) > 1 and row.get("cold_over_bare")
            else []
        ),
        f"   {'  of which ingest (cold open alone)':<40}"
        f"{_fmt_run(row, 'ingest', bare, 'bare scan', size)}",
        f"   {f'specnsys {analysis_name} warm':<40}{_fmt_run(row, 'warm', None, '', size)}"
        + (
            f"   cold/warm {cold / row['warm']['wall_s']:.1f}x (goal >= 10x)"
            if cold and row["warm"]["returncode"] == 0
            else ""
        ),
    ]
    if row["cold"]["returncode"] == 0:
        budget = analysis_memory(size) / 2**20  # the 300 MiB + 1.5x the file
        peak = row["cold"]["peak_rss_mb"]
        lines.append(
            f"   {'cold peak RSS against its budget':<40}{peak:8.0f} MiB of 300 MiB + 1.5x file = "
            f"{budget:.0f} MiB ({peak / budget:.2f}x; goal <= 1x, issue 35)"
        )
    if "cache_bytes" in row:
        lines.append(f"   {'cache size':<40}{row['cache_bytes'] / 1e6:8.0f} MB")
    for key, label in (
        ("nsys", "nsys stats nvtxgpuproj,gpukernsum"),
        ("pandas", "pandas implementation"),
    ):
        if key in row:
            text = _fmt_run(row, key, cold, "specnsys cold", size)
            if row[key]["returncode"] is None and not row[key]["killed_for_memory"] and cold:
                text += f"   (> {row[key]['wall_s'] / cold:.0f}x specnsys cold)"
            lines.append(f"   {label:<40}{text}")
    if "pandas_check" in row:
        lines.append(f"   {'pandas vs specnsys phase times':<40}{row['pandas_check']}")
    return "\n".join(lines)


def _floor_lines(row: dict) -> list[str]:
    """The cold run's CPU time against the bare scan's, and the least wall time that CPU time
    allows on the cores the bench may use (no schedule of the same work runs faster; run the
    bench under ``taskset -c 0`` for one core)."""
    cold, bare = row["cold"], row["bare"]
    if cold["returncode"] != 0 or not cold.get("cpu_s") or not bare.get("cpu_s"):
        return []
    cores = usable_cores()
    least = cold["cpu_s"] / cores
    return [
        f"   {'  cold CPU time, and the least wall':<40}{cold['cpu_s']:8.2f} CPU-s = "
        f"{cold['cpu_s'] / bare['cpu_s']:.1f}x the bare scan's; on {_cores_text(cores)} at least "
        f"{least:.2f} s = {least / bare['wall_s']:.2f}x the bare scan's wall"
    ]


def _cores_text(cores: int) -> str:
    return f"{cores} core{'s' if cores != 1 else ''}"


def scaling(rows: list[dict]) -> str:
    """Time and RSS per million rows at each size: flat columns mean linear cost."""
    lines = [
        "== scaling (per million source rows; flat = linear)",
        f"   {'export MB':>10}{'rows M':>9}{'cold s/M':>10}{'warm s/M':>10}"
        f"{'bare s/M':>10}{'cold RSS/file':>15}",
    ]
    for row in rows:
        rows_m = (row["kernels"] + row["runtime"] + row["nvtx"]) / 1e6
        cold, warm, bare = row["cold"], row["warm"], row["bare"]
        lines.append(
            f"   {row['bytes'] / 1e6:>10,.0f}{rows_m:>9.1f}{cold['wall_s'] / rows_m:>10.3f}"
            f"{warm['wall_s'] / rows_m:>10.3f}{bare['wall_s'] / rows_m:>10.3f}"
            f"{cold['peak_rss_mb'] * 2**20 / row['bytes']:>15.2f}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick")
    parser.add_argument("--kernels", type=int, nargs="+", help="sizes (kernel rows) to run")
    parser.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="limit for each specnsys run and the bare scan (s)",
    )
    parser.add_argument("--nsys-timeout", type=float, help="limit for nsys stats (s)")
    parser.add_argument("--pandas-timeout", type=float, default=1200.0)
    parser.add_argument(
        "--rss-cap-gb",
        type=float,
        default=12.0,
        help="kill any contender whose resident memory passes this, so none "
        "can exhaust a shared machine (reported as such)",
    )
    parser.add_argument("--no-nsys", action="store_true")
    parser.add_argument("--no-pandas", action="store_true")
    parser.add_argument(
        "--clean",
        action="store_true",
        help="delete each export after measuring it (they are kept in bench/out/ "
        "otherwise, to be reused)",
    )
    parser.add_argument("--json-out", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the bare scan and specnsys (cold, warm, cold open) N times in turn and "
        "report each one's median run and every repetition's cold/bare ratio",
    )
    args = parser.parse_args()
    sizes = args.kernels or PRESETS[args.preset]
    if args.nsys_timeout is None:
        args.nsys_timeout = NSYS_TIMEOUT[args.preset]
    compile_specnsys()
    analysis = _analysis_command()
    analysis_name = analysis[-2]
    rows = []
    for kernels in sizes:
        started = time.perf_counter()
        row = measure(kernels, args, analysis)
        row["measured_s"] = time.perf_counter() - started
        rows.append(row)
        print(report(row, analysis_name), flush=True)
        if args.clean:
            (OUT / str(row["export"])).unlink(missing_ok=True)
    if len(rows) > 1:
        print(scaling(rows))
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
