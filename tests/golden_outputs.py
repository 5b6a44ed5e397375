"""Every command's output on the sample traces and the real corpus, written to a folder, so that
a refactoring can be checked byte-for-byte: run it before and after, then ``diff -r``.

    python -m tests.golden_outputs OUT_DIR [--corpus-only | --samples-only]

Each command line runs through :mod:`tests.cli_driver` (one process per trace, a fresh cache
folder per run) and leaves ``<trace>/<n>-<command>.txt`` with its exit status, stdout and
stderr; figures and reports go beside it. Warnings and errors are kept: they are output too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import SAMPLE_TRACES, corpus_files

REPO = Path(__file__).resolve().parents[1]
BASELINE = SAMPLE_TRACES / "baseline_chat_c4.sqlite"


def sample_commands(trace: Path, out: Path) -> list[list[str]]:
    t = str(trace)
    lines = [
        ["info", t], ["info", t, "--json"],
        ["phases", t], ["phases", t, "--json"], ["phases", t, "--rules", "nvtx", "--json"],
        ["analyze", t], ["analyze", t, "--json"],
        ["kernels", t, "--json"], ["ranges", t, "--json"], ["ranges", t, "--instances", "--json"],
        ["whatif", t, "--json"],
        ["sql", t, "SELECT text, count(*) AS n FROM nvtx GROUP BY 1 ORDER BY 1", "--format", "csv"],
        ["plot", "phases", t, "-o", str(out / "phases.svg")],
        ["plot", "timeline", t, "-o", str(out / "timeline.svg")],
    ]
    if trace.name.startswith("spec_"):
        lines += [
            ["compare", str(BASELINE), t], ["compare", str(BASELINE), t, "--json"],
            ["plot", "amdahl", str(BASELINE), t, "-o", str(out / "amdahl.svg")],
            ["plot", "acceptance", t, "-o", str(out / "acceptance.svg")],
            ["report", t, str(BASELINE), "-o", str(out / "report.html")],
        ]
    return lines


def corpus_commands(trace: Path, out: Path) -> list[list[str]]:
    t = str(trace)
    return [
        ["info", t, "--json"], ["kernels", t, "--json"], ["ranges", t, "--json"],
        ["phases", t, "--rules", "nvtx", "--json"], ["analyze", t, "--json"],
        ["analyze", t, "--rules", "nvtx", "--json"],
    ]


def run_batch(lines: list[list[str]], cache: Path) -> list[dict]:
    env = {**os.environ, "SPECNSYS_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(lines)], capture_output=True,
        text=True, cwd=REPO, env=env, timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"cli_driver failed on {lines[0]}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def write(out_dir: Path, traces: list[tuple[Path, str]]) -> None:
    for trace, kind in traces:
        folder = out_dir / trace.stem
        folder.mkdir(parents=True, exist_ok=True)
        make = sample_commands if kind == "sample" else corpus_commands
        lines = make(trace, folder)
        with tempfile.TemporaryDirectory() as cache:
            results = run_batch(lines, Path(cache))
        for result in results:  # the cache folder's name is new each run
            for stream in ("stdout", "stderr"):
                result[stream] = result[stream].replace(cache, "<cache>")
        for n, result in enumerate(results):
            name = f"{n:02d}-{'_'.join(a for a in result['argv'][:2] if '/' not in a)}.txt"
            text = (
                f"argv: {' '.join(Path(a).name if '/' in a else a for a in result['argv'])}\n"
                f"status: {result['status']}\ntraceback: {result['traceback']}\n"
                f"--- stdout\n{result['stdout']}--- stderr\n{result['stderr']}"
            )
            (folder / name).write_text(text.replace(str(REPO), "<repo>").replace(str(folder), "<out>"))
        print(trace.name, "done", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--samples-only", action="store_true")
    which.add_argument("--corpus-only", action="store_true")
    args = parser.parse_args()
    traces: list[tuple[Path, str]] = []
    if not args.corpus_only:
        traces += [(p, "sample") for p in sorted(SAMPLE_TRACES.glob("*.sqlite"))]
    if not args.samples_only:
        traces += [(p, "corpus") for p in corpus_files()]
    write(args.out_dir, traces)


if __name__ == "__main__":
    main()
