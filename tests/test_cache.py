"""The columnar cache: reused when valid, never stale, optional when it cannot be written."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

import pytest

import specnsys
from specnsys.errors import SpecnsysWarning
from specnsys.testing import NsysExportBuilder


def _export(path: Path, kernels: int) -> Path:
    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    for i in range(kernels):
        b.runtime(i * 10, i * 10 + 2, "cudaLaunchKernel_v7000", i)
        b.kernel(i * 10 + 3, i * 10 + 9, "k", i)
    return b.write(path)


def test_second_open_reads_the_cache(tmp_path: Path, isolated_cache: Path) -> None:
    path = _export(tmp_path / "a.sqlite", 10)
    with specnsys.open(path) as cold:
        assert not cold.from_cache and cold.cache_folder is not None
        assert cold.cache_folder.parent == isolated_cache
    with specnsys.open(path) as warm:
        assert warm.from_cache
        assert warm.sql("SELECT count(*) FROM kernels").fetchall() == [(10,)]
        assert warm.summary.row_counts["kernels"] == 10


def test_changed_export_never_reuses_a_stale_entry(tmp_path: Path) -> None:
    path = _export(tmp_path / "a.sqlite", 10)
    with specnsys.open(path) as t:
        assert t.summary.row_counts["kernels"] == 10
    mtime = path.stat().st_mtime_ns
    _export(path, 25)
    os.utime(path, ns=(mtime, mtime))  # same mtime: the size still tells them apart
    with specnsys.open(path) as t:
        assert not t.from_cache and t.summary.row_counts["kernels"] == 25
    _export(path, 24)  # nearly the same size, new mtime
    with specnsys.open(path) as t:
        assert not t.from_cache and t.summary.row_counts["kernels"] == 24


def test_unwritable_cache_degrades_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() == 0:
        target = Path("/proc/specnsys-cache")  # not creatable even by root
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setenv("SPECNSYS_CACHE_DIR", str(target / "sub"))
    path = _export(tmp_path / "a.sqlite", 5)
    with pytest.warns(SpecnsysWarning, match="working without a cache"), specnsys.open(path) as t:
        assert t.cache_folder is None
        assert t.sql("SELECT count(*) FROM kernels").fetchall() == [(5,)]
        assert t.table("kernels").collect().height == 5


def test_no_cache_flag_reads_from_memory(tmp_path: Path, isolated_cache: Path) -> None:
    path = _export(tmp_path / "a.sqlite", 5)
    with specnsys.open(path, use_cache=False) as t:
        assert t.cache_folder is None and t.summary.row_counts["kernels"] == 5
    assert list(isolated_cache.iterdir()) == []


def test_concurrent_opens_of_one_trace_both_succeed(tmp_path: Path) -> None:
    path = _export(tmp_path / "a.sqlite", 300)
    results: list[int] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with specnsys.open(path) as t:
                results.append(t.sql("SELECT count(*) FROM kernels").fetchall()[0][0])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and results == [300, 300, 300]


def test_data_warnings_are_kept_beside_the_cached_model(tmp_path: Path) -> None:
    """The quality checks scan every big table: the second command on the unchanged export
    reads their notes back (the same notes), a changed export is checked afresh."""
    from specnsys.ingest.quality import data_warnings

    b = NsysExportBuilder()
    b.thread(1, 1, "main")
    b.runtime(0, 5, "cudaLaunchKernel_v7000", 78)
    b.kernel(6, 9, "launched", 78)
    b.kernel(30, 90, "orphan", 77)  # no runtime row launched it: a note
    path = b.write(tmp_path / "a.sqlite")
    with specnsys.open(path) as cold:
        notes = data_warnings(cold)
        assert any("launch" in n for n in notes), notes
        assert cold.cache_folder is not None
        assert list((cold.cache_folder / "derived").glob("data_warnings-*.json"))
    with specnsys.open(path) as warm:
        assert data_warnings(warm) == notes
        assert warm._con is None  # read back: no query ran, DuckDB was never even opened
    b.runtime(10, 20, "cudaLaunchKernel_v7000", 77)
    b.write(path)
    with specnsys.open(path) as changed:
        assert not any("launch" in n for n in data_warnings(changed))


def test_a_warm_analyze_loads_neither_duckdb_nor_pyarrow(tmp_path: Path) -> None:
    """Read from the cache, ``analyze`` only reads stored results: DuckDB, pyarrow and numpy
    (which pyarrow pulls in) cost about 0.3 s of a 1 s warm run, so they load where a model
    is built or queried. The cold run in the same process state loads them (the test has
    teeth), but never pandas: pyarrow imports it (0.2-0.4 s) the first time it converts a
    Python value or makes an empty table from a schema, which the model's reads and Arrow
    normalizations must therefore never ask for. The export has a table with columns and no
    rows, as many real ones do."""
    import shutil
    import sqlite3
    import subprocess
    import sys

    from tests.conftest import SAMPLE_TRACES

    trace = tmp_path / "spec_chat_c4_k4.sqlite"
    shutil.copyfile(SAMPLE_TRACES / trace.name, trace)
    with contextlib.closing(sqlite3.connect(trace)) as con:
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER, end INTEGER, "
            "correlationId INTEGER, globalPid INTEGER, syncType INTEGER)"
        )
        con.commit()
    probe = (
        "import sys, io, contextlib\n"
        "from specnsys.cli.main import main\n"
        f"sys.argv = ['specnsys', 'analyze', '--json', {str(trace)!r}]\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main() == 0\n"
        "print(sorted(m for m in ('duckdb', 'numpy', 'pandas', 'pyarrow') if m in sys.modules))\n"
    )
    loaded = [
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in ("cold", "warm")
    ]
    assert loaded == ["['duckdb', 'numpy', 'pyarrow']", "[]"]
