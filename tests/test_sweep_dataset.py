"""The bundled real sweep (sample_traces/sweep, made by sample_traces/make_sweep.sh: 24 nsys
captures of the workload, k 0/2/4/6 x concurrency 1/4/8, two repeats) answers every run-set
command, and its numbers are the ones its runs' analyses hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl

DATASET = Path(__file__).resolve().parents[1] / "sample_traces" / "sweep"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=300
    )


def test_the_dataset_holds_the_whole_grid() -> None:
    runs = pl.scan_parquet(DATASET / "runs").collect()
    grid = runs.group_by("label_k", "label_concurrency").len()
    assert runs.height == 24 and grid.height == 12 and set(grid["len"]) == {2}
    assert set(runs["label_repeat"]) == {"1", "2"}
    assert set(runs.filter(pl.col("label_k") == "0")["mode"]) == {"baseline"}
    assert set(runs.filter(pl.col("label_k") != "0")["mode"]) == {"spec"}
    # each run's measured k (proposed marks) is its label
    spec = runs.filter(pl.col("mode") == "spec")
    assert (spec["k"].cast(pl.String) == spec["label_k"]).all()
    # every run's phases sum to its window
    phases = pl.scan_parquet(DATASET / "phases").collect()
    sums = phases.group_by("run_id").agg(pl.col("wall_ns").sum()).join(runs, on="run_id")
    assert (sums["wall_ns"] == sums["window_ns"]).all()


def test_sweep_answers_with_every_cell_a_crossover_per_k_and_the_best_k() -> None:
    done = _cli("sweep", str(DATASET), "--by", "k,concurrency", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert len(doc["cells"]) == 12 and doc["runs"] == 24
    assert len(doc["pairs"]) == 18  # each speculative run with the baseline of its repeat
    assert {c["labels"]["k"] for c in doc["crossover"]} == {"2", "4", "6"}
    for crossing in doc["crossover"]:  # the speedups it reports are the cells' medians
        assert [p["concurrency"] for p in crossing["points"]] == ["1", "4", "8"]
    best = {b["labels"]["concurrency"]: b for b in doc["best_k"]}
    assert set(best) == {"1", "4", "8"}
    for b in best.values():
        assert b["measured_speedup"] == max(b["candidates"].values())
        assert b["best_k"] in b["candidates"]


def test_sql_and_check_read_it() -> None:
    done = _cli("sql", str(DATASET), "SELECT count(*) AS n FROM steps JOIN runs USING (run_id) "
                "WHERE mode = 'spec'", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.splitlines()[1]) > 0
    same = _cli("check", str(DATASET), str(DATASET))
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.count("ok: ") == 12
