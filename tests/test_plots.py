"""Figures: the data each plot function computes (golden snapshots + hand-checked numbers),
graceful "not available" figures, readable output (PNG/SVG, no overlapping text), palette.

Inputs are plain ``analyze --json`` / ``compare --json`` dicts written out here, so these
tests pin the renderers independently of how the metrics are computed. Regenerate the
snapshots after an intended change with ``SPECNSYS_UPDATE_GOLDEN=1 pytest tests/test_plots.py``
and review the diff of ``tests/golden/plots/``.
"""

from __future__ import annotations

import json
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from itertools import combinations
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import pytest
from matplotlib.text import Text

import specnsys
from specnsys import annotate
from specnsys.attribution.lanes import timeline_lanes
from specnsys.metrics.whatcut import what_to_cut
from specnsys.render import plots
from specnsys.render.palette import PHASE_COLORS, ordered_phases, phase_color
from specnsys.render.plots.sweep import SweepRun
from specnsys.render.renderer import FigureData
from tests.conftest import json_doc
from tests.test_plots_lanes import build_gpu_trace

GOLDEN = Path(__file__).resolve().parent / "golden" / "plots"
MS = 1_000_000


def _phases(walls_ms: dict[str, float], window_ms: float) -> dict[str, dict[str, Any]]:
    return {
        name: {
            "wall_ns": int(ms * MS),
            "share": ms / window_ms,
            "gpu_busy_ns": None,
            "accelerable": name in {"forward", "draft", "verify"},
        }
        for name, ms in walls_ms.items()
    }


# A baseline whose decode forward passes are 55% of a 100 ms window (the example), and
# a speculative run of the same 100 output tokens in 60 ms.
#
# BASELINE, SPEC and COMPARISON are partial documents on purpose: only the keys the renderers
# read (the renderers tolerate the others missing), so they are typed Any, not AnalysisDoc /
# ComparisonDoc, which declare every key of a real document; so is every variant built from
# them below.
BASELINE: Any = {
    "mode": "baseline",
    "window_ns": 100 * MS,
    "tokens": 100,
    "steps": 100,
    "requests": 4,
    "phases": _phases(
        {
            "forward": 55,
            "prefill": 15,
            "sample": 12,
            "kv": 5,
            "sync": 4,
            "schedule": 3,
            "decode": 2,
            "unannotated": 4,
            "draft": 0,
            "verify": 0,
        },
        100,
    ),  # fmt: skip
    "p": 0.55,
    "accelerable_ns": 55 * MS,
    "per_token_ns": 1e6,
    "sampler_share": 0.12,
    "amdahl_ceiling": 1 / 0.45,
    "acceptance": None,
    "draft_cost_ratio": None,
    "bandwidth": None,
    "not_available": {"acceptance": "a baseline run proposes no drafts"},
}
SPEC: Any = {
    "mode": "spec",
    "window_ns": 60 * MS,
    "tokens": 100,
    "steps": 40,
    "requests": 4,
    "phases": _phases(
        {
            "draft": 18,
            "verify": 17,
            "prefill": 15,
            "draft_prefill": 3,
            "sample": 4,
            "kv": 1,
            "sync": 1,
            "decode": 1,
            "forward": 0,
        },
        60,
    ),  # fmt: skip
    "p": None,
    "accelerable_ns": 35 * MS,
    "per_token_ns": 0.6e6,
    "sampler_share": 4 / 60,
    "amdahl_ceiling": None,
    "k": 4,
    "acceptance": {
        "mean_accepted": 2.15,
        "by_position": [0.8, 0.6, 0.45, 0.3],
        "alpha": 0.7207207207,
        "tokens_per_step": 3.15,
        "k": 4,
        "k_values": [4],
        "accepted_histogram": [20, 20, 15, 15, 30],
    },
    "draft_cost_ratio": 0.1,
    "bandwidth": None,
    "not_available": {},
}
# compare --json of the two: r = (55/100) / (35/100), predicted 1 / (0.45 + 0.55 / r) = 1.25,
# measured (100/100) / (60/100) = 1.667, gap = measured / predicted - 1 = 1/3.
COMPARISON: Any = {
    "p": 0.55,
    "r": 55 / 35,
    "predicted_speedup": 1.25,
    "measured_speedup": 1 / 0.6,
    "gap": (1 / 0.6) / 1.25 - 1,
    "phases": {},
}


def _spec_k(k: int, measured: float, predicted: float) -> tuple[Any, Any]:
    spec = {**SPEC, "k": k, "acceptance": {**SPEC["acceptance"], "k": k}}
    comp = {**COMPARISON, "k": k, "measured_speedup": measured, "predicted_speedup": predicted,
            "gap": measured / predicted - 1}  # fmt: skip
    return spec, comp


def approx_equal(actual: Any, expected: Any, path: str = "") -> None:
    """Deep equality with floats compared to 1e-9 relative (JSON round trips are exact, but
    libm differences across machines may move the last bit of a curve point)."""
    if isinstance(expected, float) or isinstance(actual, float):
        assert actual == pytest.approx(expected, rel=1e-9, abs=1e-12), path
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), path
        for key in expected:
            approx_equal(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            approx_equal(a, e, f"{path}[{i}]")
    else:
        assert actual == expected, path


def check_golden(name: str, data: Mapping[str, object]) -> None:
    data = json.loads(json.dumps(data))  # what a JSON consumer sees (tuples -> lists)
    path = GOLDEN / f"{name}.json"
    if os.environ.get("SPECNSYS_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"no snapshot {path}: run with SPECNSYS_UPDATE_GOLDEN=1 once"
    approx_equal(data, json.loads(path.read_text()), name)


# -- what the figures compute ----------------------------------------------------------------


def test_phases_data() -> None:
    data = plots.phases_data([("baseline", BASELINE), ("spec k=4", SPEC)])
    assert data["title"] == (
        "decode forward is 55% of time: ceiling 2.2x; "
        "speculation is 1.7x faster per token, draft + verify take 58%"
    )
    assert data["unit"] == "ms per output token"
    base, spec = data["bars"]
    # Accelerable first, then the vocabulary order; zero-time phases are left out.
    assert [s["phase"] for s in base["segments"]] == [
        "forward", "prefill", "sample", "kv", "sync", "schedule", "decode", "unannotated",
    ]  # fmt: skip
    assert [s["phase"] for s in spec["segments"]][:3] == ["draft", "verify", "prefill"]
    # Bar lengths: ms per output token, stacked; the totals are the runs' per-token times.
    assert base["segments"][0]["width"] == pytest.approx(0.55)
    assert base["segments"][1]["left"] == pytest.approx(0.55)
    assert base["total"] == pytest.approx(1.0) and spec["total"] == pytest.approx(0.6)
    assert sum(s["share"] for s in spec["segments"]) == pytest.approx(1.0)
    assert base["segments"][0]["text_long"] == "forward 55%"
    assert base["total_text"] == "1.000 ms/token, 100 tokens"
    check_golden("phases", data)


def test_phases_data_without_token_counts_uses_window_shares() -> None:
    untimed: Any = {**BASELINE, "tokens": None}  # partial, as BASELINE
    data = plots.phases_data([("run", untimed)])
    assert data["unit"] == "share of the run's window (%)"
    assert data["bars"][0]["total"] == pytest.approx(100.0)
    assert data["bars"][0]["total_text"] == "100.0 ms window"


def test_amdahl_data() -> None:
    data = plots.amdahl_data(BASELINE, COMPARISON)
    assert data["title"] == (
        "decode forward is 55% of baseline time: ceiling 2.2x; measured 1.67x vs predicted 1.25x"
    )
    measured = data["curves"][0]
    assert measured["p"] == 0.55 and measured["ceiling"] == pytest.approx(1 / 0.45)
    assert measured["r"][0] == pytest.approx(1.0) and measured["speedup"][0] == pytest.approx(1)
    assert data["r_range"] == [1.0, 32.0]
    # The biggest cuts: prefill (15%), then sample (12%); unannotated is never a curve.
    cuts = data["curves"][1:]
    assert [c["phase"] for c in cuts] == ["prefill", "sample"]
    prefill = cuts[0]
    assert prefill["p"] == pytest.approx(55 / 85)
    # Speedup over the baseline with prefill gone: 1 / (1 - 0.15) at r = 1, and its ceiling
    # W / (W - x - A) = 100 / 30.
    assert prefill["speedup"][0] == pytest.approx(1 / 0.85)
    assert prefill["ceiling"] == pytest.approx(100 / 30)
    assert prefill["label"] == (
        "without prefill (15% of time): p' = 0.65, levels off at 3.3x over the baseline"
    )
    assert [(p["kind"], p["r"], p["speedup"]) for p in data["points"]] == [
        ("measured", 55 / 35, pytest.approx(1 / 0.6)),
        ("predicted", 55 / 35, 1.25),
    ]
    check_golden("amdahl", data)


def test_amdahl_data_of_one_trace_names_the_best_cut() -> None:
    data = plots.amdahl_data(BASELINE)
    assert data["title"] == (
        "decode forward is 55% of time: ceiling 2.2x; cutting prefill as well lifts it to 3.3x"
    )
    assert data["points"] == [] and data["note"] is not None
    assert "baseline and a speculative run" in data["note"]


def test_acceptance_data() -> None:
    data = plots.acceptance_data(SPEC)
    assert data["title"] == "alpha = 0.72: 3.15 tokens per step of 5 possible (k = 4)"
    assert data["geometric"] == pytest.approx([0.7207207207**i for i in range(1, 5)])
    assert data["histogram"] == pytest.approx([0.2, 0.2, 0.15, 0.15, 0.3])
    assert data["histogram_source"] == "counted over 100 sequence-steps"
    a = 0.7207207207
    assert data["expected"] == pytest.approx([1 - a, a * (1 - a), a**2 * (1 - a), a**3 * (1 - a),
                                              a**4])  # fmt: skip
    assert sum(data["expected"]) == pytest.approx(1.0)
    check_golden("acceptance", data)


def test_acceptance_histogram_derived_from_positions_matches_the_counted_one() -> None:
    counted = plots.acceptance_data(SPEC)
    acc = {k: v for k, v in SPEC["acceptance"].items() if k != "accepted_histogram"}
    without_counts: Any = {**SPEC, "acceptance": acc}  # partial, as SPEC
    derived = plots.acceptance_data(without_counts)
    assert derived["histogram"] == pytest.approx(counted["histogram"])
    assert derived["histogram_source"] == "derived from per-position acceptance"
    rising: Any = {**SPEC, "acceptance": {**acc, "by_position": [0.5, 0.7]}}
    broken = plots.acceptance_data(rising)
    assert broken["histogram"] is None and "rises with position" in broken["histogram_source"]


def test_sweep_data() -> None:
    runs: list[SweepRun] = []
    for k, measured, predicted in ((6, 1.1, 1.3), (2, 1.4, 1.35), (4, 1.6, 1.5)):
        spec, comp = _spec_k(k, measured, predicted)
        runs.append({"label": f"spec_k{k}", "analysis": spec, "comparison": comp})
    data = plots.sweep_data(runs)
    assert data["axis"] == "k" and data["x"] == [2, 4, 6]
    assert data["labels"] == ["spec_k2", "spec_k4", "spec_k6"]
    assert data["measured"] == [1.4, 1.6, 1.1]
    assert data["gap"] == pytest.approx([1.4 / 1.35 - 1, 1.6 / 1.5 - 1, 1.1 / 1.3 - 1])
    assert data["title"] == "best measured: 1.60x at k = 4; prediction off by up to 15%"
    check_golden("sweep", data)


def test_sweep_axis_falls_back_to_labels_and_says_when_nothing_wins() -> None:
    spec, comp = _spec_k(4, 0.7, 0.75)
    runs: list[SweepRun] = [
        {"label": name, "analysis": spec, "comparison": comp} for name in ("c1", "c8")
    ]
    data = plots.sweep_data(runs)
    assert data["axis"] == "run" and data["x"] == ["c1", "c8"]
    assert data["title"].startswith("no run beats its baseline (best 0.70x at c1)")


def test_timeline_data_from_real_lanes(tmp_path: Path) -> None:
    with specnsys.open(build_gpu_trace(tmp_path / "gpu.sqlite")) as t:
        lanes = timeline_lanes(t).to_dict()
    data = plots.timeline_data(lanes)
    assert data["title"] == (
        "GPU busy 54% of the 1.05 ms window; longest idle gap 0.39 ms, during kv"
    )
    assert [r["name"] for r in data["rows"]] == [
        "CPU: driver thread", "CPU: nested 1", "CUDA API (driver thread)",
        "GPU 0 · stream 7", "GPU idle",
    ]  # fmt: skip
    gpu = data["rows"][3]["bars"]
    assert [(b["phase"], b["text"]) for b in gpu] == [
        ("forward", "gemm_qkv"), ("forward", "gemm_mlp"), ("forward", "lm_head"),
        ("sample", "softmax"), ("sample", ""),  # a 10 us copy is too narrow to label
    ]  # fmt: skip
    assert data["notes"] == []
    check_golden("timeline", data)


def test_timeline_data_without_gpu_says_so() -> None:
    lanes = {
        "pid": 7, "driver_tid": 7, "window_start_ns": 0, "window_end_ns": 4 * MS,
        "window_ns": 4 * MS, "label": "decode step 2 of 3 (median duration)", "steps": 3,
        "cpu": [{"phase": "decode", "start_ns": 0, "end_ns": 4 * MS, "level": 0},
                {"phase": "draft", "start_ns": 0, "end_ns": 3 * MS, "level": 1}],
        "api": [], "gpu": [], "gpu_gaps": [],
        "cpu_exclusive_ns": {"draft": 3 * MS, "decode": MS}, "gpu_busy_ns": None,
        "gpu_busy_by_phase_ns": {},
        "not_available": {"gpu": "no GPU activity", "api": "no CUDA API calls"},
    }  # fmt: skip
    data = plots.timeline_data(lanes)
    assert data["title"] == (
        "draft 75%, decode 25% of the 4.00 ms window on the driver thread; no GPU work captured"
    )
    assert [r["kind"] for r in data["rows"]] == ["cpu", "cpu"]
    assert data["notes"] == ["no CUDA API lane: no CUDA API calls", "no GPU lanes: no GPU activity"]


# -- degrading gracefully ----------------------------------------------------------------------


def test_figures_say_not_available_instead_of_guessing(tmp_path: Path) -> None:
    acc = plots.acceptance_data(BASELINE)
    assert acc["not_available"] == "a baseline run proposes no drafts"
    unmarked: Any = {**SPEC, "acceptance": None, "not_available": {}}  # partial, as SPEC
    acc2 = plots.acceptance_data(unmarked)
    assert acc2["not_available"] == "the trace has no proposed/accepted marks"
    empty: Any = {**BASELINE, "window_ns": 0, "accelerable_ns": 0, "p": None, "amdahl_ceiling": None}
    amdahl = plots.amdahl_data(empty)
    assert amdahl["not_available"] == "the analysis window is empty"
    sweep = plots.sweep_data([])
    assert sweep["not_available"] is not None
    assert "compared with a baseline" in sweep["not_available"]
    for data in (acc, amdahl, sweep):
        fig = plots.draw(data)
        texts = [t.get_text() for t in fig.findobj(Text) if t.get_visible()]
        assert any("not available" in t for t in texts), texts
        plots.save_figure(fig, tmp_path / f"{data['kind']}.png")


# -- readable output -----------------------------------------------------------------------


def _all_figure_data(tmp_path: Path) -> list[FigureData]:
    runs: list[SweepRun] = []
    for k, measured, predicted in ((2, 1.4, 1.35), (4, 1.6, 1.5), (6, 1.1, 1.3)):
        spec, comp = _spec_k(k, measured, predicted)
        runs.append({"label": f"spec_k{k}", "analysis": spec, "comparison": comp})
    with specnsys.open(build_gpu_trace(tmp_path / "gpu.sqlite")) as t:
        lanes = timeline_lanes(t).to_dict()
    mixed: Any = {**SPEC, "acceptance": {**SPEC["acceptance"], "k_values": [2, 4]}}  # partial
    return [
        plots.phases_data([("baseline", BASELINE), ("spec k=4", SPEC)]),
        plots.amdahl_data(BASELINE, COMPARISON),
        plots.amdahl_data(BASELINE),  # one trace: no operating point, a note instead
        plots.acceptance_data(SPEC),
        plots.acceptance_data(mixed),  # steps with different k: a note under the panels
        plots.sweep_data(runs),
        plots.timeline_data(lanes),
    ]


def _drawn_text_boxes(fig: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """(text, window extent) of every text the renderer really draws (tick labels outside
    the view limits exist as artists but are never drawn, so they are not asked about)."""
    drawn: list[Text] = []
    original = Text.draw

    def record(self: Text, renderer: Any) -> None:
        if self.get_visible() and self.get_text().strip():
            drawn.append(self)
        original(self, renderer)

    with monkeypatch.context() as m:
        m.setattr(Text, "draw", record)
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn]


def test_every_figure_is_written_as_png_and_svg_without_overlapping_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for data in _all_figure_data(tmp_path):
        fig = plots.draw(data)
        boxes = _drawn_text_boxes(fig, monkeypatch)
        assert len(boxes) > 10, data["kind"]
        width, height = fig.bbox.width, fig.bbox.height
        for text, box in boxes:  # nothing hangs off the canvas
            assert box.x0 >= -1 and box.y0 >= -1, (data["kind"], text)
            assert box.x1 <= width + 1 and box.y1 <= height + 1, (data["kind"], text)
        for (a, box_a), (b, box_b) in combinations(boxes, 2):
            overlap_w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            overlap_h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            assert overlap_w <= 1 or overlap_h <= 1, f"{data['kind']}: {a!r} overlaps {b!r}"
        png = plots.save_figure(fig, tmp_path / f"{data['kind']}.png")
        note = data.get("note")
        if note:
            assert isinstance(note, str), data["kind"]
            assert any(note in t for t, _ in boxes), data["kind"]
        pixels = mpimg.imread(png)
        assert pixels.shape[1] >= 1000, "readable: at least 1000 px wide at 150 dpi"
        assert pixels[..., :3].mean(axis=2).var() > 0.005
        svg = plots.save_figure(fig, tmp_path / f"{data['kind']}.svg")
        root = ET.parse(svg).getroot()
        assert root.tag.endswith("svg")
        assert "http" not in svg.read_text().split("<svg", 1)[1].split(">", 1)[1], (
            "only the namespace declarations may name a URL"
        )


def test_the_overlap_check_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    from specnsys.render.plots.common import new_figure

    fig = new_figure(4, 3)
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "first label")
    ax.text(0.52, 0.5, "second label")
    boxes = dict(_drawn_text_boxes(fig, monkeypatch))
    a, b = boxes["first label"], boxes["second label"]
    assert min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def test_svg_output_is_deterministic(tmp_path: Path) -> None:
    data = plots.phases_data([("baseline", BASELINE)])
    a = plots.save_figure(plots.draw(data), tmp_path / "a.svg", salt="phases").read_bytes()
    b = plots.save_figure(plots.draw(data), tmp_path / "b.svg", salt="phases").read_bytes()
    assert a == b


def test_save_figure_refuses_other_formats(tmp_path: Path) -> None:
    from specnsys.errors import UsageError

    fig = plots.draw(plots.phases_data([("baseline", BASELINE)]))
    with pytest.raises(UsageError, match=r"\.png or \.svg"):
        plots.save_figure(fig, tmp_path / "figure.pdf")
    with pytest.raises(UsageError, match="does not exist"):
        plots.save_figure(fig, tmp_path / "missing" / "figure.png")


# -- palette ----------------------------------------------------------------------------------


def test_palette_matches_the_nvtx_colours_of_the_annotation_api() -> None:
    # The same phase has the same colour in the Nsight Systems timeline and in our figures.
    for phase in annotate.PHASES:
        argb = annotate._COLORS[phase]
        assert PHASE_COLORS[phase] == f"#{argb & 0xFFFFFF:06X}", phase


def test_palette_for_unknown_phases_is_stable_and_ordered_last() -> None:
    assert phase_color("my_custom_phase") == phase_color("my_custom_phase")
    assert phase_color("my_custom_phase").startswith("#")
    assert ordered_phases(["zeta", "sample", "forward", "alpha", "unannotated"]) == [
        "forward", "sample", "unannotated", "alpha", "zeta",
    ]  # fmt: skip


# -- what to cut first ------------------------------------------------------------------------


def test_what_to_cut_ranks_by_how_far_the_ceiling_rises() -> None:
    cut = what_to_cut(BASELINE)
    assert cut.p == pytest.approx(0.55) and cut.ceiling == pytest.approx(1 / 0.45)
    order = [c.phase for c in cut.candidates]
    assert order == ["prefill", "sample", "kv", "sync", "unannotated", "schedule", "decode"]
    prefill = cut.candidates[0]
    # W = 100, A = 55, x = 15: p' = 55 / 85, ceiling' = 85 / 30, combined = 100 / 30.
    assert prefill.p_after == pytest.approx(55 / 85)
    assert prefill.ceiling_after == pytest.approx(85 / 30)
    assert prefill.ceiling_gain == pytest.approx(85 / 30 - 100 / 45)
    assert prefill.combined_ceiling == pytest.approx(100 / 30)
    d = json_doc(cut.to_dict())
    assert d["non_accelerable_share"] == pytest.approx(0.45)
    assert d["candidates"][0]["phase"] == "prefill"
    # A tie (sync and unannotated, both 4 ms) keeps name order.
    assert order.index("sync") < order.index("unannotated")


def test_what_to_cut_of_a_spec_run_and_of_nothing() -> None:
    cut = what_to_cut(SPEC)
    assert cut.accelerable == ("draft", "verify")
    assert cut.p == pytest.approx(35 / 60)
    assert "draft" not in [c.phase for c in cut.candidates]
    empty = what_to_cut({"mode": "baseline", "window_ns": 0, "phases": {}})
    assert empty.candidates == [] and empty.not_available == "the analysis window is empty"
    idle = what_to_cut({"mode": "baseline", "window_ns": 10, "phases": {"sample": {"wall_ns": 10}}})
    assert idle.candidates == [] and idle.not_available is not None
    assert "no accelerable time" in idle.not_available
    everything = what_to_cut(
        {"mode": "baseline", "window_ns": 10,
         "phases": {"forward": {"wall_ns": 7}, "sample": {"wall_ns": 3}}}
    )  # fmt: skip
    only = everything.candidates[0]
    assert only.ceiling_after is not None and math.isinf(only.ceiling_after)
    assert only.to_dict()["ceiling_after"] is None


def test_legend_of_a_trace_with_many_phases_lists_the_heaviest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Traces mapped with --rules nvtx can have hundreds of "phases": the legend keeps the
    # 13 heaviest and counts the rest, and the figure still lays out without overlaps.
    walls = {f"op_{i:02d}": float(i + 1) for i in range(20)}
    # A partial analyze --json document: only the keys phases_data reads.
    run: Any = {"mode": "baseline", "window_ns": int(sum(walls.values()) * MS), "tokens": 10,
                "phases": _phases(walls, sum(walls.values()))}  # fmt: skip
    data = plots.phases_data([("run", run)])
    assert data["legend"] == [f"op_{i:02d}" for i in range(7, 20)]
    assert data["legend_more"] == 7
    fig = plots.draw(data)
    texts = [t for t, _ in _drawn_text_boxes(fig, monkeypatch)]
    assert "+7 more phases" in texts and "op_00" not in texts


def test_progress_bar_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from specnsys.render.progress import progress, progress_enabled

    monkeypatch.delenv("SPECNSYS_PROGRESS", raising=False)
    assert progress_enabled() is False  # pytest captures stderr: not a TTY
    with progress(2, "quiet") as advance:
        advance("one")
        advance("two")
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SPECNSYS_PROGRESS", "1")
    with progress(2, "shown") as advance:
        advance("first step")
        advance("second step")
    err = capsys.readouterr().err
    assert "shown" in err and "second step" in err
    monkeypatch.setenv("SPECNSYS_PROGRESS", "0")
    assert progress_enabled() is False
