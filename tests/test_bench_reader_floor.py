"""bench/reader_floor.py, the reader's floor that bench/scale.py prints beside the bare scan:
it must read every raw source a cold open reads, each row once (else its figure would be the
floor of less work than the build does)."""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path
from types import ModuleType

from specnsys.ingest.model import MODEL, STRINGS
from specnsys.ingest.sqlite_reader import SqliteExport

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "spec_chat_c4_k4.sqlite"


def _reader_floor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reader_floor", ROOT / "bench" / "reader_floor.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reader_floor_reads_every_row_of_every_source_the_build_reads() -> None:
    export = SqliteExport(SAMPLE)
    tables = [STRINGS.resolve(export).table] + [
        s.resolve(export).table for t in MODEL for s in t.sources
    ]
    con = sqlite3.connect(f"file:{SAMPLE}?mode=ro&immutable=1", uri=True)
    present = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    expected = sum(
        con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
        for table in tables
        if table in present
    )
    con.close()
    rows, slices = _reader_floor().read_everything(SAMPLE)
    assert expected > 0
    assert rows == expected
    assert slices >= len([t for t in tables if t in present])
