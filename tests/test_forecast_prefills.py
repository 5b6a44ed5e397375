"""The forecast's prefill inputs (forecasting/extract._prefills) against their definition.

Each prefill-role range gets the sum of its thread's ``input_tokens`` marks in ``[s, e)``
(NULL without one). They are read as differences of running sums by as-of joins; the
reference below is the join of every range with every mark of its thread that it replaced
(prefills x marks: 3.28 s at 40k of each)."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

import specnsys
from specnsys.attribution.phase_map import phase_ranges_sql
from specnsys.forecasting.extract import _prefills
from specnsys.metrics.analysis import analyze_trace
from specnsys.metrics.events import Scope, resolve
from specnsys.testing import NsysExportBuilder
from specnsys.vocabulary import DOMAIN, INPUT_TOKENS_MARK, PREFILL_ROLES
from tests.conftest import SAMPLE_TRACES

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)


def _reference(trace: specnsys.Trace, scope: Scope) -> pl.DataFrame:
    sql = f"""
    WITH r AS (
        SELECT id, gtid, s, least(coalesce(e, $we), $we) AS e, phase
        FROM ({phase_ranges_sql(scope.rules)})
        WHERE counted AND pid = $pid AND list_contains($phases, phase) AND s >= $ws AND s < $we
    ),
    m AS (
        SELECT start AS t, global_tid AS g, payload_int AS v FROM nvtx
        WHERE kind = 'mark' AND domain = $domain AND pid = $pid AND text = $mark
          AND payload_int IS NOT NULL
    )
    SELECT r.phase, r.s, r.gtid, r.e - r.s AS duration_ns, sum(m.v) AS input_tokens
    FROM r LEFT JOIN m ON m.g = r.gtid AND m.t >= r.s AND m.t < r.e
    GROUP BY r.id, r.phase, r.s, r.e, r.gtid
    ORDER BY r.s, r.id
    """
    params = {
        "pid": scope.pid, "ws": scope.start_ns, "we": scope.end_ns,
        "phases": list(PREFILL_ROLES), "domain": DOMAIN, "mark": INPUT_TOKENS_MARK,
    }  # fmt: skip
    frame: pl.DataFrame = trace.connection.sql(sql, params=params).pl()
    return frame


def _scope(trace: specnsys.Trace, pid: int | None) -> Scope:
    breakdown = analyze_trace(trace, pid=pid).breakdown
    assert breakdown is not None
    return Scope.of(breakdown, resolve(None))


def _loop(seed: int) -> NsysExportBuilder:
    """Two threads of one process, each serving prefills and decodes; input marks inside and
    outside the prefills, on their bounds, tied at one instant, and on the other thread."""
    rng = random.Random(seed)
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.domain(1, DOMAIN, pid=1, tid=1)
    b.start_end(0, 100_000, "request", pid=1, tid=1, domain_id=1, payload_int=1)
    for tid in (1, 2):
        b.thread(1, tid, f"worker{tid}")
        t = 100 * tid
        for _ in range(rng.randint(5, 25)):
            s, length = t, rng.randint(10, 400)
            role = rng.choice(PREFILL_ROLES)
            b.push_pop(s, s + length, role, pid=1, tid=tid, domain_id=1)
            if rng.random() < 0.3:  # a nested range of the same role: not counted again
                b.push_pop(s + 1, s + length - 1, role, pid=1, tid=tid, domain_id=1)
            b.push_pop(s + length, s + length + 50, "decode", pid=1, tid=tid, domain_id=1)
            for _ in range(rng.randint(0, 3)):
                at = rng.choice([s, s + length, s + length // 2, s - 1, s + length + 10])
                for _ in range(rng.randint(1, 2)):  # sometimes two marks at one instant
                    b.mark(at, INPUT_TOKENS_MARK, pid=1, tid=tid, domain_id=1,
                           payload_int=rng.randint(1, 900))  # fmt: skip
            t = s + length + 50 + rng.randint(0, 30)
    return b


@pytest.mark.parametrize("seed", range(8))
def test_prefill_inputs_equal_the_pairwise_join(tmp_path: Path, seed: int) -> None:
    path = _loop(seed).write(tmp_path / f"loop{seed}.sqlite")
    with specnsys.open(path) as trace:
        scope = _scope(trace, pid=1)
        got, expected = _prefills(trace, scope), _reference(trace, scope)
    assert got.height == expected.height > 0
    assert got.equals(expected), (got, expected)


@pytest.mark.parametrize("name", ["spec_chat_c4_k4", "baseline_rag_c4"])
def test_prefill_inputs_of_the_sample_captures(name: str) -> None:
    with specnsys.open(SAMPLE_TRACES / f"{name}.sqlite") as trace:
        scope = _scope(trace, pid=None)
        assert _prefills(trace, scope).equals(_reference(trace, scope))
