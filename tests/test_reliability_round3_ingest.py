"""Round 3 of the hostile pass on the ingest layer (issue 30): each finding, reproduced.

(e) NVTX events of an unknown ``eventType``, (f) dangling ``StringIds`` references and (k) mark
payloads stored as text were dropped or zeroed silently: each is now a data-quality warning
with its count. (h) ``read_csv(..., store_rejects=true, rejects_table='nvtx')`` through
``Trace.sql`` made temporary tables that shadowed the model. (i) A cached Parquet damaged in the
middle was never rebuilt. (l) ``SPECNSYS_MEMORY_LIMIT`` was checked on a cold cache only, and
``1PB`` was refused by a message that said 1MB-1000PB was allowed.
"""

from __future__ import annotations

import duckdb
import pytest

from specnsys.errors import UsageError
from specnsys.ingest.memory_limits import explicit_memory_limit
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
