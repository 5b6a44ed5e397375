"""From analyzed runs to figure data and the HTML report (``specnsys plot`` / ``specnsys report``).

Pure rendering glue: it takes the analyses, comparisons and timeline lanes that the application
layer (:mod:`specnsys.api`) computed, ranks what to cut (:func:`specnsys.metrics.whatcut.what_to_cut`),
hands the plain dicts to the figure and HTML renderers and returns what they made. It opens no
trace and runs no analysis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specnsys.errors import UsageError

if TYPE_CHECKING:
    from specnsys.metrics import Analysis

__all__ = ["Run", "figure_data", "pair_runs", "render_report", "run_label"]


@dataclass(frozen=True)
class Run:
    """One analyzed trace: its label, its path and its ``analyze --json`` dict."""

    label: str
    path: Path
    analysis: Analysis

    @property
    def data(self) -> dict[str, Any]:
        return self.analysis.to_dict()


def run_label(path: str | Path) -> str:
    """The name a run goes by in figures and tables: the file name without its suffix."""
    name = Path(path).name
    for suffix in (".sqlite", ".nsys-rep", ".sqlite3", ".db"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def pair_runs(
    runs: Sequence[Run], *, same_output: bool = False
) -> list[tuple[Run, Run, dict[str, Any]]]:
    """(baseline, spec, compare dict) for each speculative run, nearest baseline before it.

    Two traces given in either order are put as baseline, spec first. *same_output*: the
    runs produced the same output (see :func:`specnsys.metrics.compare_runs`).
    """
    from specnsys.metrics import Comparison, compare_many
    from specnsys.metrics.comparison import with_same_output

    if len(runs) == 2 and runs[0].analysis.mode == "spec" and runs[1].analysis.mode == "baseline":
        runs = [runs[1], runs[0]]
    comparisons = [
        c for c in compare_many([r.analysis for r in runs]) if isinstance(c, Comparison)
    ]
    if same_output:
        comparisons = with_same_output(comparisons)
    by_id = {id(r.analysis): r for r in runs}
    return [(by_id[id(c.baseline)], by_id[id(c.spec)], c.to_dict()) for c in comparisons]


def figure_data(kind: str, runs: Sequence[Run], *, same_output: bool = False) -> dict[str, Any]:
    """The figure data of *kind* (any but the timeline, drawn from lanes) for *runs*.

    * phases: one bar per run; * amdahl: the first baseline's p, with the operating point
      of the first baseline/spec pair when there is one; * acceptance: the first speculative
      run; * sweep: each speculative run against the nearest baseline before it (two runs
      may come in either order).
    """
    from specnsys.render import plots

    if kind == "phases":
        return plots.phases_data([(r.label, r.data) for r in runs])
    if kind == "steps":
        return plots.steps_data([(r.label, r.data) for r in runs])
    if kind == "acceptance":
        spec = next((r for r in runs if r.analysis.mode == "spec"), runs[0])
        return plots.acceptance_data(spec.data)
    modes = {r.analysis.mode for r in runs}
    if kind == "amdahl":
        if {"baseline", "spec"} <= modes:
            base, _spec, comparison = pair_runs(runs, same_output=same_output)[0]
            return plots.amdahl_data(base.data, comparison)
        return plots.amdahl_data(runs[0].data)
    if kind != "sweep":
        raise UsageError(f"unknown figure kind {kind!r} (one of {', '.join(plots.TRACE_KINDS)})")
    if "generic" in modes:
        raise UsageError(
            "sweep needs a baseline trace and at least one speculative trace (it draws p, r "
            "and speedups); generic runs have none: use plot phases or compare A B"
        )
    if not {"baseline", "spec"} <= modes:
        raise UsageError("sweep needs a baseline trace and at least one speculative trace")
    return plots.sweep_data(
        [
            {"label": s.label, "analysis": s.data, "comparison": c}
            for _b, s, c in pair_runs(runs, same_output=same_output)
        ]
    )


def render_report(
    runs: Sequence[Run],
    comparison: dict[str, Any] | None,
    lanes: dict[str, Any] | str,
    advance: Callable[[str], None],
) -> str:
    """The self-contained HTML report of *runs* (the baseline first when there are two, with
    their *comparison*) and the timeline *lanes* of the analyzed trace (or why there are none:
    a trace without phase ranges has no driver thread to draw); *advance* moves the progress
    display on."""
    from specnsys import __version__
    from specnsys.metrics.whatcut import what_to_cut
    from specnsys.render import plots
    from specnsys.render.html import ReportFigure, render_report_html

    advance("what to cut")
    docs = [r.data for r in runs]
    cuts = [what_to_cut(d) for d in docs]  # once per run: the table, titles and chart share it
    advance("figures")
    spec = next((r for r in runs if r.analysis.mode == "spec"), None)
    labelled = [(r.label, d) for r, d in zip(runs, docs, strict=True)]
    figure_data = [plots.phases_data(labelled, cuts)]
    paired = None if comparison is not None and comparison.get("kind") == "ab" else comparison
    figure_data.append(plots.amdahl_data(docs[0], paired, cut=cuts[0]))
    if spec is not None:
        figure_data.append(plots.acceptance_data(spec.data))
    if isinstance(lanes, str):
        figure_data.append(
            {"kind": "timeline", "title": "timeline: not available", "rows": [],
             "not_available": lanes}
        )  # fmt: skip
    else:
        figure_data.append(plots.timeline_data(lanes))
    figures = []
    for data in figure_data:
        fig = plots.draw(data)
        figures.append(
            ReportFigure(data["kind"], data["title"], plots.svg_text(fig, salt=data["kind"]))
        )
    advance("render HTML")
    return render_report_html(
        runs=labelled,
        comparison=comparison,
        whatcut=cuts[0].to_dict(),
        figures=figures,
        timeline_label=None if isinstance(lanes, str) else lanes["label"],
        version=__version__,
    )
