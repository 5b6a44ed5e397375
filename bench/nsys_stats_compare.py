"""``nsys stats`` beside ``specnsys ranges`` on the three 2-GPU corpus exports (issue 22, item 17).

The README's timing claims for the real corpus come from this script. For each ``nsysai``
2-GPU export (see ``shared/traces/real/MANIFEST.md``: PyTorch training on 2x H100, 17-19k
NVTX rows, 3.4-4k kernels), all in the same run with the file in the page cache:

- ``nsys stats -r nvtxgpuproj,gpukernsum,nvtxsum`` (NVIDIA's projection, kernel and NVTX
  summaries) on a copy of the export: CLI wall time of the subprocess;
- ``specnsys ranges --instances`` as a CLI, cold (a fresh cache folder: export -> model ->
  cache -> projection) and warm (the same cache again): wall time of the subprocess,
  interpreter start and imports included;
- a bare ``python -c 'import specnsys.cli.main, ...'``: what interpreter start and imports
  alone cost of the CLI figures;
- in this process, after the imports, with the trace opened (untimed) from the warm cache:
  the projection alone (``nvtx_gpu_projection``), no interpreter start, no import, no ingest;
  its first run on the open trace (which also reads the model tables from the cache, as the
  warm CLI run does) and a second run on the same trace (the query alone).

``--repeat N`` runs every contender N times in turn (the machine's speed drifts, so each
repetition measures all of them in the same minutes) and reports the median of each. The load
average is printed before and after: on a shared machine the figures are noisy, compare the
ratios within one export.

Usage:
  python bench/nsys_stats_compare.py --repeat 3
  python bench/nsys_stats_compare.py --corpus /path/to/real --no-nsys
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import Run, compile_specnsys, load_average, run_measured

import specnsys
from specnsys.attribution.projection import nvtx_gpu_projection
from specnsys.cores import usable_cores

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = Path(os.environ.get("SPECNSYS_CORPUS", ROOT.parent / "shared" / "traces" / "real"))
EXPORTS = (
    "2026.2.1_nsysai_h100-2gpu-1s.sqlite",
    "2026.2.1_nsysai_mfu-2gpu-before.sqlite",
    "2026.2.1_nsysai_mfu-2gpu-after.sqlite",
)
NSYS_REPORTS = "nvtxgpuproj,gpukernsum,nvtxsum"
IMPORTS = (
    "import specnsys.cli.main, specnsys.attribution.projection, specnsys.render.projection_text"
)


@dataclass
class Load:
    """What one export holds: the size of the work every contender does."""

    path: Path
    mb: float
    nvtx_rows: int
    kernels: int


@dataclass
class Timings:
    """Every repetition's seconds per contender (None: that run failed)."""

    runs: dict[str, list[float | None]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, seconds: float | None, error: str = "") -> None:
        self.runs.setdefault(key, []).append(seconds)
        if error:
            self.errors.setdefault(key, error)

    def median(self, key: str) -> float | None:
        """Median of the runs, None when any run of *key* failed (a median of some would
        flatter it)."""
        values = self.runs.get(key, [])
        if not values or any(v is None for v in values):
            return None
        return statistics.median(v for v in values if v is not None)


def load_of(path: Path) -> Load:
    """Size, NVTX rows and kernel rows of *path*, read through a read-only connection."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:

        def count(table: str) -> int:
            return int(con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

        return Load(path, path.stat().st_size / 1e6, count("NVTX_EVENTS"),
                    count("CUPTI_ACTIVITY_KIND_KERNEL"))  # fmt: skip
    finally:
        con.close()


def _page_cache(path: Path) -> None:
    """Read *path* once so every contender starts with it in the page cache."""
    path.read_bytes()


def _record(timings: Timings, key: str, run: Run) -> None:
    if run.ok:
        timings.add(key, run.wall_s)
    else:
        reason = "timed out" if run.timed_out else f"exit {run.returncode}"
        last = (run.stderr.strip().splitlines() or [""])[-1][:160]
        timings.add(key, None, f"{reason}: {last}")


def _nsys_stats(copy: Path, out: Path, timeout: float) -> Run:
    return run_measured(
        ["nsys", "stats", "-r", NSYS_REPORTS, "-f", "csv", "--force-overwrite", "true",
         "-o", str(out / "stats"), str(copy)],
        timeout=timeout,
    )  # fmt: skip


def projection_seconds(path: Path, cache: Path) -> tuple[float, float]:
    """Two ``nvtx_gpu_projection`` runs of *path* in this process, imports done and the trace
    opened (untimed) from the warm *cache*: the first, as the warm CLI run has it (it also
    reads the model tables it needs from the cache), and a second one on the same open trace
    (the query alone)."""
    os.environ["SPECNSYS_CACHE_DIR"] = str(cache)
    with specnsys.open(path) as trace:
        times = []
        for _ in range(2):
            started = time.perf_counter()
            nvtx_gpu_projection(trace)
            times.append(time.perf_counter() - started)
    return times[0], times[1]


def measure(load: Load, args: argparse.Namespace) -> Timings:
    timings = Timings()
    ranges = [sys.executable, "-m", "specnsys", "ranges", "--instances", str(load.path)]
    with tempfile.TemporaryDirectory(prefix="specnsys-nsys-compare-") as tmp:
        work = Path(tmp)
        copy = work / load.path.name
        shutil.copyfile(load.path, copy)  # nsys stats reads a copy: the corpus stays untouched
        _page_cache(load.path)
        _page_cache(copy)
        for _ in range(args.repeat):
            if not args.no_nsys:
                _record(timings, "nsys", _nsys_stats(copy, work, args.nsys_timeout))
            cache = work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
            _record(timings, "cold", run_measured(ranges, env=env, timeout=args.timeout))
            _record(timings, "warm", run_measured(ranges, env=env, timeout=args.timeout))
            imports = [sys.executable, "-c", IMPORTS]
            _record(timings, "imports", run_measured(imports, env=env, timeout=args.timeout))
            first, again = projection_seconds(load.path, cache)
            timings.add("projection", first)
            timings.add("again", again)
    return timings


def _s(value: float | None) -> str:
    return "failed" if value is None else f"{value:.3f}"


def _ratio(num: float | None, den: float | None) -> str:
    return "-" if num is None or not den else f"{num / den:.0f}x"


def table(rows: list[tuple[Load, Timings]], args: argparse.Namespace, loads: str) -> str:
    head = (
        f"{'export':<40}{'MB':>6}{'NVTX':>8}{'kernels':>8} | {'nsys':>8}{'cold':>8}{'warm':>8}"
        f"{'imports':>8}{'proj':>8}{'again':>8} | {'nsys/cold':>10}{'nsys/warm':>10}"
        f"{'nsys/proj':>10}"
    )
    lines = [
        f"nsys stats -r {NSYS_REPORTS} vs specnsys ranges --instances; seconds, median of "
        f"{args.repeat} run(s); {usable_cores()} cores, load average {loads}",
        "  nsys    = `nsys stats` CLI wall time (subprocess: its own start included)",
        "  cold    = `specnsys ranges --instances` CLI wall time, fresh cache folder "
        "(interpreter start + imports + ingest + projection + print)",
        "  warm    = the same command on the same cache (interpreter start + imports included)",
        "  imports = `python -c 'import specnsys.cli.main, ...'` alone: the share of cold/warm "
        "that is interpreter start and imports",
        "  proj    = in this process, after imports, trace opened (untimed) from the warm cache: "
        "nvtx_gpu_projection() alone, first run (reads the cached tables it needs)",
        "  again   = a second nvtx_gpu_projection() on the same open trace: the query alone",
        "",
        head,
        "-" * len(head),
    ]
    for load, t in rows:
        nsys, cold, warm = t.median("nsys"), t.median("cold"), t.median("warm")
        proj = t.median("projection")
        lines.append(
            f"{load.path.stem:<40}{load.mb:>6.1f}{load.nvtx_rows:>8,}{load.kernels:>8,} | "
            f"{_s(nsys) if not args.no_nsys else 'not run':>8}{_s(cold):>8}{_s(warm):>8}"
            f"{_s(t.median('imports')):>8}{_s(proj):>8}{_s(t.median('again')):>8} | "
            f"{_ratio(nsys, cold):>10}{_ratio(nsys, warm):>10}{_ratio(nsys, proj):>10}"
        )
        for key, error in t.errors.items():
            lines.append(f"  {key} failed: {error}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", nargs="*", type=Path,
                        help=f"exports to compare (default: the three in {CORPUS})")  # fmt: skip
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="the real corpus folder")
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender (median)")
    parser.add_argument("--no-nsys", action="store_true", help="skip nsys stats")
    parser.add_argument("--nsys-timeout", type=float, default=600.0, help="per nsys run (s)")
    parser.add_argument("--timeout", type=float, default=300.0, help="per specnsys run (s)")
    args = parser.parse_args()
    paths = args.exports or [args.corpus / name for name in EXPORTS]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        print(f"nsys_stats_compare: missing exports: {', '.join(missing)}", file=sys.stderr)
        return 2
    if not args.no_nsys and shutil.which("nsys") is None:
        print("nsys_stats_compare: nsys is not on PATH (or pass --no-nsys)", file=sys.stderr)
        return 2
    compile_specnsys()
    before = load_average()
    rows = [(load, measure(load, args)) for load in map(load_of, paths)]
    print(table(rows, args, f"{before} before, {load_average()} after"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
