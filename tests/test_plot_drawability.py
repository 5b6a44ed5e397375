"""Figures that cannot be drawn refuse (exit 2, one line, no file); short timeline ranges stay
visible; the timeline's decode steps are the steps ``analyze`` counts (issue 23, item 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.path import Path as MplPath

import specnsys
from specnsys.attribution.lanes import timeline_lanes
from specnsys.cli.main import main
from specnsys.errors import UsageError
from specnsys.metrics import analyze_trace
from specnsys.render import plots
from specnsys.render.renderer import FigureData
from specnsys.testing import NsysExportBuilder

pytestmark = pytest.mark.usefixtures("shared_cache")  # the samples built once (conftest)

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
BASE = str(SAMPLES / "baseline_chat_c4.sqlite")
SPEC = str(SAMPLES / "spec_chat_c4_k4.sqlite")
MS = 1_000_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["acceptance", BASE], "cannot draw the acceptance figure: a baseline run proposes no"),
        (["amdahl", SPEC], "cannot draw the amdahl figure: p is the accelerable share of a base"),
        (["sweep", BASE], "sweep needs a baseline trace and at least one speculative trace"),
        (["sweep", SPEC], "sweep needs a baseline trace and at least one speculative trace"),
        # Past the end of the 156 ms analysis window: nothing ran there.
        (["timeline", SPEC, "--window", "1000:1001"], "cannot draw the timeline figure: nothing"),
    ],
)
def test_a_plot_that_cannot_be_drawn_exits_2_with_the_reason_and_writes_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out, data = tmp_path / "x.png", tmp_path / "x.json"
    assert main(["plot", *args, "-o", str(out), "--data", str(data)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"specnsys: error: {message}"), captured.err
    assert captured.err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_baseline_alone_still_draws_its_amdahl_chart(tmp_path: Path) -> None:
    assert main(["plot", "amdahl", BASE, "-o", str(tmp_path / "a.svg")]) == 0


def _undrawable() -> list[FigureData]:
    # Partial documents on purpose (Any, not AnalysisDoc): each holds only what makes its
    # figure undrawable, to check that the renderers say so instead of failing.
    base: Any = {"mode": "baseline", "not_available": {"acceptance": "a baseline run proposes no"}}
    spec: Any = {"mode": "spec", "window_ns": MS, "phases": {}, "not_available": {"p": "no p here"}}
    return [
        plots.phases_data([]),
        plots.acceptance_data(base),
        plots.amdahl_data(spec),
        plots.sweep_data([]),
    ]


@pytest.mark.parametrize("data", _undrawable(), ids=lambda d: d["kind"])
def test_require_drawable_refuses_what_the_report_draws_as_a_panel(data: FigureData) -> None:
    assert data["not_available"]
    with pytest.raises(UsageError, match=f"cannot draw the {data['kind']} figure: "):
        plots.require_drawable(data)
    plots.draw(data)  # the report's "not available" panel still draws


def test_amdahl_of_a_speculative_run_alone_gives_analyzes_reason() -> None:
    assert _undrawable()[2]["not_available"] == "no p here"  # analyze's own words


def _lanes(bars_ns: list[tuple[int, int]], window_ns: int) -> dict[str, Any]:
    return {
        "pid": 1, "driver_tid": 1, "window_start_ns": 0, "window_end_ns": window_ns,
        "window_ns": window_ns, "label": "1.000 ms window", "steps": 0,
        "cpu": [{"phase": "draft", "start_ns": s, "end_ns": e, "level": 0} for s, e in bars_ns],
        "api": [], "gpu": [], "gpu_gaps": [], "cpu_exclusive_ns": {"draft": 1},
        "gpu_busy_ns": None, "gpu_busy_by_phase_ns": {},
        "not_available": {"gpu": "no GPU activity", "api": "no CUDA API calls"},
    }  # fmt: skip


def test_short_ranges_are_drawn_at_a_minimum_width_with_a_note() -> None:
    # 100 ranges of 1 us in a 100 ms window: 0.001% of it each, far under a pixel.
    data = plots.timeline_data(_lanes([(i * MS, i * MS + 1_000) for i in range(100)], 100 * MS))
    assert data["min_width_ms"] == pytest.approx(0.2)
    assert data["rows"][0]["bars"][0]["width_ms"] == pytest.approx(0.001)  # the data stays true
    assert data["notes"][-1] == (
        "100 bars shorter than 0.2 ms (0.2% of the window) drawn 0.2 ms wide to stay visible"
    )
    fig = plots.draw(data)
    widths = [_width(p) for c in fig.axes[0].findobj(PolyCollection) for p in c.get_paths()]
    assert len(widths) == 100 and min(widths) == pytest.approx(0.2)
    bars = fig.axes[0].findobj(PolyCollection)
    assert all(lw == 0 for c in bars for lw in np.atleast_1d(c.get_linewidth()))


def _width(bar: MplPath) -> float:
    """A drawn bar's width in data units: the x extent of its outline."""
    xs = np.asarray(bar.vertices)[:, 0]
    return float(xs.max() - xs.min())


def test_wide_ranges_are_drawn_as_they_are_without_a_note() -> None:
    data = plots.timeline_data(_lanes([(0, 40 * MS), (50 * MS, 90 * MS)], 100 * MS))
    assert data["notes"][-1].startswith("no GPU lanes")


def _trace_without_decode_ranges(path: Path) -> Path:
    """A baseline whose loop has forward ranges only (no decode ranges): 5 steps of 1, 2, 3,
    4, 5 ms, 10 ms apart."""
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    b.start_end(0, 50 * MS, "request", pid=1, tid=1, domain_id=1)
    for i in range(5):
        b.push_pop(i * 10 * MS, i * 10 * MS + (i + 1) * MS, "forward", pid=1, tid=1, domain_id=1)
    return b.write(path)


def test_timeline_steps_are_the_steps_analyze_counts(tmp_path: Path) -> None:
    with specnsys.open(_trace_without_decode_ranges(tmp_path / "t.sqlite")) as t:
        steps = analyze_trace(t).steps
        lanes = timeline_lanes(t)
    assert steps == lanes.steps == 5
    # The median of 1..5 ms is the third forward range, [20, 23) ms.
    assert (lanes.window_start_ns, lanes.window_end_ns) == (20 * MS, 23 * MS)
    assert lanes.label == (
        "decode step 3 of 5 (median duration; steps are the 'forward' ranges, there are no "
        "'decode' ranges)"
    )
