"""From trace files to figure data and the HTML report (``specnsys plot`` / ``specnsys report``).

The glue between the layers: it opens traces, runs the metrics
(:func:`specnsys.metrics.analyze_trace`, :func:`specnsys.metrics.compare_runs`,
:func:`specnsys.metrics.whatcut.what_to_cut`) and the timeline lanes, and hands the plain
dicts to the pure figure and HTML renderers. Nothing here computes a metric.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specnsys.errors import BadInputError, UsageError
from specnsys.report.progress import progress

if TYPE_CHECKING:
    from specnsys.metrics import Analysis

__all__ = ["Run", "analyze_paths", "build_report", "plot_data", "run_label"]


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


def _analyze(
    path: str | Path,
    *,
    rules: Any,
    pid: int | None,
    use_cache: bool,
    lanes_step: int | None = None,
    lanes_window: tuple[float, float] | None = None,
    want_lanes: bool = False,
) -> tuple[Run, dict[str, Any] | None]:
    from specnsys.attribution.lanes import timeline_lanes
    from specnsys.ingest import open_trace
    from specnsys.metrics import analyze_trace

    with open_trace(path, use_cache=use_cache) as trace:
        analysis = analyze_trace(trace, rules=rules, pid=pid)
        lanes = None
        if want_lanes:
            lanes = timeline_lanes(
                trace, step=lanes_step, window_ms=lanes_window, pid=pid, rules=rules
            ).to_dict()
    return Run(run_label(path), Path(path), analysis), lanes


def analyze_paths(
    paths: Sequence[str | Path],
    *,
    rules: Any = None,
    pid: int | None = None,
    use_cache: bool = True,
    advance: Callable[[str], None] | None = None,
) -> list[Run]:
    """Analyze every trace of *paths*, in order."""
    runs = []
    for path in paths:
        if advance is not None:
            advance(f"analyze {Path(path).name}")
        runs.append(_analyze(path, rules=rules, pid=pid, use_cache=use_cache)[0])
    return runs


def _pairs(runs: list[Run]) -> list[tuple[Run, Run, dict[str, Any]]]:
    """(baseline, spec, compare dict) for each speculative run, nearest baseline before it.

    Two traces given in either order are put as baseline, spec first.
    """
    from specnsys.metrics import compare_many

    if len(runs) == 2 and runs[0].analysis.mode == "spec" and runs[1].analysis.mode == "baseline":
        runs = [runs[1], runs[0]]
    comparisons = compare_many([r.analysis for r in runs])
    by_id = {id(r.analysis): r for r in runs}
    return [(by_id[id(c.baseline)], by_id[id(c.spec)], c.to_dict()) for c in comparisons]


def plot_data(
    kind: str,
    paths: Sequence[str | Path],
    *,
    rules: Any = None,
    pid: int | None = None,
    step: int | None = None,
    window_ms: tuple[float, float] | None = None,
    use_cache: bool = True,
) -> dict[str, Any]:
    """The figure data of *kind* for the traces *paths* (what ``specnsys plot`` draws).

    * phases: one bar per trace; * amdahl: the first baseline's p, with the operating point
      of the first baseline/spec pair when there is one; * acceptance: the first speculative
      trace; * sweep: each speculative trace against the nearest baseline before it (two
      traces may come in either order); * timeline: one trace, decode step *step*.
    """
    from specnsys.report import plots

    if kind not in plots.KINDS:
        raise UsageError(f"unknown figure kind {kind!r} (one of {', '.join(plots.KINDS)})")
    if not paths:
        raise UsageError(f"{kind} needs at least one trace")
    if kind == "timeline":
        if len(paths) != 1:
            raise UsageError("timeline draws one trace; give exactly one")
        from specnsys.attribution.lanes import timeline_lanes
        from specnsys.ingest import open_trace

        # Lanes need phase ranges only, not a baseline/speculative run: any annotated trace
        # (or any trace under --rules nvtx) can be drawn.
        with progress(1, "timeline") as advance, open_trace(paths[0], use_cache=use_cache) as t:
            advance(f"lanes of {Path(paths[0]).name}")
            lanes = timeline_lanes(
                t, step=step, window_ms=window_ms, pid=pid, rules=rules
            ).to_dict()
        return plots.timeline_data(lanes)
    with progress(len(paths), kind) as advance:
        runs = analyze_paths(paths, rules=rules, pid=pid, use_cache=use_cache, advance=advance)
    if kind == "phases":
        return plots.phases_data([(r.label, r.data) for r in runs])
    if kind == "acceptance":
        spec = next((r for r in runs if r.analysis.mode == "spec"), runs[0])
        return plots.acceptance_data(spec.data)
    modes = {r.analysis.mode for r in runs}
    if kind == "amdahl":
        if {"baseline", "spec"} <= modes:
            base, _spec, comparison = _pairs(runs)[0]
            return plots.amdahl_data(base.data, comparison)
        return plots.amdahl_data(runs[0].data)
    # sweep
    if not {"baseline", "spec"} <= modes:
        raise UsageError("sweep needs a baseline trace and at least one speculative trace")
    return plots.sweep_data(
        [{"label": s.label, "analysis": s.data, "comparison": c} for _b, s, c in _pairs(runs)]
    )


def build_report(
    trace: str | Path,
    baseline: str | Path | None = None,
    *,
    rules: Any = None,
    pid: int | None = None,
    step: int | None = None,
    window_ms: tuple[float, float] | None = None,
    use_cache: bool = True,
) -> str:
    """The self-contained HTML report of *trace* (compared with *baseline* when given)."""
    from specnsys import __version__
    from specnsys.metrics.whatcut import what_to_cut
    from specnsys.report import plots
    from specnsys.report.html import ReportFigure, render_report_html

    total = 4 + (baseline is not None)
    with progress(total, "report") as advance:
        advance(f"analyze {Path(trace).name}")
        primary, lanes = _analyze(trace, rules=rules, pid=pid, use_cache=use_cache,
                                  lanes_step=step, lanes_window=window_ms,
                                  want_lanes=True)  # fmt: skip
        runs = [primary]
        comparison = None
        base_run = None
        if baseline is not None:
            advance(f"analyze {Path(baseline).name}")
            base_run = _analyze(baseline, rules=rules, pid=pid, use_cache=use_cache)[0]
            runs = [base_run, primary]
            if {r.analysis.mode for r in runs} != {"baseline", "spec"}:
                modes = ", ".join(f"{r.label}: {r.analysis.mode}" for r in runs)
                raise BadInputError(
                    f"report TRACE BASELINE needs one speculative and one baseline trace ({modes})"
                )
            base_run, spec_run, comparison = _pairs(runs)[0]
            runs = [base_run, spec_run]
        advance("what to cut")
        lead = base_run if base_run is not None else primary
        cut = what_to_cut(lead.data).to_dict()
        advance("figures")
        spec = next((r for r in runs if r.analysis.mode == "spec"), None)
        figure_data = [plots.phases_data([(r.label, r.data) for r in runs])]
        figure_data.append(plots.amdahl_data(lead.data, comparison))
        if spec is not None:
            figure_data.append(plots.acceptance_data(spec.data))
        assert lanes is not None
        figure_data.append(plots.timeline_data(lanes))
        figures = []
        for data in figure_data:
            fig = plots.draw(data)
            figures.append(
                ReportFigure(data["kind"], data["title"], plots.svg_text(fig, salt=data["kind"]))
            )
        advance("render HTML")
        return render_report_html(
            runs=[(r.label, r.data) for r in runs],
            comparison=comparison,
            whatcut=cut,
            figures=figures,
            timeline_label=lanes["label"],
            version=__version__,
        )
