"""The bundled sample traces are real captures that carry the specnsys phases."""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

TRACES = sorted(SAMPLE_TRACES.glob("*.sqlite"))


def test_sample_traces_are_bundled() -> None:
    assert len(TRACES) >= 8


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_sample_trace_opens_with_phases(path: Path) -> None:
    assert path.stat().st_size < 2 * 1024 * 1024
    with specnsys.open(path) as t:
        assert t.summary.version.product_version  # written by a real nsys
        assert t.summary.capabilities["specnsys_phases"].available
        phases = {
            r[0]
            for r in t.sql(
                "SELECT DISTINCT text FROM nvtx WHERE domain = 'specnsys' AND kind = 'push_pop'"
            ).fetchall()
        }
        expected = {"forward"} if path.name.startswith("baseline") else {"draft", "verify"}
        assert expected <= phases and {"decode", "sample", "prefill"} <= phases


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_sample_trace_carries_token_and_request_marks(path: Path) -> None:
    """Token counts are in the trace: per-step ``tokens`` marks, and per request a
    ``first_token`` (payload: request id) and an ``output_tokens`` mark."""
    with specnsys.open(path) as t:
        marks = dict(
            t.sql(
                "SELECT text, list(payload_int ORDER BY start) FROM nvtx WHERE kind = 'mark' "
                "AND domain = 'specnsys' GROUP BY 1"
            ).fetchall()
        )
        requests = sorted(
            r[0] for r in t.sql("SELECT payload_int FROM nvtx WHERE text = 'request'").fetchall()
        )
    assert requests == list(range(8))
    assert sorted(marks["first_token"]) == requests
    assert len(marks["output_tokens"]) == 8 and min(marks["output_tokens"]) >= 1
    assert sum(marks["tokens"]) == sum(marks["output_tokens"])
    assert min(marks["target_bytes"]) > 0
    if path.name.startswith("spec"):
        k = int(path.stem.split("_k")[1])
        assert set(marks["proposed"]) == {k} and len(marks["accepted"]) == len(marks["proposed"])
    if "_chat_" in path.name:  # chat outputs (48..96 tokens) are capped at 32 by make.sh
        assert marks["output_tokens"] == [32] * 8
