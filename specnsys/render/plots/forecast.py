"""The forecast: predicted speedup against k, one line per concurrency (``plot forecast``).

Each line is the step model's end-to-end speedup (baseline over speculative time per output
token) at k = 1 .. k_max for one concurrency, with its best k marked; where the sources ran
that very workload at a (concurrency, k), the measured speedup is drawn on top as a point of
the line's colour, so a reader sees at once how far the prediction is from what was measured.
A dashed line at 1 separates paying from not paying.

The data comes from ``to_dict`` of a :class:`specnsys.forecasting.results.Forecast` (plain dicts:
the curves and measured points are computed in the forecast layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from matplotlib.figure import Figure

from specnsys.render.documents import document
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

__all__ = ["ForecastDoc", "ForecastFigure", "forecast_data", "forecast_figure"]


class Curve(TypedDict):
    """Predicted speedup against k at one concurrency (:class:`specnsys.forecasting.results.
    Curve`), with the measured points."""

    concurrency: int
    k: list[int]
    speedup: list[float]
    best_k: int
    best_speedup: float
    measured_k: list[int]
    measured_speedup: list[float]


class Workload(TypedDict):
    source: str


class HeldOut(TypedDict):
    median_abs_error: float | None


class ForecastDoc(TypedDict):
    """``forecast --json`` (the keys read here)."""

    curves: list[Curve]
    workload: Workload
    held_out: HeldOut


class ForecastFigure(TypedDict):
    kind: str
    title: str
    not_available: str | None
    lines: NotRequired[list[Curve]]

_COLORS = ("#1F77B4", "#D62728", "#2CA02C", "#9467BD", "#FF7F0E", "#8C564B", "#E377C2")


def forecast_data(doc: Mapping[str, object]) -> ForecastFigure:
    """What the figure draws, from a forecast's JSON dict."""
    forecast = document(doc, ForecastDoc, "a forecast document")
    curves = [c for c in forecast.get("curves") or [] if c.get("k")]
    if not curves:
        return {
            "kind": "forecast",
            "title": "forecast: not available",
            "not_available": "needs a speculative source (draft, verify and acceptance) or "
            "--alpha: no speedup against k to draw",
        }
    lines: list[Curve] = []
    for c in curves:
        lines.append(
            {
                "concurrency": c["concurrency"],
                "k": list(c["k"]),
                "speedup": [float(s) for s in c["speedup"]],
                "best_k": c["best_k"],
                "best_speedup": float(c["best_speedup"]),
                "measured_k": list(c["measured_k"]),
                "measured_speedup": [float(s) for s in c["measured_speedup"]],
            }
        )
    work = forecast.get("workload")
    held = forecast.get("held_out")
    error = held.get("median_abs_error") if held else None
    tail = f"; held-out error {error:.0%} (median)" if isinstance(error, float) else ""
    source = work.get("source", "the workload") if work else "the workload"
    title = f"predicted speedup against k for {source}{tail}"
    return {"kind": "forecast", "title": title, "not_available": None, "lines": lines}


def forecast_figure(data: ForecastFigure) -> Figure:
    """Draw :func:`forecast_data`."""
    with style("forecast"):
        fig = new_figure(7.5, 4.8)
        suptitle(fig, data["title"])
        ax = fig.add_subplot()
        reason = data.get("not_available")
        if reason:
            not_available_panel(ax, "forecast", reason)
            return fig
        top = 1.0
        for i, line in enumerate(data["lines"]):
            color = _COLORS[i % len(_COLORS)]
            ax.plot(line["k"], line["speedup"], "-", color=color, lw=1.8,
                    label=f"concurrency {line['concurrency']} (best k {line['best_k']}: "
                    f"{line['best_speedup']:.2f}x)")  # fmt: skip
            ax.plot([line["best_k"]], [line["best_speedup"]], "o", color=color, ms=7,
                    mfc="white")  # fmt: skip
            if line["measured_k"]:
                ax.plot(line["measured_k"], line["measured_speedup"], "s", color=color, ms=6,
                        label=f"measured, concurrency {line['concurrency']}")  # fmt: skip
            top = max(top, *line["speedup"], *(line["measured_speedup"] or [0.0]))
        ax.axhline(1.0, color="#777777", ls="--", lw=1)
        ax.set_xlabel("k (drafts per step)")
        ax.set_ylabel("end-to-end speedup (baseline / speculative time per token)")
        ax.set_ylim(0, top * 1.1)
        ax.grid(True, color="#EEEEEE")
        ax.legend(fontsize=8)
        return fig
