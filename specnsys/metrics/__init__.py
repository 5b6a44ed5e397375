"""p, r, Amdahl, acceptance, sampler share, bandwidth, compare (docs/design.md#metrics).

* :func:`analyze_trace` -- every single-trace metric in an :class:`Analysis`
  (``Analysis.to_dict()`` is the ``analyze --json`` object);
* :func:`compare_runs` / :func:`compare_sweep` / :func:`compare_many` -- a baseline and
  speculative run(s) side by side (:class:`Comparison`, ``compare --json``);
* :func:`whatif` -- Leviathan's expected speedup, the best k and the Amdahl-limited result.

The formulas (:mod:`.amdahl`) import nothing heavy; the trace analyses load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specnsys.metrics.amdahl import (
    amdahl_ceiling,
    amdahl_speedup,
    best_k,
    expected_speedup,
    tau,
    whatif,
)

if TYPE_CHECKING:
    from specnsys.metrics.analysis import Analysis, analyze_trace
    from specnsys.metrics.comparison import (
        Comparison,
        compare_many,
        compare_runs,
        compare_sweep,
    )

__all__ = [
    "Analysis",
    "Comparison",
    "amdahl_ceiling",
    "amdahl_speedup",
    "analyze_trace",
    "best_k",
    "compare_many",
    "compare_runs",
    "compare_sweep",
    "expected_speedup",
    "tau",
    "whatif",
]

_LAZY = {
    "Analysis": "specnsys.metrics.analysis",
    "analyze_trace": "specnsys.metrics.analysis",
    "Comparison": "specnsys.metrics.comparison",
    "compare_runs": "specnsys.metrics.comparison",
    "compare_sweep": "specnsys.metrics.comparison",
    "compare_many": "specnsys.metrics.comparison",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specnsys.metrics' has no attribute {name!r}")
