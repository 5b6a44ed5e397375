"""Issue 22, the SQL part: what a hostile user tried against ``specnsys sql`` and ``Trace.sql``.

* item 1: comments and spellings inside EXPLAIN, and table functions with effects, wrote files
  (the cache entry included) through the read-only check;
* item 6: queries DuckDB answers that no output format could print (exit 3, Rust panics);
* item 11: an unwritable output exited 3 or said "cannot write None";
* weaknesses: no time limit on user SQL, a text table that wrapped wide numbers;
* the structured fuzzer over the classifier (fuzz/sql_classifier_fuzz.py), run briefly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specnsys
from specnsys.ingest.readonly_sql import ReadOnlyQueryError
from tests.conftest import sha256
from tests.hostile_corpus import good_loop
from tests.test_readonly_sql import cli_batch, tree_digest

REPO = Path(__file__).resolve().parents[1]

#: Statements that wrote into the cache entry ({cache}) through the old check, measured before
#: the fix (through Trace.sql; the CLI's locked configuration stopped the last two there). The
#: fourth and fifth spellings were refused by the old prefix pattern only by accident.
BYPASSES = [
    "EXPLAIN /**/ ANALYZE COPY (SELECT 1 AS x) TO '{cache}/nvtx.parquet' (FORMAT parquet)",
    "EXPLAIN -- c\nANALYZE COPY (SELECT 1 AS x) TO '{cache}/nvtx.parquet' (FORMAT parquet)",
    "EXPLAIN (ANALYSE) COPY (SELECT 1 AS x) TO '{cache}/new.parquet' (FORMAT parquet)",
    "explain/* x */analyse\tcopy (SELECT 1 AS x) TO '{cache}/nvtx.parquet' (FORMAT parquet)",
    "EXPLAIN (ANALYZE, FORMAT JSON) COPY (SELECT 1 AS x) TO '{cache}/new.parquet'",
    "SELECT * FROM enable_profiling(format='json', save_location='{cache}/profile.json')",
    "SELECT * FROM enable_logging(storage='file', storage_path='{cache}/log')",
]


def _state(export: Path, cache_root: Path) -> tuple:
    """The export's bytes and every path and file under the cache root."""
    paths = sorted(str(p.relative_to(cache_root)) for p in cache_root.rglob("*"))
    return sha256(export), tree_digest(cache_root), paths


@pytest.fixture
def warm_export(tmp_path: Path) -> tuple[Path, Path]:
    """A small built export and its (written) cache entry folder."""
    export = good_loop(tmp_path)
    with specnsys.open(export) as trace:
        cache = trace.cache_folder
    assert cache is not None and (cache / "nvtx.parquet").is_file()
    return export, cache


def test_bypasses_refused_by_trace_sql(
    warm_export: tuple[Path, Path], isolated_cache: Path
) -> None:
    export, cache = warm_export
    before = _state(export, isolated_cache)
    with specnsys.open(export) as trace:
        assert trace.from_cache
        for query in BYPASSES:
            with pytest.raises(ReadOnlyQueryError, match="^refused"):
                trace.sql(query.format(cache=cache)).fetchall()
        assert trace.sql("SELECT count(*) FROM nvtx").fetchall() == [(82,)]
    assert _state(export, isolated_cache) == before


def test_bypasses_refused_by_the_cli(warm_export: tuple[Path, Path], isolated_cache: Path) -> None:
    export, cache = warm_export
    before = _state(export, isolated_cache)
    cases = [query.format(cache=cache) for query in BYPASSES]
    results = cli_batch([["sql", str(export), q] for q in cases], isolated_cache)
    for query, result in zip(cases, results, strict=True):
        lines = result["stderr"].splitlines()
        assert result["status"] == 2 and result["stdout"] == "", (query, result)
        assert len(lines) == 1 and lines[0].startswith("specnsys: error: refused"), (query, lines)
    assert _state(export, isolated_cache) == before
    # and the analysis still reads every verify range from the untouched entry
    (ranges,) = cli_batch([["sql", str(export), "SELECT count(*) AS n FROM nvtx", "--format",
                            "json"]], isolated_cache)  # fmt: skip
    assert json.loads(ranges["stdout"]) == [{"n": 82}]
