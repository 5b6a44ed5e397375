"""``ab_compare``: two runs of the same kind side by side, phase by phase (an A/B diff).

``compare_runs`` answers one question, how far a speculative run is from its baseline's Amdahl
prediction; it needs a baseline and a speculative run. Any other pair (two generic runs, two
baselines, two speculative runs: before and after a change to the engine, a flag, a driver)
asks a simpler one: *what moved*. Per phase, with ``W`` each run's window:

* wall time and share of each run (``wall / W``; each run's shares sum to 1);
* ``delta_ns = B - A`` and ``delta_pct = delta_ns / A`` (None when the phase is new in B);
* ``delta_of_window = delta_ns / W_A``: how much the phase moved the whole run, the ranking
  key of ``moved`` (the phases whose ``|delta_of_window|`` is at least
  :data:`MOVE_THRESHOLD`, largest first);
* GPU busy time of each run and its delta, when both runs have GPU activity.

Times are compared as measured, not per output token: an A/B pair is assumed to do the same
work (a warning says so when both counted tokens and the counts differ).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

from specnsys.metrics.analysis import Analysis

__all__ = [
    "MOVE_THRESHOLD", "ABComparison", "Change", "Moved", "PhaseDiff", "ab_compare",
    "ab_compare_many",
]

MOVE_THRESHOLD = 0.02
"""A phase "moved" when its change is at least 2% of run A's window: smaller changes move the
end-to-end time by less than 2%, within the run-to-run spread of repeated captures, and this is
the threshold ``compare`` uses for the phases that explain a gap. Relative to the window, not
to the phase, so a tiny phase that doubled is not named before a large one that grew by 10%."""


def _pct(delta: int, base: int) -> float | None:
    return delta / base if base else None


class Change(TypedDict):
    """A figure of run *a* and of run *b*, and how far *b* moved from *a*."""

    a: int
    b: int
    delta_ns: int
    delta_pct: float | None


class PhaseDiff(TypedDict):
    """One phase of the A/B diff: walls, shares and the change (of *a*'s time and window)."""

    a_wall_ns: int
    b_wall_ns: int
    a_share: float
    b_share: float
    delta_ns: int
    delta_pct: float | None
    delta_of_window: float | None
    a_gpu_busy_ns: int | None
    b_gpu_busy_ns: int | None
    gpu_busy_delta_ns: int | None


class Moved(TypedDict):
    """A phase that moved by at least :data:`MOVE_THRESHOLD` of *a*'s window."""

    phase: str
    delta_ns: int
    delta_pct: float | None
    delta_of_window: float | None


def _change(a: int, b: int) -> Change:
    return {"a": a, "b": b, "delta_ns": b - a, "delta_pct": _pct(b - a, a)}


@dataclass(frozen=True)
class ABComparison:
    """Run *b* against run *a*; :meth:`to_dict` is the ``compare --json`` object of the pair."""

    a: Analysis
    b: Analysis
    phases: dict[str, PhaseDiff]
    moved: list[Moved]
    not_available: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def moved_phase(self) -> str | None:
        return str(self.moved[0]["phase"]) if self.moved else None

    def to_dict(self) -> dict[str, object]:
        a, b = self.a, self.b
        gpu = (
            _change(_gpu_busy(a), _gpu_busy(b)) if a.gpu_time and b.gpu_time else None
        )
        return {
            "kind": "ab",
            "a": a.path,
            "b": b.path,
            "modes": {"a": a.mode, "b": b.mode},
            "rules": {"a": a.rules, "b": b.rules},
            "window_ns": _change(a.window_ns, b.window_ns),
            "window_rule": {"a": a.window_rule, "b": b.window_rule},
            "gpu_busy_ns": gpu,
            "phases": self.phases,
            "shares_of": "each run's own window_ns",
            "delta_definition": "b - a; delta_pct of a's phase time; delta_of_window of a's window",
            "move_threshold": MOVE_THRESHOLD,
            "moved": list(self.moved),
            "moved_phase": self.moved_phase,
            "not_available": dict(self.not_available),
            "warnings": list(self.warnings),
        }


def _gpu_busy(x: Analysis) -> int:
    return int(x.gpu_time["busy_ns"] or 0) if x.gpu_time else 0


def ab_compare(a: Analysis, b: Analysis) -> ABComparison:
    """The per-phase diff of *b* against *a* (see the module docs)."""
    na: dict[str, str] = {}
    warnings: list[str] = []
    if not (a.gpu_time and b.gpu_time):
        na["gpu_busy_ns"] = "a run has no GPU activity"
    if a.tokens and b.tokens and a.tokens != b.tokens:
        warnings.append(
            f"the runs emitted different token counts ({a.tokens} vs {b.tokens}); times are "
            "compared as measured, not per token"
        )
    if a.rules != b.rules:
        warnings.append(f"the runs' phases come from different rules ({a.rules} vs {b.rules})")
    window_a = a.window_ns
    table: dict[str, PhaseDiff] = {}
    for name in dict.fromkeys([*a.phases, *b.phases]):
        wa, wb = a.wall_ns(name), b.wall_ns(name)
        if wa == 0 and wb == 0:
            continue
        ga, gb = (row["gpu_busy_ns"] if (row := x.phases.get(name)) else None for x in (a, b))
        both_gpu = ga is not None and gb is not None and "gpu_busy_ns" not in na
        table[name] = {
            "a_wall_ns": wa,
            "b_wall_ns": wb,
            "a_share": wa / a.window_ns if a.window_ns else 0.0,
            "b_share": wb / b.window_ns if b.window_ns else 0.0,
            "delta_ns": wb - wa,
            "delta_pct": _pct(wb - wa, wa),
            "delta_of_window": (wb - wa) / window_a if window_a else None,
            "a_gpu_busy_ns": int(ga or 0) if both_gpu else None,
            "b_gpu_busy_ns": int(gb or 0) if both_gpu else None,
            "gpu_busy_delta_ns": int(gb or 0) - int(ga or 0) if both_gpu else None,
        }
    moved: list[Moved] = [
        {"phase": name, "delta_ns": row["delta_ns"], "delta_pct": row["delta_pct"],
         "delta_of_window": row["delta_of_window"]}
        for name, row in table.items()
        if (of := row["delta_of_window"]) is not None and abs(of) >= MOVE_THRESHOLD
    ]  # fmt: skip
    moved.sort(key=lambda m: (-abs(m["delta_ns"]), m["phase"]))
    return ABComparison(a, b, table, moved, na, warnings)


def ab_compare_many(analyses: list[Analysis]) -> list[ABComparison]:
    """Each run after the first against the first: ``compare A B C`` diffs B and C from A."""
    first, *rest = analyses
    return [ab_compare(first, other) for other in rest]
