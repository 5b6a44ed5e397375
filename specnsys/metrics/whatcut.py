"""What to cut first: how far the Amdahl ceiling rises if one non-accelerable phase went away.

Speculative decoding only speeds up the accelerable time ``A`` (``forward`` in a baseline run,
``draft`` + ``verify`` in a speculative one) of a window ``W``; its ceiling is
``1 / (1 - p)`` with ``p = A / W``. If a non-accelerable phase with exclusive time ``x`` went
to zero, the window would shrink to ``W - x`` and the bottleneck share would grow to
``p' = A / (W - x)``, so the ceiling becomes ``1 / (1 - p') = (W - x) / (W - x - A)``. The
phases are ranked by that rise: it tells a team which overhead (prefill, sampling, KV-cache
work, host syncs, scheduling) limits speculative decoding most. Beside it,
``combined_ceiling = W / (W - x - A)`` is the speedup over the current run if the phase went
away *and* the accelerable work became free.

A generic run (neither baseline nor speculative) has no accelerable time, so no ceiling: its
phases are ranked by the speedup of the whole run if the phase went away,
``speedup_if_removed = W / (W - x)`` (Amdahl with the phase's share as ``p`` and ``r`` without
bound), which is also given for the phases of the other modes.

Input is the ``analyze --json`` document (a plain dict), so the ranking works on saved JSON too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from specnsys.vocabulary import ACCELERABLE

__all__ = [
    "ACCELERABLE",
    "CutCandidate",
    "WhatCut",
    "accelerable_phases",
    "generic_whatif",
    "speedup_if_cut",
    "what_to_cut",
]

def _mapping(value: object) -> Mapping[str, object]:
    """*value* when it is a JSON object, else an empty one (a key the document lacks)."""
    return value if isinstance(value, Mapping) else {}


def _int(value: object) -> int:
    """A JSON number as an int; 0 for null or anything else."""
    return int(value) if isinstance(value, (int, float)) else 0


def _wall(phases: Mapping[str, object], name: str) -> int:
    """The ``wall_ns`` of phase *name* in an analysis document's ``phases`` (0 without it)."""
    return _int(_mapping(phases.get(name)).get("wall_ns"))


def accelerable_phases(analysis: Mapping[str, object]) -> tuple[str, ...]:
    """The accelerable phases that have time in *analysis* (all three when none has)."""
    phases = _mapping(analysis.get("phases"))
    present = tuple(p for p in ACCELERABLE if _wall(phases, p) > 0)
    return present or ACCELERABLE


def _ceiling(p: float) -> float:
    return math.inf if p >= 1.0 else 1.0 / (1.0 - p)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _removed(window: int, x: int) -> float:
    return speedup_if_cut(window, x, 1.0)


def speedup_if_cut(window: int, x: int, fraction: float) -> float:
    """``W / (W - f x)``: the run's speedup if a phase of time *x* lost *fraction* of it
    (Amdahl with ``p = x / W`` and ``r = 1 / (1 - f)``); ``inf`` when nothing would be left."""
    rest = window - fraction * x
    return math.inf if rest <= 0 else window / rest


def generic_whatif(
    analysis: Mapping[str, object], fractions: tuple[float, ...] = (0.5, 1.0)
) -> dict[str, object]:
    """``whatif`` on a generic run: for every phase with time, largest first, the run's
    speedup if the phase got *fractions* shorter (``speedup_if_cut``): the only what-if a run
    without a draft model supports."""
    cut = what_to_cut(analysis)
    window = cut.window_ns
    rows = []
    for c in cut.candidates:
        row: dict[str, object] = {"phase": c.phase, "wall_ns": c.wall_ns, "share": c.share}
        for f in fractions:
            row[f"speedup_if_{round(f * 100)}pct_cut"] = _finite(speedup_if_cut(window, c.wall_ns, f))
        rows.append(row)
    return {
        "kind": "cut",
        "path": analysis.get("path"),
        "mode": analysis.get("mode"),
        "window_ns": window,
        "shares_of": "window_ns",
        "definition": "speedup_if_N_pct_cut = W / (W - N/100 * wall_ns) (null: nothing left)",
        "fractions": list(fractions),
        "cuts": rows,
        "not_available": {
            "leviathan": _mapping(analysis.get("not_available")).get("whatif")
            or "needs alpha, k and c of a speculative run",
        },
    }


@dataclass(frozen=True)
class CutCandidate:
    """One non-accelerable phase and what removing it would do to the ceiling."""

    phase: str
    wall_ns: int
    share: float
    """``wall_ns / window_ns`` of the analyzed run."""
    p_after: float | None
    """Bottleneck share with the phase gone: ``A / (W - x)`` (None in a generic run)."""
    ceiling_after: float | None
    """``1 / (1 - p_after)``; ``inf`` when nothing non-accelerable would be left."""
    ceiling_gain: float | None
    """``ceiling_after - ceiling``: the ranking key (a generic run ranks by ``wall_ns``)."""
    combined_ceiling: float | None
    """``W / (W - x - A)``: speedup over this run with the phase gone and ``A`` free."""
    speedup_if_removed: float = math.inf
    """``W / (W - x)``: speedup of the whole run with only this phase gone."""

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "wall_ns": self.wall_ns,
            "share": self.share,
            "p_after": self.p_after,
            "ceiling_after": _finite(self.ceiling_after),
            "ceiling_gain": _finite(self.ceiling_gain),
            "combined_ceiling": _finite(self.combined_ceiling),
            "speedup_if_removed": _finite(self.speedup_if_removed),
        }


@dataclass(frozen=True)
class WhatCut:
    """The ranking, with the numbers it starts from (``p``, ceiling, ``A``, ``W``)."""

    mode: str | None
    window_ns: int
    accelerable_ns: int
    accelerable: tuple[str, ...]
    p: float | None
    ceiling: float | None
    candidates: list[CutCandidate] = field(default_factory=list)
    not_available: str | None = None
    """Why there is no ranking (e.g. an empty window), else None."""

    def to_dict(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "window_ns": self.window_ns,
            "accelerable_ns": self.accelerable_ns,
            "accelerable": list(self.accelerable),
            "p": self.p,
            "ceiling": None if self.ceiling is None else _finite(self.ceiling),
            "non_accelerable_ns": self.window_ns - self.accelerable_ns,
            "non_accelerable_share": (
                (self.window_ns - self.accelerable_ns) / self.window_ns if self.window_ns else None
            ),
            "candidates": [c.to_dict() for c in self.candidates],
            "not_available": self.not_available,
        }


def what_to_cut(analysis: Mapping[str, object]) -> WhatCut:
    """Rank the non-accelerable phases of *analysis* (an ``analyze --json`` dict).

    ``A`` is ``accelerable_ns`` when present, else the summed ``wall_ns`` of the accelerable
    phases; ``p = A / W`` over ``window_ns`` (the same denominator as every share
    of the analysis). Phases with no exclusive time are left out; ties keep phase-name order.
    """
    mode = told if isinstance(told := analysis.get("mode"), str) else None
    accel = accelerable_phases(analysis)
    phases = _mapping(analysis.get("phases"))
    window = _int(analysis.get("window_ns"))
    given = analysis.get("accelerable_ns")
    a_ns = _int(given) if given is not None else sum(_wall(phases, p) for p in accel)
    if window <= 0:
        return WhatCut(mode, window, a_ns, accel, None, None, [], "the analysis window is empty")
    if mode == "generic":
        return _generic(phases, window)
    if a_ns <= 0:
        return WhatCut(
            mode, window, a_ns, accel, 0.0, 1.0, [],
            f"no accelerable time ({' + '.join(accel)}) in the window: nothing to speed up",
        )  # fmt: skip
    p = a_ns / window
    ceiling = _ceiling(p)
    candidates = []
    for name in sorted(phases):
        if name in ACCELERABLE:
            continue
        x = _wall(phases, name)
        if x <= 0:
            continue
        rest = window - x
        p_after = a_ns / rest if rest > 0 else 1.0
        after = _ceiling(p_after)
        left = rest - a_ns
        combined = math.inf if left <= 0 else window / left
        candidates.append(
            CutCandidate(
                name, x, x / window, p_after, after, after - ceiling, combined, _removed(window, x)
            )
        )
    candidates.sort(key=lambda c: (-(c.ceiling_gain or 0.0), c.phase))
    return WhatCut(mode, window, a_ns, accel, p, ceiling, candidates)


def _generic(phases: Mapping[str, object], window: int) -> WhatCut:
    """Every phase with time, largest first: with nothing accelerable, the run's speedup if a
    phase went away is ``W / (W - x)``, so the largest phase is the one to cut first."""
    candidates = [
        CutCandidate(name, x, x / window, None, None, None, None, _removed(window, x))
        for name in sorted(phases)
        if (x := _wall(phases, name)) > 0
    ]
    candidates.sort(key=lambda c: (-c.wall_ns, c.phase))
    return WhatCut(
        "generic", window, 0, (), None, None, candidates,
        None if candidates else "no phase has time in the window",
    )  # fmt: skip
