"""Bad input: one line on stderr, exit status 2, no traceback, the input file unchanged."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys.testing import NsysExportBuilder
from tests.conftest import sha256


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specnsys", *args], capture_output=True, text=True, timeout=120
    )


def _good_export(tmp_path: Path) -> Path:
    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    for i in range(2000):  # enough rows for several pages, so truncation cuts real data
        b.push_pop(i * 10, i * 10 + 5, f"range-{i % 7}")
        b.runtime(i * 10, i * 10 + 2, "cudaLaunchKernel_v7000", i)
        b.kernel(i * 10 + 3, i * 10 + 9, "k", i)
    return b.write(tmp_path / "good.sqlite")


def _no_nsys_tables(tmp_path: Path) -> Path:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'a')")
    con.commit()
    con.close()
    return path


def _empty_export(tmp_path: Path) -> Path:
    return NsysExportBuilder().write(tmp_path / "empty.sqlite")


def _truncated(tmp_path: Path, fraction: float) -> Path:
    good = _good_export(tmp_path)
    data = good.read_bytes()
    path = tmp_path / f"truncated-{fraction}.sqlite"
    path.write_bytes(data[: int(len(data) * fraction)])
    return path


def _text_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.sqlite"
    path.write_text("this is not a database\n")
    return path


def _zero_bytes(tmp_path: Path) -> Path:
    path = tmp_path / "zero.sqlite"
    path.write_bytes(b"")
    return path


def _header_only(tmp_path: Path) -> Path:
    path = tmp_path / "header.sqlite"
    path.write_bytes(_good_export(tmp_path).read_bytes()[:50])
    return path


CASES = {
    "non-sqlite file": (_text_file, "not an SQLite database"),
    "zero-byte file": (_zero_bytes, "empty file"),
    "header cut short": (_header_only, "truncated"),
    "truncated at 10%": (lambda p: _truncated(p, 0.1), "truncated"),
    "truncated at 60%": (lambda p: _truncated(p, 0.6), "truncated"),
    "truncated at 99%": (lambda p: _truncated(p, 0.99), "truncated"),
    "sqlite without nsys tables": (_no_nsys_tables, "without nsys tables"),
    "empty export": (_empty_export, "empty nsys export"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["info", "sql"])
def test_bad_file_gives_one_line_and_status_2(tmp_path: Path, case: str, command: str) -> None:
    make, expected = CASES[case]
    path = make(tmp_path)
    before = sha256(path)
    extra = ["SELECT 1"] if command == "sql" else []
    done = run_cli(command, str(path), *extra)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specnsys: error: "), done.stderr
    assert expected in lines[0] and str(path) in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert sha256(path) == before


def test_missing_path(tmp_path: Path) -> None:
    done = run_cli("info", str(tmp_path / "nope.sqlite"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"specnsys: error: {tmp_path / 'nope.sqlite'}: no such file"


def test_directory(tmp_path: Path) -> None:
    done = run_cli("info", str(tmp_path))
    assert done.returncode == 2
    assert "is a directory" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_report_without_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")
    monkeypatch.setenv("SPECNSYS_NSYS", str(tmp_path / "no-nsys-here"))
    with pytest.raises(specnsys.BadInputError, match="needs nsys on PATH"):
        specnsys.open(report)


def test_bad_usage_is_status_2(tmp_path: Path) -> None:
    done = run_cli("info")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_sql_error_is_one_line(tmp_path: Path) -> None:
    path = _good_export(tmp_path)
    done = run_cli("sql", str(path), "SELECT no_such_column FROM kernels")
    assert done.returncode == 2 and done.stderr.startswith("specnsys: error: SQL error:")
    assert len(done.stderr.strip().splitlines()) == 1


def test_good_export_is_not_modified_by_open_and_query(tmp_path: Path) -> None:
    path = _good_export(tmp_path)
    copy = tmp_path / "copy.sqlite"
    shutil.copy2(path, copy)
    before = sha256(path), path.stat().st_mtime_ns
    for _ in range(2):  # cold, then warm
        with specnsys.open(path) as t:
            assert t.sql("SELECT count(*) FROM kernels").fetchall() == [(2000,)]
    assert (sha256(path), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite", "good.sqlite"]


def test_out_of_memory_is_one_line_naming_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory limit too small for the work: exit 4 and the variable that raises it."""
    sample = Path(__file__).resolve().parents[1] / "sample_traces" / "spec_chat_c4_k4.sqlite"
    monkeypatch.setenv("SPECNSYS_NO_CACHE", "1")
    monkeypatch.setenv("SPECNSYS_MEMORY_LIMIT", "2MB")
    done = run_cli("phases", str(sample))
    assert done.returncode == 4, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("specnsys: error: out of memory") and "SPECNSYS_MEMORY_LIMIT=2MB" in line
