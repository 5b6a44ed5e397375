"""Round 3 of the hostile pass on the ingest layer (issue 30): each finding, reproduced.

(e) NVTX events of an unknown ``eventType``, (f) dangling ``StringIds`` references and (k) mark
payloads stored as text were dropped or zeroed silently: each is now a data-quality warning
with its count. (h) ``read_csv(..., store_rejects=true, rejects_table='nvtx')`` through
``Trace.sql`` made temporary tables that shadowed the model. (i) A cached Parquet damaged in the
middle was never rebuilt. (l) ``SPECNSYS_MEMORY_LIMIT`` was checked on a cold cache only, and
``1PB`` was refused by a message that said 1MB-1000PB was allowed.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest

import specnsys
from specnsys.errors import SpecnsysWarning, UsageError
from specnsys.ingest import cache
from specnsys.ingest.cache import CHECK_HEAD_BYTES, CHECK_TAIL_BYTES
from specnsys.ingest.memory_limits import explicit_memory_limit
from specnsys.ingest.readonly_sql import ReadOnlyQueryError
from tests import hostile_corpus
from tests.cli_driver import CommandRun, run_one
from tests.conftest import SAMPLE_TRACES

TRACE = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"


def _one_line_error(result: CommandRun, status: int = 2) -> str:
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


# --- (e) (f) (k) what the model cannot show is a data-quality warning with its count -----------


def _edited_copy(folder: Path, *statements: str, source: Path = TRACE) -> Path:
    """A copy of a real export with *statements* applied (the original is never touched)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / source.name
    shutil.copyfile(source, path)
    con = sqlite3.connect(path)
    try:
        for sql in statements:
            con.execute(sql)
        con.commit()
    finally:
        con.close()
    return path


def _notes_of(path: Path, pattern: str) -> list[str]:
    return [w for w in specnsys.analyze(path).data_warnings if re.search(pattern, w)]


def test_unknown_nvtx_event_types_are_kept_and_said(tmp_path: Path) -> None:
    """13 phase ranges and marks given an event type nsys does not write (61) were dropped
    silently by every analysis (the hostile pass: tokens 256 -> 243, verify -51 %). They stay
    in the model (kind 'other', their raw type kept), and a warning counts them by type."""
    path = _edited_copy(
        tmp_path,
        "UPDATE NVTX_EVENTS SET eventType = 61 WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS "
        "WHERE eventType = 59 ORDER BY rowid LIMIT 10)",
        "UPDATE NVTX_EVENTS SET eventType = 200 WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS "
        "WHERE eventType = 34 ORDER BY rowid LIMIT 3)",
    )
    (note,) = _notes_of(path, "event type")
    assert note.startswith(f"{path}: 13 NVTX event(s)") and "(eventType 61: 10, 200: 3)" in note
    with specnsys.open(path) as t:
        assert t.sql("SELECT count(*) FROM nvtx WHERE kind = 'other' AND event_type IN (61, 200)"
                     ).fetchall() == [(13,)]  # fmt: skip
        assert t.summary.row_counts["nvtx"] == sqlite3.connect(path).execute(
            "SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]  # fmt: skip
    assert not _notes_of(TRACE, "event type")  # the real capture has none


def test_nvtx_naming_event_types_are_not_reported(tmp_path: Path) -> None:
    """Rows naming CUDA devices, contexts and streams (97-99) carry nothing the analyses
    read: no warning."""
    path = _edited_copy(
        tmp_path,
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid) "
        "SELECT start, 97 + (rowid % 3), 'name', globalTid FROM NVTX_EVENTS LIMIT 6",
    )
    assert not _notes_of(path, "event type")


def test_dangling_string_ids_are_counted_per_table(tmp_path: Path) -> None:
    """Removing the ``request`` string turned 8 requests into 3 and shrank the window by 41 %
    without a word; kernels whose names are gone showed as "(unnamed)". Each table with
    names that resolve to nothing is one warning with its count."""
    path = _edited_copy(
        tmp_path, "DELETE FROM StringIds WHERE value IN ('request', 'sample')"
    )
    expected = sqlite3.connect(path).execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE textId IS NOT NULL "
        "AND textId NOT IN (SELECT id FROM StringIds)"
    ).fetchone()[0]
    assert expected == 8 + 33
    (note,) = _notes_of(path, "StringIds")
    assert f"{expected} nvtx row(s) refer to string ids that are not in StringIds" in note
    assert f"text: {expected}" in note and "no phase, mark or request" in note

    (tmp_path / "built").mkdir()
    loop = hostile_corpus.good_loop(tmp_path / "built", steps=6)
    kernels = _edited_copy(tmp_path / "loop", "DELETE FROM StringIds WHERE value LIKE 'gemm%'",
                           source=loop)  # fmt: skip
    (note,) = _notes_of(kernels, "StringIds")
    assert "6 kernels row(s)" in note and "short_name: 6, demangled_name: 6" in note
    assert not _notes_of(TRACE, "StringIds")


def test_a_text_mark_payload_is_read_when_it_is_a_number_and_said_when_it_is_not(
    tmp_path: Path,
) -> None:
    """A ``tokens`` payload stored as text counted as 0 tokens silently (SQLite's CAST reads
    'lots' as 0). A text that holds the number is read as that number; any other is NULL and
    counted in a warning."""
    base = specnsys.analyze(TRACE).to_dict()
    tokens = base["tokens"]
    # int64Value has INTEGER affinity, where '8' would be stored as 8: the table is written
    # again with columns of no declared type (as a hand-made export may be), where it stays text
    path = _edited_copy(tmp_path, "ALTER TABLE NVTX_EVENTS RENAME TO typed")
    con = sqlite3.connect(path)
    columns = ", ".join(f'"{row[1]}"' for row in con.execute("PRAGMA table_info(typed)"))
    con.execute(f"CREATE TABLE NVTX_EVENTS ({columns})")
    con.execute("INSERT INTO NVTX_EVENTS SELECT * FROM typed ORDER BY rowid")
    con.execute("DROP TABLE typed")
    tokens_id = con.execute("SELECT id FROM StringIds WHERE value = 'tokens'").fetchone()[0]
    con.execute(f"UPDATE NVTX_EVENTS SET int64Value = CAST(int64Value AS TEXT) "
                f"WHERE textId = {tokens_id}")  # fmt: skip
    con.commit()
    assert con.execute(f"SELECT DISTINCT typeof(int64Value) FROM NVTX_EVENTS "
                       f"WHERE textId = {tokens_id}").fetchall() == [("text",)]  # fmt: skip
    con.close()
    as_text = specnsys.analyze(path)
    assert as_text.to_dict()["tokens"] == tokens == 256  # "8" is read as 8
    assert not [w for w in as_text.data_warnings if "not numbers" in w]

    con = sqlite3.connect(path)
    con.execute(f"UPDATE NVTX_EVENTS SET int64Value = 'lots' WHERE rowid IN (SELECT rowid FROM "
                f"NVTX_EVENTS WHERE textId = {tokens_id} ORDER BY rowid LIMIT 5)")  # fmt: skip
    con.commit()
    con.close()
    (note,) = _notes_of(path, "not numbers")
    assert "5 value(s) of NVTX_EVENTS.int64Value" in note and "read as NULL" in note
    assert "a tokens mark counts no token" in note
    with specnsys.open(path) as t:
        assert t.sql("SELECT count(*) FROM nvtx WHERE text = 'tokens' AND payload_int IS NULL"
                     ).fetchall() == [(5,)]  # fmt: skip


# --- (i) a cached Parquet damaged in the middle ------------------------------------------------


def _long_trace(folder: Path) -> Path:
    """A built export whose ``nvtx.parquet`` is larger than the ends the manifest checks."""
    b = hostile_corpus._builder()
    for i in range(20_000):  # distinct texts and durations: pages that do not compress away
        b.push_pop(i * 100_000, i * 100_000 + (i * 7919) % 99_991, f"range {i}", domain_id=1)
    folder.mkdir(parents=True, exist_ok=True)
    return b.write(folder / "long.sqlite")


def _damage_the_middle(parquet: Path) -> None:
    """Overwrite bytes in the middle of *parquet* (not its ends) until a full read fails."""
    import pyarrow.parquet as pq

    good = parquet.read_bytes()
    assert len(good) > CHECK_HEAD_BYTES + CHECK_TAIL_BYTES + 8192
    for offset in range(CHECK_HEAD_BYTES, len(good) - CHECK_TAIL_BYTES - 64, 512):
        bad = bytearray(good)
        bad[offset : offset + 64] = b"\xde\xad\xbe\xef" * 16
        parquet.write_bytes(bytes(bad))
        try:
            pq.read_table(parquet)
        except Exception:  # noqa: BLE001 - damaged as wanted
            return
    pytest.fail("no damage in the middle made the file unreadable")


def test_a_cache_file_damaged_in_the_middle_is_rebuilt_once(
    tmp_path: Path, isolated_cache: Path
) -> None:
    """The manifest checks each file's size and ends; a page damaged in the middle showed
    only when the query decoded it, and ``sql`` exited 2 blaming the query ("SQL error"),
    every time. The read failure drops the entry; the command runs again on a rebuilt one,
    with the same answer and one warning."""
    trace = _long_trace(tmp_path)
    query = ["sql", str(trace), "SELECT count(*), sum(duration), count(DISTINCT text) FROM nvtx",
             "--format", "csv"]  # fmt: skip
    first = run_one(query)
    assert first["status"] == 0, first["stderr"]
    (entry,) = [p for p in isolated_cache.iterdir() if (p / "manifest.json").is_file()]
    _damage_the_middle(entry / "nvtx.parquet")
    damaged = run_one(query)
    assert damaged["status"] == 0 and damaged["traceback"] is None, damaged["stderr"]
    assert damaged["stdout"] == first["stdout"]
    (warning,) = str(damaged["stderr"]).splitlines()
    assert warning.startswith(f"specnsys: warning: {trace}: its cache entry was damaged")
    assert "nvtx.parquet does not read" in warning and "built again" in warning
    assert cache.unreadable_file(entry) is None  # the entry in place is a new, whole one
    again = run_one(query)
    assert again["status"] == 0 and again["stderr"] == "" and again["stdout"] == first["stdout"]

    # an analysis on the damaged entry (was: exit 3, "Varint-decoding found too large number"),
    # damaged all through its middle so that whatever columns it reads fail
    parquet = entry / "nvtx.parquet"
    bad = bytearray(parquet.read_bytes())
    for offset in range(CHECK_HEAD_BYTES, len(bad) - CHECK_TAIL_BYTES - 16, 256):
        bad[offset : offset + 16] = b"\xde\xad\xbe\xef" * 4
    parquet.write_bytes(bytes(bad))
    assert cache.unreadable_file(entry) is not None
    ranges = run_one(["ranges", str(trace), "--json"])
    assert ranges["status"] == 0, ranges["stderr"]
    assert "its cache entry was damaged" in str(ranges["stderr"])


def test_a_query_error_on_a_whole_cache_is_the_query_s(tmp_path: Path, isolated_cache: Path) -> None:
    """An error of the kind a damaged file raises (DuckDB's Invalid Input), from the query
    itself: the entry reads whole, so nothing is rebuilt and the error is the query's."""
    trace = _long_trace(tmp_path)
    assert run_one(["sql", str(trace), "SELECT count(*) FROM nvtx"])["status"] == 0
    (entry,) = [p for p in isolated_cache.iterdir() if (p / "manifest.json").is_file()]
    built = (entry / "nvtx.parquet").stat().st_mtime_ns
    line = _one_line_error(run_one(["sql", str(trace), "SELECT error('boom') FROM nvtx"]))
    assert "SQL error" in line and "boom" in line
    assert (entry / "nvtx.parquet").stat().st_mtime_ns == built
