"""The advisor's commands on a long workload: warm ``forecast`` and ``advise`` of a bench export
against a warm ``analyze`` of the same export (the analysis they start from).

The forecast fits its cost model on the trace and simulates the workload's requests through
the serving loop at every configuration it reports (``forecasting/simulate.py``); ``advise``
forecasts again with each cut. The bench export of 2M kernels holds 9,136 requests. The cache
is built first (one cold ``analyze``), so every figure is of a warm run.

Prints, for each command, the median of ``--repeat`` runs: wall, CPU and peak RSS, and the
wall over the warm analyze's. ``--commands`` picks others that read the same cache:
``export`` (the Perfetto JSON of the window, at most 2,000,000 events, written to a temporary
file), ``ranges``, ``kernels``, ``phases``; ``analyze`` is always run first (the reference).

Usage: python bench/advise.py [--kernels 2000000] [--repeat 3] [--commands forecast,advise]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from common import Run, Shape, compile_specnsys, ensure_export, load_average, run_measured

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHOICES = ("forecast", "advise", "export", "ranges", "kernels", "phases")


def _argv(command: str, path: Path, scratch: Path) -> list[str]:
    if command == "export":
        return ["export", "--format", "perfetto", "-o", str(scratch / "export.json"), str(path)]
    return [command, "--json", str(path)]


def measure(path: Path, repeat: int, commands: tuple[str, ...]) -> dict[str, Run]:
    """The median warm run of ``analyze`` and each of *commands* on *path*, after one cold
    analyze."""
    cache = Path(tempfile.mkdtemp(prefix="specnsys-advise-cache-"))
    scratch = Path(tempfile.mkdtemp(prefix="specnsys-advise-out-"))
    env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    order = ("analyze", *commands)
    runs: dict[str, list[Run]] = {c: [] for c in order}
    try:
        for _ in range(repeat + 1):  # the first round builds the cache: not counted
            for command in order:
                run = run_measured(
                    [sys.executable, "-m", "specnsys", *_argv(command, path, scratch)], env=env
                )
                if not run.ok:
                    raise SystemExit(f"{command} failed: {run.stderr.strip()[-400:]}")
                runs[command].append(run)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return {c: sorted(r[1:], key=lambda x: x.wall_s)[len(r[1:]) // 2] for c, r in runs.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--commands", default="forecast,advise",
                        help=f"comma-separated, of {', '.join(CHOICES)}")  # fmt: skip
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    commands = tuple(c for c in args.commands.split(",") if c)
    if not commands or any(c not in CHOICES for c in commands):
        parser.error(f"--commands: comma-separated, of {', '.join(CHOICES)}")
    compile_specnsys()
    path, _ = ensure_export(args.kernels, Shape())
    print(f"load {load_average()}; {path.name}, warm runs (median of {args.repeat})")
    found = measure(path, args.repeat, commands)
    base = found["analyze"].wall_s
    for command, run in found.items():
        print(f"  {command:8s} {run.wall_s:6.2f} s = {run.wall_s / base:5.2f}x the warm analyze, "
              f"{run.cpu_s or 0:6.2f} CPU-s, peak {run.peak_rss_mb:5.0f} MiB")  # fmt: skip
    print(f"load {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
