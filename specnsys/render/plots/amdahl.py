"""Figure 2, Amdahl chart: end-to-end speedup against r for the measured p.

Draws ``S(r) = 1 / ((1 - p) + p / r)`` for the measured bottleneck share, its ceiling
``1 / (1 - p)``, the measured and predicted operating points when a baseline/spec comparison
is given, and the curves of the non-accelerable phases worth cutting first: ``p`` grows to
``A / (W - x)`` if a phase of exclusive time ``x`` went to zero
(:mod:`specnsys.metrics.whatcut` ranks them). Every label sits in the legend, so no text can
collide with a curve or another label.

One reference frame: every speedup on the chart (curves, ceilings, the measured and predicted
points) is over the baseline run whose ``p`` is drawn, so ``1x`` is that run as measured. A
speculative run alone has no ``p`` (analyze marks it not available: ``p`` is the accelerable
share of a baseline run), so its chart is not available rather than drawn in another frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from specnsys.metrics.amdahl import amdahl_speedup
from specnsys.metrics.whatcut import CutCandidate, WhatCut, what_to_cut
from specnsys.render.palette import phase_color
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle
from specnsys.render.plots.phases import accelerable_label, generic_headline, headline

if TYPE_CHECKING:
    from specnsys.render.documents import AnalysisDoc, ComparisonDoc
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = ["amdahl_data", "amdahl_figure"]

_CATCH_ALL = {"unannotated", "unattributed_gpu"}  # nothing a user can cut by name
_NO_BASELINE = "p is the accelerable share of a baseline run: give a baseline trace"
_FRAME = "over the baseline"  # the one reference frame of every speedup on the chart
_POINTS = 60


class Curve(TypedDict):
    """Speedup against r for one bottleneck share (and a phase cut to zero, when *phase*)."""

    label: str
    p: float
    ceiling: float | None
    phase: str | None
    r: list[float]
    speedup: list[float]


class Point(TypedDict):
    """The pair's measured or predicted speedup at its r."""

    kind: str
    r: float
    speedup: float
    label: str


class AmdahlFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    subtitle: NotRequired[str]
    p: NotRequired[float | None]
    ceiling: NotRequired[float | None]
    r_range: NotRequired[list[float]]
    curves: NotRequired[list[Curve]]
    points: NotRequired[list[Point]]
    note: NotRequired[str | None]
    x_label: NotRequired[str]
    y_label: NotRequired[str]


def _grid(lo: float, hi: float) -> list[float]:
    step = (math.log(hi) - math.log(lo)) / (_POINTS - 1)
    return [math.exp(math.log(lo) + i * step) for i in range(_POINTS)]


def amdahl_data(
    analysis: AnalysisDoc,
    comparison: ComparisonDoc | None = None,
    *,
    max_cuts: int = 2,
    cut: WhatCut | None = None,
) -> AmdahlFigure:
    """What figure 2 draws.

    *analysis* is the ``analyze --json`` dict whose p the chart is about (the baseline's
    when a comparison exists); *comparison* the ``compare --json`` dict of baseline vs spec,
    which gives the operating point (``r``, measured and predicted speedups). *cut* is
    ``what_to_cut(analysis)`` when the caller has it (computed here otherwise).
    """
    if cut is None:
        cut = what_to_cut(analysis)
    if analysis.get("mode") == "generic":
        return _generic_data(cut, max_cuts + 1)
    p, _, sentence = headline(analysis, cut)
    compared_p = comparison.get("p") if comparison is not None else None
    if compared_p is not None:
        p = float(compared_p)
    elif analysis.get("mode") == "spec":
        na = analysis.get("not_available")
        why = (na.get("p") if na else None) or _NO_BASELINE
        return {"kind": "amdahl", "title": "Amdahl chart: not available", "not_available": why}
    if p is None:
        return {"kind": "amdahl", "title": sentence, "not_available": cut.not_available}
    r = comparison.get("r") if comparison else None
    r = float(r) if r is not None and r > 0 else None
    lo = 1.0
    while r is not None and lo > 0.8 * r:  # a power of two left of the operating point
        lo /= 2
    hi = max(32.0, 2.0 * r) if r else 32.0
    grid = _grid(lo, hi)
    name = accelerable_label(analysis)
    ceiling = None if p >= 1.0 else 1.0 / (1.0 - p)
    ceiling_text = f"{ceiling:.1f}x" if ceiling else "none"
    curves = [_curve(grid, f"measured: {name} p = {p:.2f}, ceiling {ceiling_text}", p, 0.0, None)]
    picked = [c for c in cut.candidates if c.phase not in _CATCH_ALL][:max_cuts]
    sampler = next((c for c in cut.candidates if c.phase == "sample"), None)
    if sampler is not None and sampler not in picked:
        picked.append(sampler)  # the running example: "if sampling went to zero"
    curves += [_cut_curve(grid, c) for c in picked]
    points = _operating_points(comparison, r)
    if comparison is not None and len(points) == 2:
        m, pr = points[0]["speedup"], points[1]["speedup"]
        title = (
            f"{name} is {p:.0%} of baseline time: ceiling {ceiling_text}; "
            f"measured {m:.2f}x vs predicted {pr:.2f}x"
        )
    else:
        title = sentence
        if picked:
            best = picked[0]
            combined = best.combined_ceiling or math.inf
            if math.isfinite(combined):
                title += f"; cutting {best.phase} as well lifts it to {combined:.1f}x"
    note = None if points else "no operating point: give a baseline and a speculative run"
    return {
        "kind": "amdahl",
        "title": title,
        "subtitle": f"every speedup is {_FRAME} (1x: the baseline as measured); "
        "S = 1 / ((1 - p) + p / r)\ndashed: one non-accelerable phase cut to zero as well; "
        "dotted: where each curve levels off",
        "p": p,
        "ceiling": ceiling,
        "r_range": [lo, hi],
        "curves": curves,
        "points": points,
        "note": note,
        "not_available": None,
    }


def _curve(
    grid: list[float], label: str, share: float, cut_share: float, phase: str | None
) -> Curve:
    """One curve over *grid*: the speedup over the baseline when a phase of window share
    *cut_share* is gone and the accelerable part gets r times faster: 1 / ((1 - p - s) + p /
    r), which is Amdahl's law for p' = p / (1 - s), scaled by the 1 / (1 - s) the cut alone
    gives."""
    rest = 1.0 - cut_share
    ceiling = None if share >= 1.0 else 1.0 / (rest * (1.0 - share))
    return {
        "label": label,
        "p": share,
        "ceiling": ceiling,
        "phase": phase,
        "r": grid,
        "speedup": [amdahl_speedup(share, x) / rest for x in grid],
    }


def _cut_curve(grid: list[float], c: CutCandidate) -> Curve:
    """The curve with the candidate *c* cut to zero. Its asymptote is its ceiling over the baseline, 1 / (1 - p - s); the
    ranking's 1 / (1 - p') is over the run with the phase already cut, another frame, so the
    legend gives p' and the baseline-frame ceiling only."""
    combined, p_after = c.combined_ceiling or math.inf, c.p_after or 0.0  # set: not generic
    both = f"{combined:.1f}x {_FRAME}" if math.isfinite(combined) else "no limit"
    return _curve(grid, f"without {c.phase} ({c.share:.0%} of time): p' = {p_after:.2f}, "
                  f"levels off at {both}", p_after, c.share, c.phase)  # fmt: skip


def _operating_points(
    comparison: ComparisonDoc | None, r: float | None
) -> list[Point]:
    """The measured and predicted speedups of the pair at its r (none without a pair)."""
    points: list[Point] = []
    if comparison is None or r is None:
        return points
    for value, what in (
        (comparison.get("measured_speedup"), "measured"),
        (comparison.get("predicted_speedup"), "predicted"),
    ):
        if value is not None:
            points.append(
                {"kind": what, "r": r, "speedup": float(value),
                 "label": f"{what}: {float(value):.2f}x {_FRAME} at r = {r:.2f}"}
            )  # fmt: skip
    return points


def _generic_data(cut: WhatCut, count: int) -> AmdahlFigure:
    """A generic run has no accelerable phase, hence no single p: one Amdahl curve per largest
    named phase, ``p`` = its share of the window, ``r`` = how much faster that phase alone
    gets. Every speedup is over the run as measured; each curve levels off at ``1 / (1 - p)``,
    the run without that phase."""
    picked = [c for c in cut.candidates if c.phase not in _CATCH_ALL][:count]
    if not picked:
        why = cut.not_available or "no named phase has time in the window"
        return {"kind": "amdahl", "title": "Amdahl chart: not available", "not_available": why}
    grid = _grid(1.0, 32.0)
    curves: list[Curve] = [
        {
            "label": f"{c.phase}: p = {c.share:.2f}, levels off at "
            + (f"{1.0 / (1.0 - c.share):.2f}x" if c.share < 1.0 else "no limit"),
            "p": c.share,
            "ceiling": None if c.share >= 1.0 else 1.0 / (1.0 - c.share),
            "phase": c.phase,
            "r": grid,
            "speedup": [amdahl_speedup(c.share, x) for x in grid],
        }
        for c in picked
    ]
    return {
        "kind": "amdahl",
        "title": generic_headline(cut),
        "subtitle": "generic run (no forward/draft/verify phase): one curve per largest phase, "
        "p = its share of the window\nS = 1 / ((1 - p) + p / r) over this run as measured; "
        "dotted: where each curve levels off",
        "p": None,
        "ceiling": None,
        "r_range": [1.0, 32.0],
        "curves": curves,
        "points": [],
        "note": None,
        "not_available": None,
        "x_label": "r: speedup of that one phase (log scale)",
        "y_label": "end-to-end speedup over this run",
    }


def amdahl_figure(data: AmdahlFigure) -> Figure:
    """Draw figure 2 from :func:`amdahl_data`."""
    with style("amdahl"):
        fig = new_figure(9, 5.6)
        ax = fig.add_subplot()
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "Amdahl chart", reason)
            return fig
        subtitle = "\n".join(x for x in (data["subtitle"], data.get("note")) if x)
        ax.set_title(subtitle, fontsize=9, color="#555555", fontweight="normal")
        top = 1.0
        for i, c in enumerate(data["curves"]):
            color = "#222222" if c["phase"] is None else phase_color(c["phase"])
            style_ = "-" if i == 0 or data.get("p") is None else "--"
            ax.plot(c["r"], c["speedup"], style_, color=color, lw=2.2 if i == 0 else 1.6,
                    label=c["label"])  # fmt: skip
            if c["ceiling"] is not None:
                ax.axhline(c["ceiling"], color=color, lw=0.8, ls=":", alpha=0.9)
                top = max(top, c["ceiling"])
        ax.axhline(1.0, color="#999999", lw=0.8)
        # A big hollow diamond under a small filled dot: both stay visible when they coincide.
        markers = {"measured": ("o", "#000000", 7, 6), "predicted": ("D", "white", 12, 5)}
        for pt in data["points"]:
            marker, face, size, z = markers[pt["kind"]]
            ax.plot([pt["r"]], [pt["speedup"]], marker, ms=size, mfc=face, mec="#000000",
                    mew=1.5, ls="none", label=pt["label"], zorder=z)  # fmt: skip
            top = max(top, pt["speedup"])
        lo, hi = data["r_range"]
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ticks = [2.0**e for e in range(-8, 12) if lo <= 2.0**e <= hi]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
        bottom = min([0.0] + [pt["speedup"] for pt in data["points"]])
        ax.set_ylim(bottom, top * 1.12)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
        ax.set_xlabel(data.get("x_label") or "r: speedup of the accelerable part (log scale)")
        ax.set_ylabel(data.get("y_label") or f"end-to-end speedup {_FRAME}")
        ax.grid(True, which="major", color="#EEEEEE", lw=0.8)
        longest = max(len(c["label"]) for c in data["curves"])
        fig.legend(loc="outside lower center", ncol=1 if longest > 50 else 2, fontsize=8.5)
        return fig


def from_runs(runs: Sequence[Run], options: RenderOptions) -> AmdahlFigure:
    """The first baseline's p, with the operating point of the first baseline/spec pair when
    there is one (``plot amdahl``)."""
    from specnsys.render.runs import pair_runs

    if {"baseline", "spec"} <= {r.analysis.mode for r in runs}:
        base, _spec, comparison = pair_runs(runs, same_output=options.same_output)[0]
        return amdahl_data(base.data, comparison)
    return amdahl_data(runs[0].data)
