"""A cold open hands the build's DuckDB database on to the trace's analyses instead of making a
second one (specnsys.ingest.build.DatabaseHandover): one database per cold open, holding
nothing of the build, with the analysis's settings; a database DuckDB will not set up again
is replaced, never reused half set up."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import specnsys
from specnsys.ingest.connection import SPILL_PREFIX, analysis_connection
from specnsys.testing import NsysExportBuilder


def _export(tmp_path: Path) -> Path:
    b = NsysExportBuilder()
    b.process(10, "python3")
    b.thread(10, 10, "python3")
    b.domain(1, "specnsys", pid=10, tid=10)
    b.push_pop(100, 1000, "decode", pid=10, tid=10, domain_id=1)
    b.push_pop(110, 400, "draft", pid=10, tid=10, domain_id=1)
    b.runtime(120, 130, "cudaLaunchKernel", 11, pid=10, tid=10)
    b.kernel(150, 390, "draft_gemm", 11, pid=10)
    b.gpu(0)
    return b.write(tmp_path / "t.sqlite")


@pytest.fixture
def counted_databases(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every ``duckdb.connect`` call from here on, counted (each makes a new database)."""
    made: list[int] = []
    real: Callable[..., duckdb.DuckDBPyConnection] = duckdb.connect

    def connect(*args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", connect)
    return made


def _settings(con: duckdb.DuckDBPyConnection, names: tuple[str, ...]) -> dict[str, str]:
    listed = ", ".join(f"'{n}'" for n in names)
    return dict(
        con.execute(f"SELECT name, value FROM duckdb_settings() WHERE name IN ({listed})").fetchall()
    )


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_cold_open_makes_one_duckdb_database(
    tmp_path: Path, isolated_cache: Path, counted_databases: list[int], use_cache: bool
) -> None:
    path = _export(tmp_path)
    with specnsys.open(path, use_cache=use_cache) as trace:
        rows = trace.connection.execute("SELECT count(*) FROM kernels").fetchall()
        assert rows == [(1,)]
        assert len(counted_databases) == 1


def test_the_handed_over_database_holds_nothing_of_the_build(
    tmp_path: Path, isolated_cache: Path
) -> None:
    """The build's tables are gone and its settings (one thread, its spill folder, a disabled
    optimizer) are DuckDB's defaults again, under the analysis's own: as a warm open has."""
    path = _export(tmp_path)
    names = (
        "threads", "disabled_optimizers", "preserve_insertion_order", "memory_limit",
        "asof_loop_join_threshold", "allocator_flush_threshold", "enable_progress_bar",
    )  # fmt: skip
    with specnsys.open(path) as cold:
        assert cold.from_cache is False
        con = cold.connection
        tables = con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT temporary"
        ).fetchall()
        assert tables == []
        cold_settings = _settings(con, names)
        spill = _settings(con, ("temp_directory",))["temp_directory"]
    with specnsys.open(path) as warm:
        assert warm.from_cache is True
        warm_settings = _settings(warm.connection, names)
    assert cold_settings == warm_settings
    assert cold_settings["disabled_optimizers"] == ""
    assert int(cold_settings["threads"]) == int(_settings(duckdb.connect(), ("threads",))["threads"])
    assert Path(spill).name.startswith(SPILL_PREFIX)


def test_a_database_that_spilled_is_replaced_not_reused(tmp_path: Path) -> None:
    """DuckDB refuses to switch the temporary folder of a database that has spilled into it:
    the analysis then gets a new database, and the refused one is closed."""
    spilled = duckdb.connect(
        config={"memory_limit": "32MB", "threads": "1", "temp_directory": str(tmp_path),
                "preserve_insertion_order": "false"}
    )  # fmt: skip
    spilled.execute(
        "CREATE TABLE big AS SELECT range AS a, repeat('x', 40) || range AS b FROM range(2000000)"
    )
    spilled.execute("CREATE TABLE sorted AS SELECT * FROM big ORDER BY b DESC")
    assert spilled.execute("SELECT count(*) FROM duckdb_temporary_files()").fetchall()[0][0] > 0
    spilled.execute("DROP TABLE big")
    spilled.execute("DROP TABLE sorted")
    con = analysis_connection(10_000_000, spilled)
    try:
        assert con is not spilled
        assert _settings(con, ("enable_progress_bar",)) == {"enable_progress_bar": "false"}
        assert con.execute("SELECT 1").fetchall() == [(1,)]
        with pytest.raises(duckdb.ConnectionException):
            spilled.execute("SELECT 1")
    finally:
        con.close()
