"""Analyzed runs as the renderers take them: :class:`Run` (a label, a path, an analysis) and
:func:`pair_runs`, each speculative run with the nearest baseline before it.

Its own module because the figure renderers (:mod:`specnsys.render.plots`) and the report
(:mod:`specnsys.render.build`) both read runs; neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specnsys.render.documents import AnalysisDoc, ComparisonDoc, analysis_doc, comparison_doc

if TYPE_CHECKING:
    from specnsys.metrics import Analysis

__all__ = ["Run", "pair_runs", "run_label"]


@dataclass(frozen=True)
class Run:
    """One analyzed trace: its label, its path and its ``analyze --json`` dict."""

    label: str
    path: Path
    analysis: Analysis

    @property
    def data(self) -> AnalysisDoc:
        return analysis_doc(self.analysis.to_dict())


def run_label(path: str | Path) -> str:
    """The name a run goes by in figures and tables: the file name without its suffix."""
    name = Path(path).name
    for suffix in (".sqlite", ".nsys-rep", ".sqlite3", ".db"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def pair_runs(
    runs: Sequence[Run], *, same_output: bool = False
) -> list[tuple[Run, Run, ComparisonDoc]]:
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
    return [
        (by_id[id(c.baseline)], by_id[id(c.spec)], comparison_doc(c.to_dict()))
        for c in comparisons
    ]
