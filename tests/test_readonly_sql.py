"""``specnsys sql`` and ``Trace.sql`` run read-only: nothing a query says can change the export,
the cache or any other file; refusals are one line with status 2."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import specnsys
from specnsys.ingest.readonly_sql import ReadOnlyQueryError, check_read_only, lock_down
from tests.conftest import sha256
from tests.hostile_corpus import good_loop

ALLOWED = [
    "SELECT count(*) FROM kernels",
    "select 1;",
    "  -- a comment\n SELECT 1",
    "/* leading */ SELECT 1",
    "WITH k AS (SELECT * FROM kernels) SELECT count(*) FROM k",
    "FROM kernels LIMIT 1",
    "DESCRIBE kernels",
    "SHOW TABLES",
    "SUMMARIZE kernels",
    "EXPLAIN SELECT * FROM kernels",
    "EXPLAIN ANALYZE SELECT count(*) FROM nvtx",
    "EXPLAIN (FORMAT JSON) SELECT 1",
    "EXPLAIN -- a comment\n ANALYZE /* another */ SELECT count(*) FROM nvtx",
    "FROM range(3) t(x)",
    "SELECT * FROM duckdb_settings() WHERE name = 'threads'",
    "SELECT upper(name) FROM kernels, LATERAL (SELECT * FROM range(2)) r",
    "PRAGMA table_info('kernels')",
    "PRAGMA show_tables",
    "PIVOT (SELECT 'a' AS k, 1 AS v) ON k USING sum(v)",
    "UNPIVOT (SELECT 1 AS a, 2 AS b) ON a, b",
]

# (statement with {export}, {cache}, {out} placeholders, the word the refusal names)
REFUSED = [
    ("DROP VIEW kernels", "DROP"),
    ("CREATE TABLE t AS SELECT * FROM kernels", "CREATE"),
    ("CREATE OR REPLACE VIEW kernels AS SELECT 1 AS x", "CREATE"),
    ("INSERT INTO kernels SELECT * FROM kernels", "INSERT"),
    ("UPDATE kernels SET start = 0", "UPDATE"),
    ("DELETE FROM nvtx", "DELETE"),
    ("TRUNCATE nvtx", "TRUNCATE"),
    ("ALTER VIEW kernels RENAME TO k2", "ALTER"),
    ("COPY (SELECT 1) TO '{export}'", "COPY"),
    ("COPY (SELECT 1 AS x) TO '{cache}/kernels.parquet' (FORMAT parquet)", "COPY"),
    ("COPY kernels TO '{out}'", "COPY"),
    ("EXPORT DATABASE '{out}'", "EXPORT"),
    ("IMPORT DATABASE '{out}'", "IMPORT"),
    ("COPY FROM DATABASE memory TO scratch", "COPY"),
    ("ATTACH '{export}' AS ex (TYPE sqlite)", "ATTACH"),
    ("ATTACH '{out}' AS scratch", "ATTACH"),
    ("DETACH memory", "DETACH"),
    ("INSTALL sqlite", "INSTALL/LOAD"),
    ("LOAD sqlite", "INSTALL/LOAD"),
    ("FORCE INSTALL httpfs", "INSTALL/LOAD"),
    ("SET enable_external_access = true", "SET"),
    ("SET profiling_output = '{export}'", "SET"),
    ("RESET allowed_directories", "RESET"),
    ("USE memory", "USE"),
    ("MERGE INTO kernels USING kernels AS s ON false WHEN NOT MATCHED THEN INSERT *", "MERGE"),
    ("PRAGMA enable_profiling", "PRAGMA"),
    ("PRAGMA profiling_output = '{export}'", "PRAGMA"),
    ("CALL pragma_version()", "CALL"),
    ("CHECKPOINT", "CHECKPOINT"),
    ("VACUUM", "VACUUM"),
    ("BEGIN TRANSACTION", "BEGIN"),
    ("PREPARE p AS SELECT 1", "PREPARE"),
    ("EXPLAIN ANALYZE COPY (SELECT 1) TO '{out}'", "COPY"),
    ("EXPLAIN (ANALYZE) COPY (SELECT 1) TO '{out}'", "COPY"),
    ("EXPLAIN COPY kernels TO '{out}'", "COPY"),  # runs nothing, but is of no use either
    ("EXPLAIN /**/ ANALYZE COPY (SELECT 1) TO '{out}'", "COPY"),
    ("EXPLAIN -- c\nANALYZE COPY (SELECT 1) TO '{out}'", "COPY"),
    ("EXPLAIN (ANALYSE) COPY (SELECT 1) TO '{out}'", "COPY"),
    ("EXPLAIN ANALYZE SELECT * FROM enable_logging(storage_path='{out}')", "enable_logging"),
    ("SELECT * FROM enable_logging(storage='file', storage_path='{out}')", "enable_logging"),
    ("SELECT * FROM enable_profiling(format='json', save_location='{out}')", "enable_profiling"),
    ("FROM kernels, LATERAL (FROM main.ENABLE_PROFILING()) p", "enable_profiling"),
    ('SELECT * FROM "Enable_Logging"()', "enable_logging"),
    ("SELECT * FROM query('SELECT 1')", "query"),
    ("SELECT * FROM checkpoint()", "checkpoint"),
    ("SELECT * FROM truncate_duckdb_logs()", "truncate_duckdb_logs"),
    ("SELECT * FROM sqlite_attach('{out}')", "sqlite_attach"),  # an extension's, autoloaded
    ("SELECT write_log('x')", "write_log"),
    ("PIVOT (SELECT * FROM enable_logging()) ON a USING count(*)", "enable_logging"),
    ("/* SELECT */ DROP VIEW kernels", "DROP"),
    ("-- SELECT\nCOPY (SELECT 1) TO '{out}'", "COPY"),
    ("SELECT 1; DROP VIEW kernels", "2 statements"),
    ("SELECT 1; COPY (SELECT 1) TO '{export}'", "2 statements"),
    ("SELECT 1;;; SELECT 2", "2 statements"),
    ("UPDATE EXTENSIONS", "unrecognized"),
]


@pytest.mark.parametrize("query", ALLOWED)
def test_reading_statements_pass(query: str) -> None:
    check_read_only(query)


@pytest.mark.parametrize(("query", "word"), REFUSED)
def test_writing_statements_are_refused(query: str, word: str) -> None:
    text = query.format(export="/x/e.sqlite", cache="/x/c", out="/x/o")
    with pytest.raises(ReadOnlyQueryError, match="refused") as info:
        check_read_only(text)
    message = str(info.value)
    assert word in message and "\n" not in message


def test_parse_errors_stay_duckdb_errors() -> None:
    with pytest.raises(duckdb.ParserException):
        check_read_only("SELEC 1")
    check_read_only("")  # nothing to run: nothing to refuse


def tree_digest(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file under *folder* (names and bytes)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def export(tmp_path: Path) -> Path:
    return good_loop(tmp_path)


def test_trace_sql_refuses_writes_and_nothing_changes(
    export: Path, isolated_cache: Path, tmp_path: Path
) -> None:
    with specnsys.open(export):
        pass  # write the cache entry
    before = sha256(export), tree_digest(isolated_cache)
    out = tmp_path / "out"
    with specnsys.open(export) as trace:
        assert trace.from_cache
        cache = trace.cache_folder
        assert cache is not None
        for query, _ in REFUSED:
            text = query.format(export=export, cache=cache, out=out)
            with pytest.raises(ReadOnlyQueryError):
                trace.sql(text)
        # the views are intact and still read the same data
        assert trace.sql("SELECT count(*) FROM kernels").fetchall() == [(20,)]
        assert trace.sql("SELECT count(*) FROM nvtx").fetchall() == [(82,)]
    assert (sha256(export), tree_digest(isolated_cache)) == before
    assert not out.exists()


def cli_batch(argvs: list[list[str]], cache: Path) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.cli_driver", json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPECNSYS_CACHE_DIR": str(cache)},
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cli_refuses_writes_with_one_line_and_nothing_changes(
    export: Path, isolated_cache: Path, tmp_path: Path
) -> None:
    with specnsys.open(export) as trace:
        cache = trace.cache_folder
    assert cache is not None
    before = sha256(export), tree_digest(isolated_cache)
    out = tmp_path / "out"
    argvs = [
        ["sql", str(export), query.format(export=export, cache=cache, out=out)]
        for query, _ in REFUSED
    ]
    results = cli_batch(argvs, isolated_cache)
    for (query, word), result in zip(REFUSED, results, strict=True):
        assert result["traceback"] is None, result
        assert result["status"] == 2, (query, result)
        lines = result["stderr"].strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("specnsys: error: refused"), (query, lines)
        assert word in lines[0] and result["stdout"] == ""
    assert (sha256(export), tree_digest(isolated_cache)) == before
    assert not out.exists()


def test_cli_output_file_may_not_be_the_export_or_the_cache(
    export: Path, isolated_cache: Path, tmp_path: Path
) -> None:
    hard_link = tmp_path / "hard.sqlite"
    os.link(export, hard_link)  # first: a new link changes the export's ctime, hence its key
    with specnsys.open(export) as trace:
        cache = trace.cache_folder
    assert cache is not None
    before = sha256(export), tree_digest(isolated_cache)
    query = "SELECT 1 AS x"
    targets = [export, hard_link, cache / "kernels.parquet", isolated_cache / "stray.csv"]
    argvs = [["sql", str(export), query, "--format", "csv", "-o", str(t)] for t in targets]
    for target, result in zip(targets, cli_batch(argvs, isolated_cache), strict=True):
        assert result["status"] == 2 and "refused to write the result" in result["stderr"], (
            target,
            result,
        )
    assert (sha256(export), tree_digest(isolated_cache)) == before
    fine = tmp_path / "result.csv"
    argv = ["sql", str(export), query, "--format", "csv", "-o", str(fine)]
    (ok,) = cli_batch([argv], isolated_cache)
    assert ok["status"] == 0 and fine.read_text().split() == ["x", "1"]


def test_cli_reads_still_work_after_lock_down(export: Path, isolated_cache: Path) -> None:
    queries = ["SELECT count(*) AS n FROM kernels", "DESCRIBE nvtx", "SUMMARIZE kernels"]
    for use_cache in (True, False):
        flag = [] if use_cache else ["--no-cache"]
        argvs = [[*flag, "sql", str(export), q, "--format", "json"] for q in queries]
        results = cli_batch(argvs, isolated_cache)
        assert [r["status"] for r in results] == [0, 0, 0], results
        assert json.loads(results[0]["stdout"]) == [{"n": 20}]


def test_cli_cannot_read_other_files(export: Path, isolated_cache: Path, tmp_path: Path) -> None:
    """The second line: after lock_down only the cache folder is readable."""
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    (result,) = cli_batch(
        [["sql", str(export), f"SELECT * FROM read_csv('{secret}')"]], isolated_cache
    )
    assert result["status"] == 2 and "disabled by configuration" in result["stderr"]


def test_lock_down_measured(export: Path, isolated_cache: Path, tmp_path: Path) -> None:
    """What DuckDB's file-access switch does and does not do (why the statement check exists).

    With access limited to the cache folder, the Parquet-backed views keep working, other
    files cannot be read or written, and the setting cannot be switched back; but writing
    *inside* the allowed folder still works, so only the statement check protects the cache.
    """
    with specnsys.open(export) as warm:
        pass
    with specnsys.open(export) as trace:
        assert trace.from_cache and trace.cache_folder is not None
        con = trace.connection
        lock_down(con, [trace.cache_folder])
        assert con.execute("SELECT count(*) FROM kernels").fetchall() == [(20,)]
        with pytest.raises(duckdb.PermissionException):
            con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'")
        with pytest.raises(duckdb.Error):
            con.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error, match="locked"):
            con.execute("SET allowed_directories = ['/']")
        victim = trace.cache_folder / "gpus.parquet"
        before = sha256(victim)
        con.execute(f"COPY (SELECT 42 AS x) TO '{victim}' (FORMAT parquet)")  # bypasses the check
        assert sha256(victim) != before  # so the check in Trace.sql is what protects the cache
    assert warm.cache_folder == trace.cache_folder
