"""Every real export in ../shared/traces/real opens, and the model keeps every source row."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import specnsys
from specnsys.ingest.model import MODEL
from tests.conftest import CORPUS, corpus_files, sha256

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not corpus_files(), reason=f"corpus folder {CORPUS} is absent"),
    pytest.mark.usefixtures("corpus_cache"),  # each export built once per session
]


def _direct_count(path: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        exists = con.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()[0]
        return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] if exists else 0
    finally:
        con.close()


def test_corpus_has_all_37_exports() -> None:
    assert len(corpus_files()) == 37


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.stem)
def test_export_opens_and_row_counts_match_sqlite(path: Path) -> None:
    before = sha256(path)
    with specnsys.open(path) as trace:
        for table in MODEL:
            assert table.counts_source is not None, table.name  # every table has its source
            expected = _direct_count(path, table.counts_source)
            assert trace.summary.row_counts[table.name] == expected, table.name
            got = trace.sql(f"SELECT count(*) FROM {table.name}").fetchall()[0][0]
            assert got == expected, table.name
        # names resolve wherever the export has them
        unresolved = trace.sql(
            "SELECT count(*) FROM kernels WHERE short_name IS NULL"
        ).fetchall()[0][0]
        assert unresolved == 0
    assert sha256(path) == before


def test_versions_are_read_or_estimated() -> None:
    seen = {}
    for path in corpus_files():
        with specnsys.open(path) as trace:
            seen[path.name] = trace.summary.version
    assert seen["2024.5.1_pipit_cloverleaf.sqlite"].product_version == "2024.5.1.113"
    assert seen["2024.5.1_pipit_cloverleaf.sqlite"].schema_version == "3.13.2"
    assert seen["2022.2.1_pipit_saxpy-mpi.sqlite"].meta_table == "EXPORT_META_DATA"
    assert seen["2020.3.2_quasiben_cudf.sqlite"].product_version is None
    for name, version in seen.items():
        if version.product_version:  # file names start with the version nsys wrote
            assert version.product_version.startswith(name.split("_")[0]), name


def test_pid_decoding_matches_processes_table() -> None:
    path = CORPUS / "2026.2.1_nsysai_mfu-2gpu-before.sqlite"
    with specnsys.open(path) as trace:
        pids = {r[0] for r in trace.sql("SELECT DISTINCT pid FROM kernels").fetchall()}
        known = {r[0] for r in trace.sql("SELECT pid FROM processes").fetchall()}
        assert pids and pids <= known
        # correlation ids repeat across the two processes; the pid keeps them apart
        shared = trace.sql(
            "SELECT count(*) FROM (SELECT correlation_id FROM runtime GROUP BY 1 "
            "HAVING count(DISTINCT pid) > 1)"
        ).fetchall()[0][0]
        assert shared > 0


def test_nvtx_nesting_matches_a_reference_stack_walk() -> None:
    """depth/parent from the SQL sweep equal a plain per-thread stack walk on real data."""
    path = CORPUS / "2026.2.1_nsysai_h100-2gpu-1s.sqlite"
    with specnsys.open(path) as trace:
        rows = trace.sql(
            "SELECT id, start, \"end\", global_tid, domain_id, depth, parent FROM nvtx "
            "WHERE kind = 'push_pop' ORDER BY global_tid, domain_id, start, \"end\" DESC, id"
        ).fetchall()
    assert len(rows) > 10_000 and max(r[5] for r in rows) >= 3
    stack: list[tuple[int, int]] = []
    key = None
    for rid, start, end, gtid, dom, depth, parent in rows:
        if (gtid, dom) != key:
            stack, key = [], (gtid, dom)
        while stack and stack[-1][0] <= start:
            stack.pop()
        assert depth == len(stack) and parent == (stack[-1][1] if stack else None), rid
        stack.append((end, rid))


def test_info_json_on_every_export() -> None:
    for path in corpus_files():
        done = subprocess.run(
            [sys.executable, "-m", "specnsys", "info", "--json", str(path)],
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, (path.name, done.stderr)
        doc = json.loads(done.stdout)
        assert set(doc["row_counts"]) == {t.name for t in MODEL}
        assert "phase_attribution" in doc["capabilities"]
