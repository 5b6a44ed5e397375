"""One phase -> colour mapping for every figure and the HTML report.

The colours are the ones :mod:`specnsys.annotate` gives the NVTX ranges (both read
:data:`specnsys.vocabulary.PHASE_RGB`), so a phase looks the same in the Nsight Systems timeline
and in specnsys's figures (``forward`` green, ``verify`` red, ``sample`` orange, ...). Phases outside the vocabulary (custom rules, ``unannotated``)
get fixed neutral or derived colours, never a colour that depends on the order they appear in.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from specnsys.vocabulary import ACCELERABLE, PHASE_RGB

__all__ = [
    "ACCELERABLE_PHASES",
    "PHASE_COLORS",
    "PHASE_ORDER",
    "ordered_phases",
    "phase_color",
    "text_color_on",
]

PHASE_COLORS: dict[str, str] = {
    **{phase: f"#{rgb:06X}" for phase, rgb in PHASE_RGB.items()},
    # Not phases of the vocabulary but rows of every breakdown.
    "unannotated": "#E4E4E4",
    "unattributed_gpu": "#4D4D4D",
}
"""Hex colour of each known phase."""

PHASE_ORDER: tuple[str, ...] = (
    "forward",
    "draft",
    "verify",
    "prefill",
    "draft_prefill",
    "sample",
    "kv",
    "sync",
    "schedule",
    "decode",
    "request",
    "unannotated",
    "unattributed_gpu",
)
"""Stacking and legend order: the accelerable phases first (they start every bar, so the
accelerable share reads off the left edge), then the non-accelerable ones, the catch-alls last."""

ACCELERABLE_PHASES: frozenset[str] = frozenset(ACCELERABLE)
"""Phases drawn as the accelerable part (docs/design.md#phases): forward, or draft + verify."""

# Colours for phases nobody named in advance (custom rules): picked by a hash of the name, so
# the same custom phase keeps its colour across figures, runs and reports.
_EXTRA = (
    "#BCBD22", "#17BECF", "#AEC7E8", "#FFBB78", "#C49C94", "#F7B6D2", "#DBDB8D", "#C5B0D5",
    "#393B79", "#637939", "#8C6D31", "#843C39", "#7B4173", "#5254A3", "#8CA252", "#BD9E39",
    "#AD494A", "#A55194", "#6B6ECF", "#E7969C",
)  # fmt: skip


def phase_color(phase: str) -> str:
    """The colour of *phase*: fixed for known phases, a stable hash-picked one otherwise."""
    known = PHASE_COLORS.get(phase)
    if known is not None:
        return known
    return _EXTRA[zlib.crc32(phase.encode()) % len(_EXTRA)]


def ordered_phases(phases: Iterable[str]) -> list[str]:
    """*phases* (deduplicated) in :data:`PHASE_ORDER`, unknown ones after it by name."""
    unique = set(phases)
    rank = {p: i for i, p in enumerate(PHASE_ORDER)}
    return sorted(unique, key=lambda p: (rank.get(p, len(rank)), p))


def text_color_on(background: str) -> str:
    """Black or white, whichever reads better on *background* (WCAG relative luminance)."""
    rgb = [int(background.lstrip("#")[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if luminance > 0.22 else "#FFFFFF"
