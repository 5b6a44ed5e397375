"""The info and sql commands, end to end in a subprocess, on a bundled real capture."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl

from tests.conftest import SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
PHASE_QUERY = (
    "SELECT text AS phase, count(*) AS n FROM nvtx WHERE domain = 'specnsys' "
    "AND kind = 'push_pop' GROUP BY 1 ORDER BY 1"
)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=120
    )
    return done


def test_info_text_leads_with_versions_and_capabilities() -> None:
    done = run_cli("info", str(TRACE))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.splitlines()[1].startswith("producer  nsys 2022.4.2.1 (schema 3.0.0)")
    assert "nvtx" in out and "specnsys_phases" in out and "NVTX domains: specnsys" in out
    assert "cache     written:" in out
    again = run_cli("info", str(TRACE))
    assert "cache     reused:" in again.stdout


def test_info_json_is_machine_readable() -> None:
    done = run_cli("info", "--json", str(TRACE))
    doc = json.loads(done.stdout)
    assert doc["version"]["product_version"] == "2022.4.2.1"
    assert doc["row_counts"]["nvtx"] == doc["source_row_counts"]["NVTX_EVENTS"] > 0
    assert doc["capabilities"]["acceptance_marks"]["available"] is True
    assert doc["capabilities"]["phase_attribution"]["available"] is False
    assert doc["span_ns"] == doc["span_end_ns"] - doc["span_start_ns"] > 0
    assert [p["name"] for p in doc["processes"]] == ["python"]


def test_sql_table_csv_json_and_parquet_agree(tmp_path: Path) -> None:
    table = run_cli("sql", str(TRACE), PHASE_QUERY)
    assert table.returncode == 0 and "verify" in table.stdout and "draft" in table.stdout
    rows_csv = list(csv.DictReader(io.StringIO(run_cli("sql", str(TRACE), PHASE_QUERY,
                                                       "--format", "csv").stdout)))
    rows_json = json.loads(run_cli("sql", str(TRACE), PHASE_QUERY, "--format", "json").stdout)
    out = tmp_path / "phases.parquet"
    done = run_cli("sql", str(TRACE), PHASE_QUERY, "--format", "parquet", "-o", str(out))
    assert done.returncode == 0 and done.stdout == ""
    frame = pl.read_parquet(out)
    assert [r["phase"] for r in rows_csv] == [r["phase"] for r in rows_json] == frame["phase"].to_list()
    assert [int(r["n"]) for r in rows_csv] == [r["n"] for r in rows_json] == frame["n"].to_list()
    assert {"decode", "draft", "verify", "sample", "kv", "sync", "schedule"} <= set(frame["phase"])


def test_sql_output_file_and_parquet_needs_output(tmp_path: Path) -> None:
    out = tmp_path / "k.csv"
    done = run_cli("sql", str(TRACE), "SELECT 1 AS one", "--format", "csv", "-o", str(out))
    assert done.returncode == 0 and out.read_text().splitlines() == ["one", "1"]
    done = run_cli("sql", str(TRACE), "SELECT 1", "--format", "parquet")
    assert done.returncode == 2 and "needs -o" in done.stderr


def test_no_cache_flag(isolated_cache: Path) -> None:
    done = run_cli("--no-cache", "info", str(TRACE))
    assert done.returncode == 0 and "not used" in done.stdout
    assert list(isolated_cache.iterdir()) == []


def test_phases_text_and_json() -> None:
    done = run_cli("phases", str(TRACE))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    total = [line for line in lines if line.startswith("total ")]
    assert len(total) == 1 and total[0].endswith("100.0%")
    assert any(line.startswith("draft ") for line in lines)
    doc = json.loads(run_cli("phases", "--json", str(TRACE)).stdout)
    assert sum(p["wall_ns"] for p in doc["phases"].values()) == doc["window_ns"] > 0
    assert abs(sum(p["share"] for p in doc["phases"].values()) - 1.0) < 1e-9
    assert doc["phases"]["verify"]["wall_ns"] > 0 and doc["phases"]["forward"]["wall_ns"] == 0


def test_phases_says_gpu_columns_are_not_available_on_a_cpu_only_capture() -> None:
    text = run_cli("phases", str(TRACE)).stdout
    assert "GPU busy n/a" in text and "GPU columns: not available (no GPU activity" in text
    doc = json.loads(run_cli("phases", "--json", str(TRACE)).stdout)
    assert doc["gpu_union_ns"] is None and doc["phases"]["draft"]["gpu_busy_ns"] is None
    assert set(doc["not_available"]) == {"gpu", "cuda_api"}


def test_phases_unknown_pid_is_one_line_and_status_2() -> None:
    done = run_cli("phases", "--pid", "9", str(TRACE))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "process 9 has no phase ranges" in done.stderr
