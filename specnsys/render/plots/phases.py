"""Figure 1, phase breakdown: one stacked horizontal bar of exclusive time per run.

Bars are in milliseconds per output token when every run counted its tokens (so a baseline
and a speculative run, or the runs of a sweep, compare on the same scale and the shorter bar
is the faster run), else in shares of each run's window. Segment labels are always shares of
that run's window: the segments of a bar sum to 100%.

With per-token bars the title also says how much faster or slower speculation is per output
token than its baseline (the nearest baseline before it, as ``compare`` pairs runs): the ratio
of the bar totals, i.e. the inverse of ``compare``'s measured speedup.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

from specnsys.metrics.whatcut import WhatCut, accelerable_phases, what_to_cut
from specnsys.render.palette import ordered_phases, phase_color, text_color_on
from specnsys.render.plots.common import (
    LabelBar,
    fit_labels,
    legend_phases,
    new_figure,
    not_available_panel,
    phase_legend,
    style,
    suptitle,
)

if TYPE_CHECKING:
    from specnsys.render.documents import AnalysisDoc, PhaseRow
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = [
    "PhasesFigure", "accelerable_label", "generic_headline", "headline", "phases_data",
    "phases_figure",
]


class Segment(TypedDict):
    """One phase of a run's bar: where it starts and how wide it is, and its labels."""

    phase: str
    wall_ns: int
    share: float
    left: float
    width: float
    text: str
    text_long: str


class PhaseBar(TypedDict):
    label: str
    mode: str | None
    total: float
    total_text: str
    segments: list[Segment]


class PhasesFigure(TypedDict):
    kind: str
    not_available: str | None
    title: str
    subtitle: str
    unit: str
    phases: list[str]
    legend: list[str]
    legend_more: int
    bars: list[PhaseBar]

_ACCEL_WORDS = {"forward": "decode forward", "draft+verify": "draft + verify"}


def accelerable_label(analysis: AnalysisDoc) -> str:
    """How titles name the accelerable work of *analysis* ("decode forward", ...)."""
    key = "+".join(accelerable_phases(analysis))
    return _ACCEL_WORDS.get(key, key.replace("+", " + "))


def headline(
    analysis: AnalysisDoc, cut: WhatCut | None = None
) -> tuple[float | None, float | None, str]:
    """(p, ceiling, sentence) for *analysis*: the finding a title leads with.

    ``p`` and the ceiling are the analysis's own (``p``, ``amdahl_ceiling``) when it has
    them, else the accelerable share of this run (see :mod:`specnsys.metrics.whatcut`).
    *cut* is ``what_to_cut(analysis)`` when the caller has it (computed here otherwise).
    """
    if cut is None:
        cut = what_to_cut(analysis)
    p = analysis.get("p")
    p = cut.p if p is None else float(p)
    ceiling = analysis.get("amdahl_ceiling")
    ceiling = cut.ceiling if ceiling is None else float(ceiling)
    mode = analysis.get("mode")
    if mode == "generic":
        return None, None, generic_headline(cut)
    name = accelerable_label(analysis)
    if p is None:
        return None, None, f"{name}: no time to attribute ({cut.not_available})"
    verb = "are" if "+" in name else "is"
    where = "" if mode == "baseline" else f" of the {mode or 'analyzed'} run"
    tail = f"ceiling {ceiling:.1f}x" if ceiling is not None else "no ceiling (p = 1)"
    return p, ceiling, f"{name} {verb} {p:.0%} of time{where}: {tail}"


_CATCH_ALL = ("unannotated", "unattributed_gpu")  # time no phase range claims: not a cut by name


def generic_headline(cut: WhatCut) -> str:
    """The finding of a generic run (no accelerable phase): its largest named phase and the
    speedup of the whole run if that phase went away, ``W / (W - x)``."""
    named = [c for c in cut.candidates if c.phase not in _CATCH_ALL] or cut.candidates
    if not named:
        return f"generic run: no phase time ({cut.not_available})"
    top = named[0]
    gain = (
        f"without it the run would be {top.speedup_if_removed:.2f}x faster"
        if math.isfinite(top.speedup_if_removed)
        else "it is the whole window"
    )
    return f"{top.phase} is {top.share:.0%} of the run's time: {gain}"


def phases_data(
    runs: Sequence[tuple[str, AnalysisDoc]], cuts: Sequence[WhatCut] | None = None
) -> PhasesFigure:
    """What figure 1 draws for *runs* (label, ``analyze --json`` dict), top bar first.
    *cuts* is ``what_to_cut`` of each run, in order, when the caller has them."""
    cut_of = {id(a): c for (_, a), c in zip(runs, cuts, strict=True)} if cuts else {}
    per_token = all(int(a.get("tokens") or 0) > 0 for _, a in runs) and bool(runs)
    unit = "ms per output token" if per_token else "share of the run's window (%)"
    phases = ordered_phases(
        name for _, a in runs for name, row in _phase_rows(a).items() if row["wall_ns"]
    )
    bars = [_bar(label, a, phases, per_token) for label, a in runs]
    weights: dict[str, float] = {}
    for bar in bars:
        for seg in bar["segments"]:
            weights[seg["phase"]] = weights.get(seg["phase"], 0.0) + seg["share"]
    legend = legend_phases(phases, weights)
    lead = next((a for _, a in runs if a.get("mode") == "baseline"), runs[0][1] if runs else None)
    title = headline(lead, cut_of.get(id(lead)))[2] if lead is not None else "no runs"
    spec_shares = sorted(
        p for _, a in runs if a is not lead and a.get("mode") == "spec"
        for p in [headline(a, cut_of.get(id(a)))[0]] if p is not None
    )  # fmt: skip
    finding = _per_token_finding(runs, lead) if per_token and lead is not None else ""
    if spec_shares:
        lo, hi = spec_shares[0], spec_shares[-1]
        span = f"{lo:.0%}" if f"{lo:.0%}" == f"{hi:.0%}" else f"{lo:.0%} to {hi:.0%}"
        if finding:
            title += f"; {finding}, draft + verify take {span}"
        else:
            title += f"; with speculation, draft + verify take {span}"
    elif finding:
        title += f"; {finding}"
    drawn = any(bar["segments"] for bar in bars)
    return {
        "kind": "phases",
        "not_available": None if drawn else "no run has phase time in its window",
        "title": title,
        "subtitle": (
            "exclusive wall time per phase (every instant counted once); "
            "labels: share of each run's window"
        ),
        "unit": unit,
        "phases": phases,
        "legend": legend[0],
        "legend_more": legend[1],
        "bars": bars,
    }


def _bar(label: str, a: AnalysisDoc, phases: list[str], per_token: bool) -> PhaseBar:
    """One run's bar: a segment per phase with time, as ms per output token or as a share
    of the run's window."""
    window = int(a.get("window_ns") or 0)
    tokens = int(a.get("tokens") or 0)
    left = 0.0
    segments: list[Segment] = []
    for name in phases:
        row = _phase_rows(a).get(name)
        if not row or not row["wall_ns"] or window <= 0:
            continue
        wall = int(row["wall_ns"])
        share = float(row.get("share", wall / window))
        width = wall / tokens / 1e6 if per_token else share * 100
        segments.append(
            {
                "phase": name,
                "wall_ns": wall,
                "share": share,
                "left": left,
                "width": width,
                "text": f"{share:.0%}" if share >= 0.005 else "",
                "text_long": f"{name} {share:.0%}",
            }
        )
        left += width
    total = (
        f"{window / tokens / 1e6:.3f} ms/token, {tokens} tokens"
        if per_token
        else f"{window / 1e6:.1f} ms window"
    )
    return {"label": label, "mode": a.get("mode"), "total": left, "total_text": total,
            "segments": segments}  # fmt: skip


def _phase_rows(analysis: AnalysisDoc) -> dict[str, PhaseRow]:
    return analysis.get("phases") or {}


def _per_token_finding(runs: Sequence[tuple[str, AnalysisDoc]], lead: AnalysisDoc) -> str:
    """The clause "speculation is 2.2x slower per token" (or "1.6x faster", or a range over
    several speculative runs): each run's time per output token over its baseline's, the
    baseline being the nearest one before it in *runs* (else *lead*), as ``compare`` pairs
    them; "" when no speculative run has a baseline."""
    ratios: list[float] = []
    baseline = lead if lead.get("mode") == "baseline" else None
    for _label, a in runs:
        if a.get("mode") == "baseline":
            baseline = a
        elif a.get("mode") == "spec" and baseline is not None and _per_token(baseline) > 0:
            ratios.append(_per_token(a) / _per_token(baseline))
    if not ratios:
        return ""
    slower = sorted(ratios)
    faster = sorted(1 / x for x in ratios if x < 1)
    if all(f"{x:.1f}" == "1.0" for x in slower + faster):
        return "speculation is as fast per token"
    if all(x >= 1 for x in slower):
        return f"speculation is {_span(slower)} slower per token"
    if all(x < 1 for x in slower):
        return f"speculation is {_span(faster)} faster per token"
    return f"speculation is {_span(faster[-1:])} faster to {_span(slower[-1:])} slower per token"


def _per_token(analysis: AnalysisDoc) -> float:
    """The bar total: window over tokens (what ``compare``'s measured speedup divides); only
    asked of runs that counted their tokens."""
    return int(analysis["window_ns"]) / int(analysis.get("tokens") or 0)


def _span(factors: Sequence[float]) -> str:
    lo, hi = f"{factors[0]:.1f}x", f"{factors[-1]:.1f}x"
    return lo if lo == hi else f"{lo[:-1]} to {hi}"


def phases_figure(data: PhasesFigure) -> Figure:
    """Draw figure 1 from :func:`phases_data`."""
    with style("phases"):
        bars = data["bars"]
        fig = new_figure(10, 1.6 + 0.75 * max(len(bars), 1))
        ax = fig.add_subplot()
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "phase breakdown", reason)
            return fig
        ax.set_title(data["subtitle"], fontsize=9, color="#555555", fontweight="normal")
        n = len(bars)
        labels: dict[Text, tuple[Axes, LabelBar]] = {}
        longest = max((b["total"] for b in bars), default=1.0) or 1.0
        for i, bar in enumerate(bars):
            y = n - 1 - i
            for seg in bar["segments"]:
                color = phase_color(seg["phase"])
                (patch,) = ax.barh(
                    y, seg["width"], left=seg["left"], height=0.62, color=color,
                    edgecolor="white", linewidth=0.8,
                )  # fmt: skip
                if seg["text"]:
                    # The long text when it fits, else the short one (fit_labels decides).
                    for text in (seg["text_long"], seg["text"]):
                        t = ax.text(
                            seg["left"] + seg["width"] / 2, y, text, ha="center",
                            va="center", fontsize=8.5, color=text_color_on(color),
                        )  # fmt: skip
                        labels[t] = (ax, patch)
            ax.text(
                bar["total"] + longest * 0.01, y, bar["total_text"], va="center",
                ha="left", fontsize=8.5, color="#333333",
            )  # fmt: skip
        ax.set_yticks(range(n), [b["label"] for b in reversed(bars)])
        ax.set_xlim(0, longest * 1.28)
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xlabel(data["unit"])
        ax.tick_params(axis="y", length=0)
        phase_legend(fig, data["legend"], more=data["legend_more"])
        fit_labels(fig, labels)
        _one_label_per_segment(labels)
        return fig


def _one_label_per_segment(labels: Mapping[Text, tuple[Axes, LabelBar]]) -> None:
    """Keep only the first visible label of each segment (the long one when it fitted)."""
    seen: set[int] = set()
    for text, (_ax, patch) in labels.items():
        if text.get_visible():
            if id(patch) in seen:
                text.set_visible(False)
            seen.add(id(patch))


def from_runs(runs: Sequence[Run], options: RenderOptions) -> PhasesFigure:
    """The phases figure of analyzed traces: one bar per run (``plot phases``)."""
    return phases_data([(r.label, r.data) for r in runs])
