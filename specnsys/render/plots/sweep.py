"""Figure 4, sweep: predicted vs measured speedup across runs (k, concurrency, or any labels).

One point per speculative run, each compared with its own baseline (``compare --json``): the
Amdahl prediction from the baseline's p and the run's r, and the measured per-token speedup.
The x axis is ``k`` when every run reports a distinct k (``k`` or ``acceptance.k`` in its
analysis), else ``concurrency`` when every run reports a distinct one, else the run labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from specnsys.errors import UsageError
from specnsys.render.palette import phase_color
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

if TYPE_CHECKING:
    from specnsys.render.documents import AnalysisDoc, ComparisonDoc
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = ["SweepFigure", "SweepRun", "sweep_data", "sweep_figure"]


class SweepRun(TypedDict):
    """One speculative run of a sweep, with its comparison against its baseline."""

    label: str
    analysis: AnalysisDoc
    comparison: ComparisonDoc | None


class SweepFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    axis: NotRequired[str]
    x: NotRequired[list[int] | list[str]]
    labels: NotRequired[list[str]]
    measured: NotRequired[list[float]]
    predicted: NotRequired[list[float]]
    gap: NotRequired[list[float]]
    p: NotRequired[list[float | None]]
    r: NotRequired[list[float | None]]


def _k(analysis: AnalysisDoc) -> int | None:
    k = analysis.get("k")
    if k is None:
        acceptance = analysis.get("acceptance")
        k = acceptance.get("k") if acceptance else None
    return None if k is None else int(k)


def _concurrency(analysis: AnalysisDoc) -> int | None:
    return analysis.get("concurrency")


def _axis(runs: Sequence[SweepRun]) -> tuple[str, list[int]] | None:
    """The setting the runs differ by (k, else concurrency), and each run's value; None when
    neither tells every run apart."""
    for name, get in (("k", _k), ("concurrency", _concurrency)):
        values = [get(r["analysis"]) for r in runs]
        present = [v for v in values if v is not None]
        if len(present) == len(values) and len(set(present)) == len(present):
            return name, present
    return None


def sweep_data(runs: Sequence[SweepRun]) -> SweepFigure:
    """What figure 4 draws.

    Each run is ``{"label": str, "analysis": analyze dict of the speculative run,
    "comparison": compare dict against its baseline}``.
    """
    usable = [
        (r, c, m_, p_)
        for r in runs
        if (c := r.get("comparison"))
        and (m_ := c.get("measured_speedup")) is not None
        and (p_ := c.get("predicted_speedup")) is not None
    ]
    if not usable:
        return {
            "kind": "sweep",
            "title": "sweep: not available",
            "not_available": "needs at least one speculative run compared with a baseline",
        }
    found = _axis([r for r, *_ in usable])
    xs: list[int] | list[str]
    if found is None:
        axis, xs = "run", [r["label"] for r, *_ in usable]
    else:
        axis, values = found
        usable = [u for _, u in sorted(zip(values, usable, strict=True), key=lambda t: t[0])]
        xs = sorted(values)
    measured = [float(m) for _r, _c, m, _p in usable]
    predicted = [float(p) for _r, _c, _m, p in usable]
    # compare's gap: measured / predicted - 1 (negative: the run fell short of the prediction).
    gap = [
        float(g_) if (g_ := c.get("gap")) is not None else m / p - 1
        for (_r, c, _m, _p), m, p in zip(usable, measured, predicted, strict=True)
    ]
    best = max(range(len(usable)), key=lambda i: measured[i])
    worst = max(range(len(usable)), key=lambda i: abs(gap[i]))
    where = f"{axis} = {xs[best]}" if axis != "run" else str(xs[best])
    if measured[best] > 1.0:
        title = f"best measured: {measured[best]:.2f}x at {where}"
    else:
        title = f"no run beats its baseline (best {measured[best]:.2f}x at {where})"
    title += f"; prediction off by up to {abs(gap[worst]):.0%}"
    return {
        "kind": "sweep",
        "title": title,
        "not_available": None,
        "axis": axis,
        "x": xs,
        "labels": [r["label"] for r, *_ in usable],
        "measured": measured,
        "predicted": predicted,
        "gap": gap,
        "p": [c.get("p") for _r, c, _m, _p in usable],
        "r": [c.get("r") for _r, c, _m, _p in usable],
    }


def sweep_figure(data: SweepFigure) -> Figure:
    """Draw figure 4 from :func:`sweep_data`."""
    with style("sweep"):
        fig = new_figure(8.5, 5.2)
        ax = fig.add_subplot()
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "sweep", reason)
            return fig
        positions = list(range(len(data["x"])))
        accel = phase_color("verify")
        ax.fill_between(positions, data["predicted"], data["measured"], color="#DDDDDD",
                        label="gap", step=None)  # fmt: skip
        ax.plot(positions, data["predicted"], "D--", color=accel, ms=7, lw=1.6,
                mfc="white", mew=1.6, label="predicted (Amdahl, baseline p and this r)")  # fmt: skip
        ax.plot(positions, data["measured"], "o-", color="#222222", ms=7, lw=2,
                label="measured (baseline / spec time per token)")  # fmt: skip
        ax.axhline(1.0, color="#999999", lw=0.8)
        if data["axis"] == "run":
            ticks = list(data["labels"])
        else:
            ticks = [f"{data['axis']} = {x}" for x in data["x"]]
        ax.set_xticks(positions, [f"{t}\n{e:+.0%}" for t, e in zip(ticks, data["gap"],
                                                                     strict=True)])  # fmt: skip
        ax.set_xlim(-0.4, len(positions) - 0.6)
        values = data["measured"] + data["predicted"] + [1.0]
        span = max(values) - min(values) or 1.0
        ax.set_ylim(max(0.0, min(values) - 0.15 * span), max(values) + 0.3 * span)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.2g}x"))
        ax.set_ylabel("end-to-end speedup over the baseline")
        ax.set_xlabel(f"{data['axis']} (below: gap = measured / predicted - 1)")
        ax.grid(True, axis="y", color="#EEEEEE")
        fig.legend(loc="outside lower center", ncol=3, fontsize=8.5)
        return fig


def from_runs(runs: Sequence[Run], options: RenderOptions) -> SweepFigure:
    """Each speculative run against the nearest baseline before it (two runs may come in
    either order) (``plot sweep`` of traces)."""
    from specnsys.render.runs import pair_runs

    modes = {r.analysis.mode for r in runs}
    if "generic" in modes:
        raise UsageError(
            "sweep needs a baseline trace and at least one speculative trace (it draws p, r "
            "and speedups); generic runs have none: use plot phases or compare A B"
        )
    if not {"baseline", "spec"} <= modes:
        raise UsageError("sweep needs a baseline trace and at least one speculative trace")
    return sweep_data(
        [
            {"label": s.label, "analysis": s.data, "comparison": c}
            for _b, s, c in pair_runs(runs, same_output=options.same_output)
        ]
    )
