"""``specnsys schema``: the model reference cannot drift from the model the code builds.

The reference prints the declaration (specnsys/model/; tests/test_model_schema.py checks that
every reader builds it); here every column a real trace's DuckDB views and Polars frames show
(a real sample capture and a built legacy export) must appear with the same DuckDB and Polars
types and a meaning; text, JSON and docs/model.md must say the same thing.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specnsys.ingest import open_trace
from specnsys.ingest.model import MODEL_TABLES
from specnsys.model import MODEL_SCHEMA
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import REPO, SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

COMMANDS = [
    ["schema", "--json"],
    ["schema"],
    ["schema", "--markdown"],
    ["schema", "--json", "--markdown"],
    ["schema", "sample_traces/spec_chat_c4_k4.sqlite"],
]


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, ...], dict]:
    """Every command line of :data:`COMMANDS`, run in one fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(COMMANDS)],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=True,
    )
    return {tuple(r["argv"]): r for r in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def reference(runs: dict[tuple[str, ...], dict]) -> dict:
    run = runs[("schema", "--json")]
    assert run["status"] == 0 and run["stderr"] == "" and run["traceback"] is None
    return json.loads(run["stdout"])


def _legacy_export(folder: Path) -> Path:
    """A pre-2022 layout (no metadata, TARGET_INFO_GPU.deviceId) with GPU work and metrics."""
    b = NsysExportBuilder(legacy=True)
    b.thread(2, 3, "worker")
    b.push_pop(0, 50, "forward")
    b.runtime(1, 2, "cudaMemcpyAsync", 9, pid=2, tid=3)
    b.memcpy(3, 4, 8, 9, pid=2)
    b.gpu(1)
    b.gpu_metric(5, 1, 7, "SM Active", 3)
    return b.write(folder / "legacy.sqlite")


def _described(path: Path) -> dict[str, list[tuple[str, str, str]]]:
    """(column, DuckDB type, Polars type) of every model table of the export at *path*."""
    with open_trace(path) as trace:
        return {
            name: [
                (col, sql_type, str(trace.table(name).collect_schema()[col]))
                for col, sql_type, *_ in trace.sql(f'DESCRIBE "{name}"').fetchall()
            ]
            for name in MODEL_TABLES
        }


@pytest.mark.parametrize("export", ["sample", "legacy"])
def test_every_column_the_model_produces_is_listed_with_its_types_and_a_meaning(
    reference: dict, export: str, tmp_path: Path
) -> None:
    path = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite" if export == "sample" else _legacy_export(
        tmp_path
    )
    model = _described(path)
    listed = {t["name"]: t for t in reference["tables"]}
    assert list(listed) == list(MODEL_TABLES)
    for name, columns in model.items():
        table = listed[name]
        assert [(c["name"], c["type"], c["polars_type"]) for c in table["columns"]] == columns
        assert table["meaning"] and table["sources"], name
        assert all(c["meaning"] for c in table["columns"]), name


def test_the_reference_is_the_declaration(reference: dict) -> None:
    """Names, meanings and nullability as declared in specnsys/model/, in its order."""
    assert [t["name"] for t in reference["tables"]] == [t.name for t in MODEL_SCHEMA]
    for table, declared in zip(reference["tables"], MODEL_SCHEMA, strict=True):
        assert table["meaning"] == declared.meaning
        assert [(c["name"], c["meaning"], c["nullable"]) for c in table["columns"]] == [
            (c.name, c.meaning, c.nullable) for c in declared.columns
        ]


def test_graphs_and_the_source_tables_are_named(reference: dict) -> None:
    sources = {t["name"]: t["sources"] for t in reference["tables"]}
    assert sources["graphs"] == ["CUPTI_ACTIVITY_KIND_GRAPH_TRACE"]
    assert sources["nvtx"] == ["NVTX_EVENTS"]
    assert sources["gpu_metrics"] == ["GPU_METRICS", "TARGET_INFO_GPU_METRICS"]


def test_text_has_one_aligned_block_per_table_with_the_json_content(
    runs: dict[tuple[str, ...], dict], reference: dict
) -> None:
    run = runs[("schema",)]
    assert run["status"] == 0 and run["stderr"] == ""
    blocks = run["stdout"].rstrip("\n").split("\n\n")[1:]  # the conventions come first
    assert len(blocks) == len(reference["tables"])
    for block, table in zip(blocks, reference["tables"], strict=True):
        title, header, *rows = block.split("\n")
        sources = " + ".join(table["sources"])
        assert title == f"{table['name']}  (from {sources}): {table['meaning']}"
        assert header.split() == ["column", "type", "polars", "meaning"]
        starts = [header.index(word) for word in ("type", "polars", "meaning")]
        for row, column in zip(rows, table["columns"], strict=True):
            cells = (column["name"], column["type"], column["polars_type"])
            assert tuple(re.split(r"\s{2,}", row.strip(), maxsplit=3)[:3]) == cells
            assert [row[s - 1] for s in starts] == [" "] * 3  # every column starts aligned
            assert row[starts[2]:] == column["meaning"]


def test_docs_model_md_is_the_current_markdown_output(runs: dict[tuple[str, ...], dict]) -> None:
    run = runs[("schema", "--markdown")]
    assert run["status"] == 0 and run["stderr"] == ""
    assert (REPO / "docs" / "model.md").read_text() == run["stdout"], (
        "docs/model.md is stale: run `specnsys schema --markdown > docs/model.md`"
    )


@pytest.mark.parametrize("argv", [("schema", "--json", "--markdown"),
                                  ("schema", "sample_traces/spec_chat_c4_k4.sqlite")])
def test_usage_errors_are_one_line_and_exit_2(
    runs: dict[tuple[str, ...], dict], argv: tuple[str, ...]
) -> None:
    run = runs[argv]
    assert run["status"] == 2 and run["stdout"] == "" and run["traceback"] is None
    assert len(run["stderr"].splitlines()) == 1
    assert run["stderr"].startswith("specnsys: error: ")


def test_a_full_output_is_exit_2_with_one_line() -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "specnsys", "schema"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO,
        )
    assert done.returncode == 2
    assert done.stderr.startswith("specnsys: error: cannot write to standard output")
    assert len(done.stderr.splitlines()) == 1
