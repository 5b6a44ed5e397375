"""A cold open hands the build's DuckDB database on to the trace's analyses instead of making a
second one (specnsys.ingest.build.DatabaseHandover): one database per cold open, holding
nothing of the build, with the analysis's settings; a database DuckDB will not set up again
is replaced, never reused half set up. Inside ``databases.reusing()`` (collect's workers with
no user metric) a closed trace's database serves the next trace, emptied of the first."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

import specnsys
from specnsys.ingest import databases
from specnsys.ingest.connection import SPILL_PREFIX, analysis_connection
from specnsys.metrics import registry
from specnsys.metrics.registry import Metric
from specnsys.runset import collect
from specnsys.testing import NsysExportBuilder


def _export(tmp_path: Path, kernels: int = 1) -> Path:
    b = NsysExportBuilder()
    b.process(10, "python3")
    b.thread(10, 10, "python3")
    b.domain(1, "specnsys", pid=10, tid=10)
    b.push_pop(100, 1000, "decode", pid=10, tid=10, domain_id=1)
    b.push_pop(110, 400, "draft", pid=10, tid=10, domain_id=1)
    for i in range(kernels):
        b.runtime(120 + 30 * i, 130 + 30 * i, "cudaLaunchKernel", 11 + i, pid=10, tid=10)
        b.kernel(150 + 30 * i, 170 + 30 * i, "draft_gemm", 11 + i, pid=10)
    b.gpu(0)
    tmp_path.mkdir(parents=True, exist_ok=True)
    return b.write(tmp_path / f"t{kernels}.sqlite")


@pytest.fixture
def counted_databases(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every ``duckdb.connect`` call from here on, counted (each makes a new database); no
    database kept by an earlier test of this process, and none left for a later one."""
    databases.close_kept()
    made: list[int] = []
    real: Callable[..., duckdb.DuckDBPyConnection] = duckdb.connect

    def connect(*args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", connect)
    yield made
    databases.close_kept()


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


def _kernels(trace: specnsys.Trace) -> int:
    return int(trace.connection.execute("SELECT count(*) FROM kernels").fetchall()[0][0])


def test_inside_reusing_a_closed_traces_database_serves_the_next_one_emptied(
    tmp_path: Path, isolated_cache: Path, counted_databases: list[int]
) -> None:
    """Two cold opens and a warm one, one database: the second trace sees its own tables and
    nothing the first left (a registered table, a view), with a new database's settings."""
    first, second = _export(tmp_path / "a", kernels=1), _export(tmp_path / "b", kernels=3)
    names = ("threads", "memory_limit", "disabled_optimizers", "asof_loop_join_threshold")
    with databases.reusing():
        with specnsys.open(first) as a:
            assert _kernels(a) == 1
            a.connection.register("left_behind", a.table("kernels").collect().to_arrow())
            a.connection.execute("CREATE VIEW also_left AS SELECT 1 AS x")
            a.connection.execute("SET GLOBAL threads = 1")
            held = a.connection
        with specnsys.open(second) as b:
            assert b.connection is held  # the same database, not a new one
            assert _kernels(b) == 3
            objects = b.connection.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal "
                "AND view_name IN ('left_behind', 'also_left')"
            ).fetchall()
            assert objects == []
            reused = _settings(b.connection, names)
        with specnsys.open(first) as warm:
            assert warm.from_cache is True and _kernels(warm) == 1
    assert len(counted_databases) == 1
    with specnsys.open(second) as fresh:  # outside the block: a database of its own
        assert _settings(fresh.connection, names) == reused
    assert len(counted_databases) == 2


def test_outside_reusing_a_closed_traces_database_is_closed(
    tmp_path: Path, isolated_cache: Path, counted_databases: list[int]
) -> None:
    with specnsys.open(_export(tmp_path)) as trace:
        con = trace.connection
        assert _kernels(trace) == 1
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    with specnsys.open(_export(tmp_path / "b", kernels=2)) as other:
        assert _kernels(other) == 2
    assert len(counted_databases) == 2


def _user_metric(ctx: object) -> int:
    return 1


def test_a_collect_worker_reuses_a_database_only_without_a_users_metric(
    tmp_path: Path, isolated_cache: Path, counted_databases: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registered metric is a user's code with the trace's connection: what it leaves in
    the database (a macro, a table) must not reach the next trace, so its worker makes a new
    database per trace."""
    monkeypatch.setattr(registry, "METRICS", registry.METRICS)  # _safe adopts the given ones
    traces = [str(_export(tmp_path / name, kernels=k)) for name, k in (("a", 1), ("b", 2))]
    for path in traces:
        outcome = collect._safe(path, {}, {}, ())
        assert not isinstance(outcome, str), outcome
    assert len(counted_databases) == 1
    databases.close_kept()
    metric = (Metric("user_metric", _user_metric, str),)
    for path in traces:
        outcome = collect._safe(path, {"use_cache": False}, {}, metric)
        assert not isinstance(outcome, str), outcome
    assert len(counted_databases) == 3
