"""Issue 34, item 2: per-step distributions (p50/p90/p99/max per phase and per token).

A built baseline loop with known per-step phase times (odd and even step counts, ties, a
phase absent from some steps) gives exact quantiles, interpolated as DuckDB's
``quantile_cont``; on the samples the distributions equal ``quantile_cont`` over the steps
table itself.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

import specnsys
from specnsys.metrics.analysis import analysis_steps
from specnsys.metrics.events import Scope
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, json_doc


def _loop(forwards: list[int], kv_every: int = 2) -> NsysExportBuilder:
    """Decode steps whose forward lasts forwards[i] ns, a 10 ns sample after it, a 7 ns kv in
    every *kv_every*-th step and one token per step (batch of one request)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    t = 0
    for i, f in enumerate(forwards):
        length = f + 10 + 7 + 3
        b.push_pop(t, t + length, "decode", pid=1, tid=1, domain_id=1)
        b.push_pop(t + 1, t + 1 + f, "forward", pid=1, tid=1, domain_id=1)
        b.push_pop(t + 1 + f, t + 11 + f, "sample", pid=1, tid=1, domain_id=1)
        if i % kv_every == 0:
            b.push_pop(t + 11 + f, t + 18 + f, "kv", pid=1, tid=1, domain_id=1)
        b.mark(t + length - 1, "tokens", pid=1, tid=1, domain_id=1, payload_int=1)
        t += length
    b.start_end(0, t, "request", pid=1, tid=1, domain_id=1)
    return b


def _cont(values: list[float], q: float) -> float:
    rel = duckdb.sql(f"SELECT quantile_cont(v, {q}) FROM (SELECT unnest({values}) AS v)")
    assert rel is not None
    rows = rel.fetchall()
    return float(rows[0][0])


@pytest.mark.parametrize(
    "forwards",
    [
        [100, 300, 200, 200, 500],  # odd count, a tie
        [100, 100, 100, 400, 900, 900, 250, 120],  # even count, ties at both ends
        [42],  # one step
    ],
)
def test_quantiles_per_phase_are_exact(tmp_path: Path, forwards: list[int]) -> None:
    a = specnsys.analyze(_loop(forwards).write(tmp_path / "t.sqlite"))
    assert a.step_distributions is not None
    dist = json_doc(a.step_distributions)
    assert dist["steps"] == len(forwards)
    fwd = dist["phases"]["forward"]
    for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert fwd[key] == pytest.approx(_cont([float(f) for f in forwards], q), abs=1e-9)
    assert fwd["max"] == max(forwards) and fwd["count"] == len(forwards)
    # kv in every other step: the steps without it count 0
    kv = [7.0 if i % 2 == 0 else 0.0 for i in range(len(forwards))]
    assert dist["phases"]["kv"]["p50"] == pytest.approx(_cont(kv, 0.5))
    assert dist["phases"]["kv"]["mean"] == pytest.approx(sum(kv) / len(kv))
    assert dist["phases"]["sample"]["p99"] == pytest.approx(10.0)
    steps = [f + 20.0 for f in forwards]
    assert dist["step_ns"]["p99"] == pytest.approx(_cont(steps, 0.99))
    # one token per step for one sequence: the time per token is the step's
    assert dist["ns_per_token"]["p90"] == pytest.approx(_cont(steps, 0.9))


def test_the_text_shows_the_tails(tmp_path: Path) -> None:
    from specnsys.render.analyze_text import render_analysis_text

    a = specnsys.analyze(_loop([100, 300, 200, 200, 500]).write(tmp_path / "t.sqlite"))
    text = render_analysis_text(a.to_dict())
    assert "per decode step (ms)" in text and "per output token" in text
    assert "  forward" in text


@pytest.mark.parametrize("name", ["baseline_chat_c4", "spec_chat_c4_k4", "spec_rag_c4_k4"])
def test_on_the_samples_they_equal_quantile_cont_over_the_steps_table(name: str) -> None:
    path = SAMPLE_TRACES / f"{name}.sqlite"
    a = specnsys.analyze(path)
    with specnsys.open(path) as trace:
        steps = analysis_steps(trace, a, None)
    assert a.step_distributions is not None
    dist = json_doc(a.step_distributions)
    assert dist["steps"] == steps.height
    con = duckdb.connect()
    con.register("steps", steps.to_arrow())
    for phase in ("draft", "verify", "forward", "sample"):
        if phase not in dist["phases"]:
            assert int(steps[f"{phase}_ns"].sum()) == 0
            continue
        row = con.sql(
            f"SELECT quantile_cont({phase}_ns, 0.5), quantile_cont({phase}_ns, 0.99), "
            f"max({phase}_ns) FROM steps"
        ).fetchall()[0]
        got = dist["phases"][phase]
        assert (got["p50"], got["p99"], got["max"]) == pytest.approx(row), phase
    row = con.sql("SELECT quantile_cont(duration_ns, 0.9) FROM steps").fetchall()[0]
    assert dist["step_ns"]["p90"] == pytest.approx(row[0])


def test_collect_queries_the_steps_once_per_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """``collect`` keeps each run's steps and the analysis's tails are computed from the same
    steps: one query of the step table per trace (it was two, about 7 % of a small trace's
    analysis), and the steps equal those of a separate :func:`analysis_steps`."""
    from specnsys import api
    from specnsys.metrics import steps

    calls: list[str] = []
    query = steps._step_query

    def counted(trace: specnsys.Trace, scope: Scope, step_phase: str) -> pl.DataFrame:
        calls.append("query")
        return query(trace, scope, step_phase)

    monkeypatch.setattr(steps, "_step_query", counted)
    trace = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    analysis, table = api.analyze_steps(trace)
    assert calls == ["query"]
    assert analysis.step_distributions is not None and table.height == analysis.steps
    with specnsys.open(trace) as opened:
        again = analysis_steps(opened, analysis, None)
    assert again.equals(table)


def test_batch_counts_the_requests_open_at_each_step_start(tmp_path: Path) -> None:
    """Without acceptance marks a step's ``batch`` is the requests of the process open at the
    step's start: started at or before it, ending after it (an unended one runs to the
    window's end); a request ending at the step's start, one starting later inside the step,
    a reversed one and another process's are not. Counted from the requests' starts and ends
    in one sweep, not by pairing every step with every request (on the 2M-kernel bench export,
    73k steps x 9k requests, that pairing took 101 s of a cold analysis)."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.process(2, "other")
    b.thread(2, 2, "main")
    b.domain(2, "specnsys", pid=2, tid=2)
    for i in range(10):
        t = 1000 + 100 * i
        b.push_pop(t, t + 100, "decode", pid=1, tid=1, domain_id=1)
        b.push_pop(t + 1, t + 90, "forward", pid=1, tid=1, domain_id=1)
        b.mark(t + 95, "tokens", pid=1, tid=1, domain_id=1, payload_int=1)
    requests = [
        (1000, 1500),  # from step 0's start to step 5's start: open at steps 0-4
        (1050, 1300),  # open at steps 1-2 (it ends at step 3's start)
        (1300, None),  # never ends: open from step 3 to the window's end
        (1300, 1500),  # the same start: open at steps 3-4
        (1700, 1600),  # reversed: never open
        (1950, 1960),  # starts inside step 9: not open at its start
    ]
    for s, e in requests:
        b.start_end(s, e, "request", pid=1, tid=1, domain_id=1)
    b.start_end(1650, 1750, "request", pid=2, tid=2, domain_id=2)  # another process
    path = b.write(tmp_path / "t.sqlite")
    a = specnsys.analyze(path)
    with specnsys.open(path) as trace:
        steps = analysis_steps(trace, a, None)
    assert steps["start_ns"].to_list() == [1000 + 100 * i for i in range(10)]
    assert steps["batch"].to_list() == [1, 2, 2, 3, 3, 1, 1, 1, 1, 1]


def test_the_step_tables_read_the_breakdowns_driver_ranges(
    monkeypatch: pytest.MonkeyPatch, isolated_cache: Path
) -> None:
    """In one analysis the decode-step tables read the driver thread's phase ranges that the
    breakdown already read (left in the attribution context), instead of deriving every
    phase range again in SQL, once per table (about 1 s each at 2M kernels); the analysis is
    the same as with them derived."""
    from specnsys.attribution.phase_map import phase_ranges_sql
    from specnsys.attribution.rules import PhaseRules
    from specnsys.metrics import steps

    trace = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"
    derived: list[str] = []

    def counted(rules: PhaseRules) -> str:
        derived.append("phase_ranges_sql")
        return phase_ranges_sql(rules)

    monkeypatch.setattr(steps, "phase_ranges_sql", counted)
    a = specnsys.analyze(trace, use_cache=False)
    assert derived == []
    with specnsys.open(trace, use_cache=False) as opened:  # no context: derived in SQL
        again = analysis_steps(opened, a, None)
    assert derived == ["phase_ranges_sql"]
    assert a.step_distributions is not None and again.height == a.steps
