"""The HTML report of analyzed runs (``specnsys report``): the registry's ``html`` renderer.

Pure rendering glue: it takes the analyses, comparison and timeline lanes that the application
layer (:mod:`specnsys.api`) computed, ranks what to cut (:func:`specnsys.metrics.whatcut.what_to_cut`),
hands the plain dicts to the figure and HTML renderers and returns the page. It opens no
trace and runs no analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specnsys.render.documents import ABDoc, ComparisonDoc, LanesDoc, is_ab, whatcut_doc

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from specnsys.render.plots.timeline import TimelineFigure
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = ["ReportContent", "render_report"]


@dataclass(frozen=True)
class ReportContent:
    """What the report renders: *runs* (the baseline first when there are two), their
    *comparison* (``compare --json``, or an A/B diff's), and the timeline *lanes* of the
    analyzed trace (:meth:`TimelineLanes.to_dict`), or why there are none (a trace without
    phase ranges has no driver thread to draw)."""

    runs: Sequence[Run]
    comparison: ComparisonDoc | ABDoc | None
    lanes: LanesDoc | str


def render_report(content: ReportContent, options: RenderOptions) -> str:
    """The self-contained HTML report of *content*; ``options.progress`` moves the progress
    display on."""
    from specnsys import __version__
    from specnsys.metrics.whatcut import what_to_cut
    from specnsys.render.html import ReportFigure, render_report_html
    from specnsys.render.plots.acceptance import acceptance_data, acceptance_figure
    from specnsys.render.plots.amdahl import amdahl_data, amdahl_figure
    from specnsys.render.plots.common import svg_text
    from specnsys.render.plots.phases import phases_data, phases_figure
    from specnsys.render.plots.timeline import timeline_data, timeline_figure

    advance = options.progress or _quiet
    runs, comparison, lanes = content.runs, content.comparison, content.lanes
    advance("what to cut")
    docs = [r.data for r in runs]
    cuts = [what_to_cut(d) for d in docs]  # once per run: the table, titles and chart share it
    advance("figures")
    spec = next((r for r in runs if r.analysis.mode == "spec"), None)
    labelled = [(r.label, d) for r, d in zip(runs, docs, strict=True)]
    paired = None if comparison is not None and is_ab(comparison) else comparison
    # the report's figures, in its order (phases, amdahl, acceptance, timeline): each one's
    # kind, title and drawing, the data of all made before any is drawn
    p, a = phases_data(labelled, cuts), amdahl_data(docs[0], paired, cut=cuts[0])
    drawn: list[tuple[str, str, Callable[[], Figure]]] = [
        (p["kind"], p["title"], lambda: phases_figure(p)),
        (a["kind"], a["title"], lambda: amdahl_figure(a)),
    ]
    if spec is not None:
        acc = acceptance_data(spec.data)
        drawn.append((acc["kind"], acc["title"], lambda: acceptance_figure(acc)))
    t: TimelineFigure = (
        {"kind": "timeline", "title": "timeline: not available", "rows": [],
         "not_available": lanes}
        if isinstance(lanes, str)
        else timeline_data(lanes)
    )  # fmt: skip
    drawn.append((t["kind"], t["title"], lambda: timeline_figure(t)))
    figures = [ReportFigure(kind, title, svg_text(draw(), salt=kind)) for kind, title, draw in drawn]
    advance("render HTML")
    return render_report_html(
        runs=labelled,
        comparison=comparison,
        whatcut=whatcut_doc(cuts[0].to_dict()),
        figures=figures,
        timeline_label=None if isinstance(lanes, str) else lanes["label"],
        version=__version__,
    )


def _quiet(_stage: str) -> None:
    """No progress display."""
