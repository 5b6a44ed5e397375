"""Round 3 of the hostile pass on the ingest layer (issue 30): each finding, reproduced.

(e) NVTX events of an unknown ``eventType``, (f) dangling ``StringIds`` references and (k) mark
payloads stored as text were dropped or zeroed silently: each is now a data-quality warning
with its count. (h) ``read_csv(..., store_rejects=true, rejects_table='nvtx')`` through
``Trace.sql`` made temporary tables that shadowed the model. (i) A cached Parquet damaged in the
middle was never rebuilt. (l) ``SPECNSYS_MEMORY_LIMIT`` was checked on a cold cache only, and
``1PB`` was refused by a message that said 1MB-1000PB was allowed.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import specnsys
from specnsys.errors import SpecnsysWarning, UsageError
from specnsys.ingest.memory_limits import explicit_memory_limit
from specnsys.ingest.readonly_sql import ReadOnlyQueryError
from tests.cli_driver import run_one
from tests.conftest import SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"


def _one_line_error(result: dict[str, object], status: int = 2) -> str:
    assert result["traceback"] is None, result["traceback"]
    assert result["status"] == status, (result["argv"], result["status"], result["stderr"])
    assert result["stdout"] == ""
    (line,) = str(result["stderr"]).splitlines()
    assert line.startswith("specnsys: error: ")
    return line


# --- (l) SPECNSYS_MEMORY_LIMIT ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["1MB", "1 mib", "8GB", "1PB", "2.5PiB", "1000PB"])
def test_every_size_the_message_allows_is_taken_and_duckdb_reads_it(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message says 1MB to 1000PB: ``1PB`` was refused (the units stopped at TB)."""
    monkeypatch.setenv("SPECNSYS_MEMORY_LIMIT", value)
    limit = explicit_memory_limit()
    assert limit is not None and limit.endswith("KiB")
    duckdb.connect().execute("SET memory_limit = ?", [limit])  # DuckDB reads what is handed over


@pytest.mark.parametrize("value", ["999KB", "1001PB", "1000PiB", "1EB", "lots"])
def test_sizes_outside_the_stated_range_are_refused_with_that_range(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECNSYS_MEMORY_LIMIT", value)
    with pytest.raises(UsageError, match="from 1MB to 1000PB"):
        explicit_memory_limit()


def test_a_bad_memory_limit_is_refused_on_a_warm_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second ``phases`` reads its result from the cache and never opens DuckDB: it
    exited 0 with ``SPECNSYS_MEMORY_LIMIT=lots`` while the cold run refused it."""
    argv = ["phases", str(TRACE)]
    assert run_one(argv)["status"] == 0  # builds the cache entry and stores the phases
    assert run_one(argv)["status"] == 0
    monkeypatch.setenv("SPECNSYS_MEMORY_LIMIT", "lots")
    line = _one_line_error(run_one(argv))
    assert "SPECNSYS_MEMORY_LIMIT='lots'" in line and "from 1MB to 1000PB" in line


# --- (h) read_csv(store_rejects=...) through Trace.sql ---------------------------------------


def _rejecting_csv(folder: Path) -> Path:
    """A CSV with a row DuckDB rejects (a text in an integer column)."""
    path = folder / "bad.csv"
    path.write_text("a,b\n1,2\n3,4\nx,y\n")
    return path


@pytest.mark.parametrize(
    "arguments",
    [
        "store_rejects=true, rejects_table='nvtx'",
        "rejects_table := 'kernels'",
        "\"STORE_REJECTS\" = true",
        "store_rejects=true, rejects_scan='kernels'",
    ],
)
def test_csv_reject_tables_are_refused(arguments: str, tmp_path: Path) -> None:
    """``read_csv(..., store_rejects=true, rejects_table='nvtx')`` made temporary tables
    ``nvtx`` and ``reject_scans``, which shadowed the model for the rest of the session."""
    csv = _rejecting_csv(tmp_path)
    with specnsys.open(TRACE) as t:
        before = t.sql("SELECT count(*) FROM nvtx").fetchall()
        for query in (
            f"SELECT * FROM read_csv('{csv}', {arguments})",
            f"SELECT * FROM (SELECT * FROM sniff_csv('{csv}', {arguments}))",
        ):
            with pytest.raises(ReadOnlyQueryError, match="rows it rejects in new tables"):
                t.sql(query)
        assert t.sql("SELECT count(*) FROM nvtx").fetchall() == before
        assert t.connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary"
        ).fetchall() == [(0,)]
        # reading the CSV without those parameters still works
        typed = "columns={'a': 'BIGINT', 'b': 'BIGINT'}, header=true, ignore_errors=true"
        assert len(t.sql(f"SELECT * FROM read_csv('{csv}', {typed})").fetchall()) == 2


def test_the_cli_refuses_reject_tables_in_one_line(tmp_path: Path) -> None:
    csv = _rejecting_csv(tmp_path)
    line = _one_line_error(
        run_one(["sql", str(TRACE), f"SELECT * FROM read_csv('{csv}', store_rejects=true)"])
    )
    assert "store_rejects" in line


def test_a_temporary_table_left_on_the_connection_is_dropped_before_the_next_query() -> None:
    """The second line: whatever made a temporary table ``kernels`` on the trace's connection
    (here the connection itself, which the library hands out), the next ``sql()`` reads the
    model's ``kernels`` again, and says what it dropped."""
    with specnsys.open(TRACE) as t:
        (model_count,) = t.sql("SELECT count(*) FROM kernels").fetchall()[0]
        t.connection.execute("CREATE TEMP TABLE kernels AS SELECT 1 AS x FROM range(7)")
        t.connection.execute("CREATE TEMP TABLE reject_scans AS SELECT 1 AS x")
        with pytest.warns(SpecnsysWarning, match="temporary table.*kernels.*shadowed"):
            rows = t.sql("SELECT count(*) FROM kernels").fetchall()
        assert rows == [(model_count,)]
        assert t.connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary"
        ).fetchall() == [(0,)]
