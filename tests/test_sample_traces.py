"""The bundled sample traces are real captures that carry the specnsys phases."""

from __future__ import annotations

from pathlib import Path

import pytest

import specnsys
from tests.conftest import SAMPLE_TRACES

TRACES = sorted(SAMPLE_TRACES.glob("*.sqlite"))


def test_sample_traces_are_bundled() -> None:
    assert len(TRACES) >= 8


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_sample_trace_opens_with_phases(path: Path) -> None:
    assert path.stat().st_size < 2 * 1024 * 1024
    with specnsys.open(path) as t:
        assert t.summary.version.product_version  # written by a real nsys
        assert t.summary.capabilities["specnsys_phases"].available
        phases = {r[0] for r in t.sql(
            "SELECT DISTINCT text FROM nvtx WHERE domain = 'specnsys' AND kind = 'push_pop'"
        ).fetchall()}
        expected = {"forward"} if path.name.startswith("baseline") else {"draft", "verify"}
        assert expected <= phases and {"decode", "sample", "prefill"} <= phases
