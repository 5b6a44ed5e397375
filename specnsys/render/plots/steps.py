"""The tails a median hides: per-phase time per decode step, and the time per output token,
as p50 / p90 / p99 / max per run (``plot steps BASELINE SPEC...``).

One row per phase (and a last row for the time per output token a sequence saw in a step),
one marker ladder per run inside the row: a line from p50 to max with a marker at p50, p90,
p99 and max. The x axis is logarithmic because the phases of one step span four orders of
magnitude (a 10 us sync beside a 5 ms draft), and a tail is a ratio to its median.

The numbers are ``analyze --json``'s ``step_distributions`` (see
:mod:`specnsys.metrics.distributions`: over the decode steps of the window, a phase absent
from a step counts 0 there), converted to milliseconds; nothing is recomputed here. A zero
quantile (a phase most steps do not run) cannot sit on a log axis and is left out of the
ladder, and the data says so (``zero``); a run with no quantile above 0 at all is listed as
skipped, with that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NotRequired, TypeAlias, TypedDict

from matplotlib.figure import Figure

from specnsys.render.palette import ordered_phases
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

if TYPE_CHECKING:
    from specnsys.render.documents import AnalysisDoc, Spread
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = ["STEP_QUANTILES", "StepsFigure", "steps_data", "steps_figure"]

STEP_QUANTILES = ("p50", "p90", "p99", "max")
"""The points of each ladder, in order."""

TOKEN_ROW = "per output token"
"""The last row: the time per output token a sequence saw in one step (TPOT per step)."""

_MARKERS = {"p50": "o", "p90": "^", "p99": "D", "max": "x"}
_RUN_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860")

Ladder: TypeAlias = dict[str, float | None]
"""One row's quantiles (:data:`STEP_QUANTILES`) in ms."""


class StepRun(TypedDict):
    """One drawn run: its ladders per phase and per output token, and the rows' zero points."""

    label: str
    mode: str | None
    steps: int
    of: str | None
    step_ms: Ladder | None
    per_token_ms: Ladder | None
    phases: dict[str, Ladder]
    zero: dict[str, list[str]]


class Skipped(TypedDict):
    label: str
    not_available: str


class StepsFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    skipped: list[Skipped]
    unit: NotRequired[str]
    rows: NotRequired[list[str]]
    runs: NotRequired[list[StepRun]]


#: Why a run with decode steps is not drawn: a log axis shows positive values only.
_NOTHING_TO_DRAW = (
    "nothing to draw: no phase inside its decode steps and no time per output token has a "
    "quantile above 0"
)


def _ms(spread: Spread | None) -> Ladder | None:
    if not isinstance(spread, Mapping) or not spread.get("count"):
        return None
    every = {"p50": spread.get("p50"), "p90": spread.get("p90"), "p99": spread.get("p99"),
             "max": spread.get("max")}  # fmt: skip
    return {q: (None if (ns := every[q]) is None else float(ns) / 1e6) for q in STEP_QUANTILES}


def steps_data(runs: Sequence[tuple[str, AnalysisDoc]]) -> StepsFigure:
    """What the figure draws for *runs* (label, ``analyze --json`` dict): per run, each
    phase's and the per-token step-time quantiles in ms; runs without decode steps are listed
    with their reason and not drawn."""
    drawn: list[StepRun] = []
    skipped: list[Skipped] = []
    for label, a in runs:
        dist = a.get("step_distributions")
        if not isinstance(dist, Mapping) or not dist.get("steps"):
            na = a.get("not_available")
            why = (na.get("step_distributions") if na else None) or "no decode steps"
            skipped.append({"label": label, "not_available": str(why)})
            continue
        phases: dict[str, dict[str, float | None]] = {}
        for name, s in (dist.get("phases") or {}).items():
            if (q := _ms(s)) is not None:
                phases[name] = q
        per_token = _ms(dist.get("ns_per_token"))
        ladders = {**phases, **({TOKEN_ROW: per_token} if per_token else {})}
        if not any(x for q in ladders.values() for x in q.values()):
            skipped.append({"label": label, "not_available": _NOTHING_TO_DRAW})
            continue
        drawn.append(
            {
                "label": label,
                "mode": a.get("mode"),
                "steps": int(dist["steps"]),
                "of": dist.get("of"),
                "step_ms": _ms(dist.get("step_ns")),
                "per_token_ms": per_token,
                "phases": phases,
                "zero": {
                    row: zeros
                    for row, q in ladders.items()
                    if (zeros := [name for name in STEP_QUANTILES if q[name] == 0])
                },
            }
        )
    if not drawn:
        reasons = "; ".join(f"{s['label']}: {s['not_available']}" for s in skipped)
        return {
            "kind": "steps",
            "title": "step-time tails: not available",
            "not_available": f"no run has decode steps to draw ({reasons})",
            "skipped": skipped,
        }
    rows = ordered_phases(n for r in drawn for n in r["phases"])
    if any(r["per_token_ms"] for r in drawn):
        rows.append(TOKEN_ROW)
    return {
        "kind": "steps",
        "title": _title(drawn),
        "not_available": None,
        "unit": "ms per decode step (log scale)",
        "rows": rows,
        "runs": drawn,
        "skipped": skipped,
    }


def _title(runs: Sequence[StepRun]) -> str:
    """The finding: the time per output token's p50 and p99 per run (what SLOs are written
    in), or the step time's where tokens were not counted."""
    per_token = all(r["per_token_ms"] for r in runs)
    what = "time per output token" if per_token else "decode step time"
    parts = []
    for r in runs:
        q = r["per_token_ms"] if per_token else r["step_ms"]
        if not q or q.get("p50") is None or q.get("p99") is None:
            continue
        parts.append(f"{r['label']} p50 {q['p50']:.3g} / p99 {q['p99']:.3g} ms")
    return f"{what} per step: " + "; ".join(parts) if parts else f"{what}: no quantiles"


def steps_figure(data: StepsFigure) -> Figure:
    """Draw :func:`steps_data`."""
    with style("steps"):
        rows = list(data.get("rows") or [])
        runs = list(data.get("runs") or [])
        fig = new_figure(9.0, max(3.2, 0.55 * len(rows) * max(1, len(runs)) ** 0.5 + 1.6))
        suptitle(fig, data["title"])
        ax = fig.add_subplot()
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "step-time tails", reason)
            return fig
        band = 0.8 / max(1, len(runs))
        for i, run in enumerate(runs):
            color = _RUN_COLORS[i % len(_RUN_COLORS)]
            for j, row in enumerate(rows):
                q = run["per_token_ms"] if row == TOKEN_ROW else run["phases"].get(row)
                if not q:
                    continue
                y = j - 0.4 + band * (i + 0.5)
                points = [(name, x) for name in STEP_QUANTILES if (x := q.get(name))]
                if len(points) >= 2:
                    ax.plot([points[0][1], points[-1][1]], [y, y], "-", color=color, lw=1.2)
                for name, x in points:
                    ax.plot([x], [y], _MARKERS[name], color=color, ms=5 if name != "max" else 6)
                zeros = run["zero"].get(row)
                if zeros and points:
                    ax.annotate(f"({', '.join(zeros)}: 0)", (points[-1][1], y), color=color,
                                xytext=(7, 0), textcoords="offset points", fontsize=7,
                                ha="left", va="center")  # fmt: skip
            ax.plot([], [], "s", color=color, label=f"{run['label']} ({run['steps']} steps)")
        for name in STEP_QUANTILES:
            ax.plot([], [], _MARKERS[name], color="#333333", label=name)
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xscale("log")
        ax.set_xlabel(data["unit"] + "; the last row: ms per output token in a step")
        ax.grid(True, axis="x", which="both", color="#EEEEEE")
        ax.legend(fontsize=8, loc="best")
        return fig


def from_runs(runs: Sequence[Run], options: RenderOptions) -> StepsFigure:
    """The step-time tails of analyzed traces, one panel row per run (``plot steps``)."""
    return steps_data([(r.label, r.data) for r in runs])
