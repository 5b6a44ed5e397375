"""The one registry of renderers: every output that ``plot``, ``report`` and ``export`` write.

Each entry (:class:`~specnsys.render.renderer.Renderer`) says what users type to get it (a
plot KIND, ``export --format``'s value, ``report``'s format), the file suffixes it writes,
whether its output is binary or text, which result it renders, and how to load its
``render(result, options)``. The commands, on the command line and in :mod:`specnsys.api`,
look their renderers up here: argparse choices, the output-suffix checks and the "unknown
kind" messages come from these entries.

A new renderer is its module, its entry below, and its test (docs/design.md#renderers). An
entry's loaders import the renderer's module only when called, so reading the registry (the
command line does, to build its parser) loads neither matplotlib nor Polars.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, TypeVar

from specnsys.errors import UsageError
from specnsys.render.renderer import (
    DrawFunction,
    FigureData,
    FigureRenderer,
    FigureSource,
    FromDoc,
    FromRuns,
    Renderer,
    RenderOptions,
    checked_drawing,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from matplotlib.figure import Figure

    from specnsys.render.build import ReportContent
    from specnsys.render.perfetto import ExportSource

__all__ = [
    "EXPORTS", "FIGURES", "FIGURE_SUFFIXES", "REPORTS", "draw", "export_renderer", "figure_kinds",
    "figure_image", "figure_renderer", "report_renderer",
]  # fmt: skip

R = TypeVar("R")

FIGURE_SUFFIXES = ("png", "svg")
"""What every figure is written as (the output's suffix picks which)."""


# ------------------------------------------------------------------------------ plot KIND


def _render_figure(data: FigureData, options: RenderOptions) -> bytes:
    """A figure's data drawn and encoded as the PNG or SVG its output path asks for."""
    from specnsys.render.plots.common import figure_bytes

    if options.path is None:
        raise UsageError("a figure needs an output path (.png or .svg)")
    return figure_bytes(draw(data), options.path, salt=options.salt)


def _figure(
    kind: str,
    help: str,  # noqa: A002 - the entry's field
    draws: Callable[[], Mapping[str, DrawFunction]],
    *,
    renders: str = "the analyze --json documents of the traces",
    sources: tuple[FigureSource, ...] = ("traces",),
    from_runs: Callable[[], FromRuns] | None = None,
    from_doc: Callable[[], FromDoc] | None = None,
    applies: str = "",
    in_report: bool = False,
    per_token: bool = False,
    compares: bool = False,
) -> FigureRenderer:
    """A plot KIND's entry: every figure is rendered by :func:`_render_figure`."""
    return FigureRenderer(
        "plot", kind, FIGURE_SUFFIXES, True, renders, help, lambda: _render_figure,
        sources=sources, applies=applies, in_report=in_report, per_token=per_token,
        compares=compares, draws=draws, from_runs=from_runs, from_doc=from_doc,
    )  # fmt: skip


def _phases() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.phases import PhasesFigure, phases_figure

    return {"phases": checked_drawing(phases_figure, PhasesFigure)}


def _phases_data() -> FromRuns:
    from specnsys.render.plots.phases import from_runs

    return from_runs


def _amdahl() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.amdahl import AmdahlFigure, amdahl_figure

    return {"amdahl": checked_drawing(amdahl_figure, AmdahlFigure)}


def _amdahl_data() -> FromRuns:
    from specnsys.render.plots.amdahl import from_runs

    return from_runs


def _acceptance() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.acceptance import AcceptanceFigure, acceptance_figure

    return {"acceptance": checked_drawing(acceptance_figure, AcceptanceFigure)}


def _acceptance_data() -> FromRuns:
    from specnsys.render.plots.acceptance import from_runs

    return from_runs


def _sweep() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.sweep import SweepFigure, sweep_figure
    from specnsys.render.plots.sweep_grid import SweepGridFigure, sweep_grid_figure

    return {
        "sweep": checked_drawing(sweep_figure, SweepFigure),
        "sweep-grid": checked_drawing(sweep_grid_figure, SweepGridFigure),
    }


def _sweep_data() -> FromRuns:
    from specnsys.render.plots.sweep import from_runs

    return from_runs


def _sweep_grid_data() -> FromDoc:
    from specnsys.render.plots.sweep_grid import sweep_grid_data

    return sweep_grid_data


def _timeline() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.timeline import TimelineFigure, timeline_figure

    return {"timeline": checked_drawing(timeline_figure, TimelineFigure)}


def _timeline_data() -> FromDoc:
    from specnsys.render.plots.timeline import timeline_data

    return timeline_data


def _steps() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.steps import StepsFigure, steps_figure

    return {"steps": checked_drawing(steps_figure, StepsFigure)}


def _steps_data() -> FromRuns:
    from specnsys.render.plots.steps import from_runs

    return from_runs


def _verify_cost() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.verify_cost import VerifyCostFigure, verify_cost_figure

    return {"verify-cost": checked_drawing(verify_cost_figure, VerifyCostFigure)}


def _verify_cost_data() -> FromDoc:
    from specnsys.render.plots.verify_cost import verify_cost_data

    return verify_cost_data


def _forecast() -> Mapping[str, DrawFunction]:
    from specnsys.render.plots.forecast import ForecastFigure, forecast_figure

    return {"forecast": checked_drawing(forecast_figure, ForecastFigure)}


def _forecast_data() -> FromDoc:
    from specnsys.render.plots.forecast import forecast_data

    return forecast_data


FIGURES: tuple[FigureRenderer, ...] = (
    _figure("phases", "one bar per trace", _phases, from_runs=_phases_data,
            in_report=True, per_token=True),
    _figure("amdahl", "speedup vs r for the baseline's p (with the operating point when a "
            "baseline and a speculative trace are given; for a generic run one curve per "
            "largest phase, p = its share)", _amdahl, from_runs=_amdahl_data,
            in_report=True, per_token=True, compares=True),
    _figure("acceptance", "the first speculative trace", _acceptance,
            from_runs=_acceptance_data, in_report=True),
    _figure("sweep", "each speculative trace against the nearest baseline before it, or, "
            "given a dataset (specnsys collect), the measured speedup over k x concurrency",
            _sweep, from_runs=_sweep_data, from_doc=_sweep_grid_data, sources=("traces", "dataset"),
            renders="the analyze --json documents of the traces, or a collect dataset's sweep",
            per_token=True, compares=True),
    _figure("timeline", "one decode step of one trace", _timeline, from_doc=_timeline_data,
            sources=("lanes",),
            renders="one trace's timeline lanes (TimelineLanes.to_dict())", in_report=True),
    _figure("steps", "each trace's per-phase time per decode step and time per output token "
            "as p50/p90/p99/max (the tails, baseline beside speculative)", _steps,
            from_runs=_steps_data),
    _figure("verify-cost", "verify step time against (k + 1) x batch with the fitted line",
            _verify_cost, from_doc=_verify_cost_data, sources=("dataset",), applies="a dataset",
            renders="a collect dataset's verify-cost points"),
    _figure("forecast", "the predicted speedup against k per concurrency, measured points "
            "overlaid", _forecast, from_doc=_forecast_data, sources=("forecast",), applies="traces or a dataset",
            renders="a forecast (forecast --json) of traces or a dataset"),
)  # fmt: skip
"""Every plot KIND, in the order the help lists them (the report's first)."""


def figure_kinds(*sources: FigureSource, in_report: bool = False) -> tuple[str, ...]:
    """The plot KINDs drawn from any of *sources* (all without), or shown in the report."""
    return tuple(
        f.kind
        for f in FIGURES
        if (not sources or set(sources) & set(f.sources)) and (f.in_report or not in_report)
    )


def figure_renderer(kind: str, *sources: FigureSource) -> FigureRenderer:
    """The plot KIND *kind* (among those drawn from *sources*, when given); an unknown one is
    a :class:`UsageError` naming the known ones."""
    for f in FIGURES:
        if f.kind == kind and (not sources or set(sources) & set(f.sources)):
            return f
    known = figure_kinds(*sources)
    raise UsageError(f"unknown figure kind {kind!r} (one of {', '.join(known)})")


def _drawing(data: FigureData) -> tuple[FigureRenderer, DrawFunction]:
    """The plot KIND that makes figure data of *data*'s ``kind``, and its drawing of it."""
    kind = str(data["kind"])
    for f in FIGURES:
        drawings = f.draws() if f.draws is not None else {}
        if kind in drawings:
            return f, drawings[kind]
    raise UsageError(f"no drawing for figure data of kind {kind!r}")


def draw(data: FigureData) -> Figure:
    """Draw any figure data (its ``kind`` picks the drawing)."""
    return _drawing(data)[1](data)


def figure_image(data: FigureData, options: RenderOptions) -> bytes:
    """*data* drawn and encoded as ``options.path`` asks (PNG or SVG), by its plot KIND's
    renderer (a dataset's ``sweep-grid`` data is the ``sweep`` KIND's)."""
    image = _drawing(data)[0].render(data, options)
    assert isinstance(image, bytes), "a figure is binary"
    return image


# ------------------------------------------------------------------------ report FORMAT


def _report_html() -> Callable[[ReportContent, RenderOptions], str]:
    from specnsys.render.build import render_report

    return render_report


REPORTS: tuple[Renderer[ReportContent], ...] = (
    Renderer("report", "html", ("html", "htm"), False,
             "the analyses, comparison and timeline lanes of one or two traces",
             "self-contained HTML report: the answer, figures, what to cut first, tables",
             _report_html),
)  # fmt: skip
"""Every format ``report`` writes."""


def report_renderer(kind: str = "html") -> Renderer[ReportContent]:
    return _find(REPORTS, kind, "report format")


# ------------------------------------------------------------------------ export --format


def _perfetto() -> Callable[[ExportSource, RenderOptions], bytes]:
    from specnsys.render.perfetto import render

    return render


def _perfetto_stream() -> Callable[[ExportSource, RenderOptions, IO[bytes]], int]:
    from specnsys.render.perfetto import write

    return write


EXPORTS: tuple[Renderer[ExportSource], ...] = (
    Renderer("export", "perfetto", ("json", "json.gz"), True,
             "a timeline export (TimelineExport) of one trace",
             "Chrome trace-event JSON (Perfetto UI, chrome://tracing)",
             _perfetto, _perfetto_stream),
)  # fmt: skip
"""Every format ``export`` writes."""


def export_renderer(kind: str) -> Renderer[ExportSource]:
    return _find(EXPORTS, kind, "export format")


def _find(table: tuple[Renderer[R], ...], kind: str, what: str) -> Renderer[R]:
    for entry in table:
        if entry.kind == kind:
            return entry
    known = ", ".join(e.kind for e in table)
    raise UsageError(f"unknown {what} {kind!r} (one of {known})")
