"""The figures, as ``*_data`` (what to draw) + ``*_figure`` (drawing); each plot KIND's entry
(what it is drawn from, which drawing draws its data) is in :mod:`specnsys.render.registry`.

A figure that cannot be drawn (a baseline's acceptance, the Amdahl chart without a baseline,
a sweep without a comparison, ...) has its reason in ``not_available``: the report draws it as
a "not available" panel, :func:`require_drawable` turns it into the :class:`UsageError` that
``specnsys plot`` exits 2 with, before any file is written.

Every ``*_data`` function takes the plain dicts of ``analyze --json`` / ``compare --json``
(or, for the timeline, :meth:`TimelineLanes.to_dict`) and returns a JSON-able dict: titles,
labels, bar lengths, curve points. Tests snapshot that data, not pixels. Every ``*_figure``
function draws one such dict into a matplotlib :class:`~matplotlib.figure.Figure`;
:func:`save_figure` writes it as PNG or SVG.

========== ===================================================== ===========================
kind       shows                                                 data from
========== ===================================================== ===========================
phases     stacked bars of exclusive time per phase, one per run  analyses
amdahl     speedup vs r for the measured p, ceilings, cut curves  analysis (+ comparison)
acceptance per-position acceptance and accepted-per-step histogram spec analysis
sweep      predicted vs measured speedup across runs (k, c, ...)  comparisons
timeline   one decode step as CPU / API / GPU lanes               timeline lanes
========== ===================================================== ===========================

Two more draw a collected dataset (not part of a report): ``sweep-grid``, measured speedup over
k x concurrency, and ``verify-cost``, verify step time against (k + 1) x batch with the fitted
line; ``forecast`` draws a forecast's predicted speedup against k per concurrency.
"""

from __future__ import annotations

from collections.abc import Mapping

from specnsys.errors import UsageError
from specnsys.render.plots.acceptance import acceptance_data, acceptance_figure
from specnsys.render.plots.amdahl import amdahl_data, amdahl_figure
from specnsys.render.plots.common import FORMATS, figure_bytes, save_figure, svg_text
from specnsys.render.plots.forecast import forecast_data, forecast_figure
from specnsys.render.plots.phases import phases_data, phases_figure
from specnsys.render.plots.steps import steps_data, steps_figure
from specnsys.render.plots.sweep import sweep_data, sweep_figure
from specnsys.render.plots.sweep_grid import sweep_grid_data, sweep_grid_figure
from specnsys.render.plots.timeline import timeline_data, timeline_figure
from specnsys.render.plots.verify_cost import verify_cost_data, verify_cost_figure
from specnsys.render.registry import draw, figure_kinds

__all__ = [
    "FORMATS",
    "KINDS",
    "TRACE_KINDS",
    "acceptance_data",
    "acceptance_figure",
    "amdahl_data",
    "amdahl_figure",
    "draw",
    "figure_bytes",
    "forecast_data",
    "forecast_figure",
    "phases_data",
    "phases_figure",
    "require_drawable",
    "save_figure",
    "steps_data",
    "steps_figure",
    "svg_text",
    "sweep_data",
    "sweep_figure",
    "sweep_grid_data",
    "sweep_grid_figure",
    "timeline_data",
    "timeline_figure",
    "verify_cost_data",
    "verify_cost_figure",
]

KINDS = figure_kinds(in_report=True)
"""The figure kinds the report shows, in its order."""

TRACE_KINDS = figure_kinds("traces", "lanes")
"""Every figure ``plot`` draws from traces: the report's and ``steps`` (the per-phase
step-time tails, baseline beside speculative)."""


def require_drawable(data: Mapping[str, object]) -> None:
    """Raise :class:`UsageError` (exit 2, one line) when *data* is a figure that cannot be
    drawn, so a plot command refuses with the reason instead of writing a blank image."""
    reason = data.get("not_available")
    if reason:
        raise UsageError(f"cannot draw the {data['kind']} figure: {reason}")
