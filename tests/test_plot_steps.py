"""Issue 34, item 2's figure: ``plot steps`` draws each phase's time per decode step and the
time per output token as p50/p90/p99/max, baseline beside speculative.

The figure's data is analyze's ``step_distributions`` in milliseconds, never recomputed: it
is checked against ``analyze --json`` of the same traces, on a built loop with known per-step
times and on the real samples; a trace without decode steps is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import pytest

import specnsys
from specnsys.cli.main import main
from specnsys.render.plots.steps import STEP_QUANTILES, TOKEN_ROW
from specnsys.testing.builder import NsysExportBuilder
from tests.conftest import SAMPLE_TRACES, json_doc
from tests.test_step_distributions import _loop

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

BASE = SAMPLE_TRACES / "baseline_chat_c4.sqlite"
SPEC = SAMPLE_TRACES / "spec_chat_c4_k4.sqlite"


def _plot(tmp_path: Path, *traces: Path) -> tuple[int, dict[str, Any], Path]:
    out, data_out = tmp_path / "steps.png", tmp_path / "steps.json"
    status = main(["plot", "steps", *map(str, traces), "-o", str(out), "--data", str(data_out)])
    data = json.loads(data_out.read_text()) if data_out.exists() else {}
    return status, data, out


def test_a_built_loop_draws_its_exact_quantiles(tmp_path: Path) -> None:
    forwards = [100_000, 300_000, 200_000, 200_000, 500_000]
    trace = _loop(forwards).write(tmp_path / "t.sqlite")
    status, data, out = _plot(tmp_path, trace)
    assert status == 0 and data["not_available"] is None
    (run,) = data["runs"]
    assert run["steps"] == 5
    # forward p50 of 100/300/200/200/500 us is 200 us; max 500 us
    assert run["phases"]["forward"]["p50"] == pytest.approx(0.2)
    assert run["phases"]["forward"]["max"] == pytest.approx(0.5)
    # kv runs in steps 0, 2, 4: p50 is 7 ns; the figure keeps ms
    assert run["phases"]["kv"]["p50"] == pytest.approx(7e-6)
    assert data["rows"][-1] == TOKEN_ROW
    assert mpimg.imread(out).shape[1] >= 1000


def test_every_quantile_equals_analyze_on_the_samples(tmp_path: Path) -> None:
    status, data, _ = _plot(tmp_path, BASE, SPEC)
    assert status == 0
    runs = {r["label"]: r for r in data["runs"]}
    assert set(runs) == {"baseline_chat_c4", "spec_chat_c4_k4"}
    for path in (BASE, SPEC):
        distributions = specnsys.analyze(path).step_distributions
        assert distributions is not None
        dist = json_doc(distributions)
        run = runs[path.stem]
        assert run["steps"] == dist["steps"]
        for phase, spread in dist["phases"].items():
            for q in STEP_QUANTILES:
                assert run["phases"][phase][q] == pytest.approx(spread[q] / 1e6, rel=1e-12)
        for q in STEP_QUANTILES:
            assert run["per_token_ms"][q] == pytest.approx(dist["ns_per_token"][q] / 1e6)
        # a quantile at 0 cannot sit on the log axis: the data names it
        zeros = {p: [q for q in STEP_QUANTILES if s[q] == 0] for p, s in dist["phases"].items()}
        assert run["zero"] == {p: z for p, z in zeros.items() if z}
    # the rows hold both runs' phases, the accelerable ones of each
    assert {"forward", "draft", "verify", "sample", TOKEN_ROW} <= set(data["rows"])
    p99 = runs["spec_chat_c4_k4"]["per_token_ms"]["p99"]
    assert f"p99 {p99:.3g} ms" in data["title"]


def test_a_trace_without_decode_steps_is_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.push_pop(0, 1000, "prefill", pid=1, tid=1, domain_id=1)
    trace = b.write(tmp_path / "t.sqlite")
    status, _, out = _plot(tmp_path, trace)
    err = capsys.readouterr().err
    assert status == 2 and not out.exists()
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "cannot draw the steps figure" in lines[0], err


def test_decode_steps_with_nothing_to_draw_are_skipped_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A baseline whose steps are its forward ranges, with no other phase inside them and no
    tokens marks: no quantile to put on the log axis (matplotlib failed, exit 3); alone, the
    one-line refusal, beside a drawable run, that run drawn and this one listed as skipped
    with its reason."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    for s in range(0, 1000, 100):
        b.push_pop(s, s + 90, "forward", pid=1, tid=1, domain_id=1)
    bare = b.write(tmp_path / "bare.sqlite")
    status, _, out = _plot(tmp_path, bare)
    err = capsys.readouterr().err
    assert status == 2 and not out.exists(), err
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "cannot draw the steps figure" in lines[0], err
    assert "nothing to draw" in lines[0], err

    drawable = _loop([100_000, 300_000]).write(tmp_path / "t.sqlite")
    status, data, out = _plot(tmp_path, drawable, bare)
    assert status == 0 and out.exists()
    assert [r["label"] for r in data["runs"]] == ["t"]
    (skipped,) = data["skipped"]
    assert skipped["label"] == "bare" and "nothing to draw" in skipped["not_available"]
