"""The cost of verification: verify step time against ``(k + 1) * batch`` (``plot
verify-cost DATASET``).

One panel per family (the runs of one model/workload: see
:mod:`specnsys.runset.cost_model`): each speculative decode step as a point (its verify time
against the positions it verified), the fitted least-squares line with its slope -- the
marginal cost per verified position -- and, for reference, the baseline's decode steps
(forward time against batch, one position per sequence) with their own line. Where the
verify points sit far above the baseline's at the same x, the wide pass is not free.

The data comes from :func:`specnsys.runset.sweep.verify_cost_points` (plain dicts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from specnsys.render.documents import document
from specnsys.render.palette import phase_color
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

__all__ = ["VerifyCostFigure", "VerifyCostPoints", "verify_cost_data", "verify_cost_figure"]


class Fit(TypedDict):
    """A least-squares line: ns at x = 0 and ns per unit of x, over *steps* points."""

    intercept: float
    slope: float
    steps: int
    r2: float | None


class VerifySteps(TypedDict):
    positions: list[int]
    verify_ns: list[int]


class BaselineSteps(TypedDict):
    batch: list[int]
    forward_ns: list[int]


class Family(TypedDict):
    """The runs of one model/workload: their steps and fitted lines."""

    labels: dict[str, str]
    verify: VerifySteps
    baseline: BaselineSteps
    verify_fit: Fit | None
    baseline_forward_fit: Fit | None


class VerifyCostPoints(TypedDict):
    """What :func:`specnsys.runset.sweep.verify_cost_points` returns (the keys read here)."""

    families: list[Family]


class VerifyCostFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    families: NotRequired[list[Family]]


def verify_cost_data(doc: Mapping[str, object]) -> VerifyCostFigure:
    """What the figure draws, from the verify-cost points of a dataset."""
    points = document(doc, VerifyCostPoints, "verify-cost points")
    families = [f for f in points.get("families", []) if f["verify"]["positions"]]
    if not families:
        return {
            "kind": "verify-cost",
            "title": "verify cost: not available",
            "not_available": "needs speculative decode steps with verify ranges, k and a batch "
            "size (proposed/accepted marks or request ranges)",
        }
    fits = [fit for f in families if (fit := f.get("verify_fit"))]
    if fits:
        fit = max(fits, key=lambda fit: fit["steps"])
        title = (
            f"verification costs {fit['slope']:,.0f} ns per extra verified position "
            f"(fitted on {fit['steps']} steps, R^2 {fit['r2'] or 0:.2f})"
        )
    else:
        title = "verify cost: too few distinct (k+1)*batch values to fit a line"
    return {"kind": "verify-cost", "title": title, "not_available": None, "families": families}


def _line(ax: Axes, fit: Fit | None, xs: list[float], color: str, label: str) -> None:
    if not fit or not xs:
        return
    lo, hi = min(xs), max(xs)
    ax.plot([lo, hi], [(fit["intercept"] + fit["slope"] * x) / 1e6 for x in (lo, hi)], "-",
            color=color, lw=1.8, label=label)  # fmt: skip


def verify_cost_figure(data: VerifyCostFigure) -> Figure:
    """Draw :func:`verify_cost_data`."""
    with style("verify-cost"):
        families = data.get("families") or []
        fig = new_figure(max(6.5, 5.0 * max(1, len(families))), 4.8)
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(fig.add_subplot(), "verify cost", reason)
            return fig
        axes = fig.subplots(1, len(families), squeeze=False)[0]
        verify, forward = phase_color("verify"), phase_color("forward")
        for ax, fam in zip(axes, families, strict=True):
            name = ", ".join(f"{k}={v}" for k, v in fam["labels"].items()) or "all runs"
            ax.set_title(name, fontsize=10)
            v, b = fam["verify"], fam["baseline"]
            ax.scatter(v["positions"], [y / 1e6 for y in v["verify_ns"]], s=14, alpha=0.6,
                       color=verify, label="verify steps")  # fmt: skip
            fit = fam.get("verify_fit")
            label = "verify fit" if not fit else (
                f"fit: {fit['intercept'] / 1e3:,.0f} us {'-' if fit['slope'] < 0 else '+'} "
                f"{abs(fit['slope']) / 1e3:,.1f} us x (k+1)*batch"
            )  # fmt: skip
            _line(ax, fit, [float(x) for x in v["positions"]], verify, label)
            if b["batch"]:
                ax.scatter(b["batch"], [y / 1e6 for y in b["forward_ns"]], s=14, alpha=0.6,
                           marker="s", color=forward, label="baseline decode steps (forward)")  # fmt: skip
                _line(ax, fam.get("baseline_forward_fit"), [float(x) for x in b["batch"]],
                      forward, "baseline fit (forward vs batch)")  # fmt: skip
            ax.set_xlabel("positions verified per step: (k + 1) x batch (baseline: batch)")
            ax.set_ylabel("time per step (ms)")
            ax.set_ylim(bottom=0)
            ax.grid(True, color="#EEEEEE")
            ax.legend(fontsize=8)
        return fig
