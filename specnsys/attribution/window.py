"""The analysis window a user asks for: the requests' span, a steady state, or a slice.

Short captures are dominated by warm-up: the first steps run cold caches, allocator growth,
kernel loading, ``torch.compile`` and CUDA-graph capture. ``--window`` chooses what the whole
analysis looks at (docs/design.md#the-window):

* ``requests`` (the default): the process's default window (first request start to last
  request end, else the span of its ranges and GPU work, ...);
* ``A:B``: milliseconds *A* to *B* from the start of that default window;
* ``steps:N-M``: from the start of decode step *N* to the end of step *M* (0-based, both
  included, the numbering of the ``steps`` table);
* ``auto``: the default window without its warm-up: the decode steps before the step time
  settles and the compile or graph-capture spans before them (:func:`steady_state`).

The rule for ``auto`` (documented in docs/design.md and tested on built warm-ups): with the
step durations ``d_0..d_{n-1}`` (at least :data:`MIN_STEPS`), step *i* is warm-up while it is
slower than the :data:`LOOK_AHEAD` steps after it, ``d_i > m + max(m / 2, 5 * 1.4826 * s)``
with *m* and *s* their median and median absolute deviation; the first step that is not
starts the steady state (at most half the steps are dropped; a slow step later in the run
is the run's own, kept).
Compile and graph-capture spans (CUDA stream capture and graph instantiation calls, NVTX
ranges named like ``torch.compile``/Dynamo/Inductor regions) that end in the first half push
the start past them. The window never grows: it is the default window's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

import polars as pl

from specnsys.errors import BadInputError

__all__ = [
    "COMPILE_RANGE_PATTERN",
    "CutSpan",
    "GRAPH_CAPTURE_CALL_PATTERN",
    "MIN_STEPS",
    "WindowChoice",
    "WindowDropped",
    "WindowSpec",
    "choose_window",
    "parse_window",
    "steady_state",
]

#: Fewest steps ``auto`` judges; with fewer, the default window is kept (and said).
MIN_STEPS = 8
#: Steps after a step that it is compared with (``auto``).
LOOK_AHEAD = 8

#: NVTX range texts of compilation (PyTorch's Dynamo/Inductor regions, ``torch.compile``).
COMPILE_RANGE_PATTERN = (
    r"(?i)(torch[._ -]?compile|dynamo|inductor|compile_fx|compiled ?function|"
    r"torch-compiled region|triton.*autotun)"
)
#: CUDA runtime/driver calls of graph capture and instantiation.
GRAPH_CAPTURE_CALL_PATTERN = r"(?i)(StreamBeginCapture|StreamEndCapture|GraphInstantiate)"

_STEPS = re.compile(r"^steps:(\d+)-(\d+)$")
_MS = re.compile(r"^([0-9.eE+]+):([0-9.eE+]+)$")


@dataclass(frozen=True)
class WindowSpec:
    """What ``--window`` asked for: ``kind`` one of requests, auto, ms, steps; ``a``/``b`` the
    milliseconds or the step numbers."""

    kind: str = "requests"
    a: float | None = None
    b: float | None = None

    @property
    def text(self) -> str:
        """The spelling the user gave (and the cache key uses)."""
        if self.kind == "ms":
            return f"{self.a:g}:{self.b:g}"
        if self.kind == "steps":
            return f"steps:{int(self.a or 0)}-{int(self.b or 0)}"
        return self.kind


def parse_window(text: str | WindowSpec | None) -> WindowSpec:
    """``--window``'s value as a :class:`WindowSpec`; one-line :class:`BadInputError` for
    anything else (empty, reversed, negative, not a number)."""
    if text is None:
        return WindowSpec()
    if isinstance(text, WindowSpec):
        return text
    value = text.strip()
    if value in ("requests", "auto"):
        return WindowSpec(value)
    steps = _STEPS.match(value)
    if steps:
        n, m = int(steps.group(1)), int(steps.group(2))
        if n > m:
            raise BadInputError(f"--window {text!r}: step {n} comes after step {m}")
        return WindowSpec("steps", n, m)
    ms = _MS.match(value)
    if ms:
        try:
            a, b = float(ms.group(1)), float(ms.group(2))
        except ValueError:
            a = b = float("nan")
        if not (0 <= a < b < float("inf")):  # also False for nan
            raise BadInputError(
                f"--window {text!r}: need 0 <= A < B (milliseconds from the window start)"
            )
        return WindowSpec("ms", a, b)
    raise BadInputError(
        f"--window {text!r}: expected auto, requests, A:B (milliseconds from the window "
        "start) or steps:N-M (decode steps, 0-based)"
    )


class CutSpan(TypedDict):
    """One compile or graph-capture span the ``auto`` rule cut (``what`` it was, ns)."""

    what: str
    start_ns: int
    end_ns: int


class WindowDropped(TypedDict):
    """What a window rule cut from the default window: ns ``before`` and ``after`` it, the
    decode steps before it, the compile/capture spans cut, and ``why`` in words."""

    before_ns: int
    after_ns: int
    steps_before: int
    spans: list[CutSpan]
    why: str


@dataclass(frozen=True)
class WindowChoice:
    """The window an analysis uses: ``start``/``end`` (ns), the ``rule`` asked for and what
    it ``dropped`` from the default window (``ns`` before and after, ``steps`` before, the
    compile/capture ``spans`` cut, and ``why`` in words)."""

    start: int
    end: int
    rule: str = "requests"
    dropped: WindowDropped | None = None

    def describe(self) -> str | None:
        """The phrase outputs print after the window (None for the default window)."""
        if self.rule == "requests":
            return None
        why = self.dropped["why"] if self.dropped else None
        return f"--window {self.rule}: {why}" if why else f"--window {self.rule}"


def steady_state(durations: list[int]) -> tuple[int, str]:
    """The first steady step (0 when none is warm-up) and the rule's figures in words.

    Step by step from the first: step *i* is warm-up while it is slower than the steps that
    follow it, ``d_i > m_i + max(m_i / 2, 5 * 1.4826 * s_i)`` with ``m_i``/``s_i`` the median
    and the median absolute deviation of the next :data:`LOOK_AHEAD` steps; the first step
    that is not ends the warm-up, which never takes more than half the steps. Comparing with
    the steps right after (not with the whole run) keeps a run whose steps shorten as its
    batch drains from being read as one long warm-up.
    """
    n = len(durations)
    if n < MIN_STEPS:
        return 0, f"{n} decode steps, fewer than the {MIN_STEPS} auto needs to judge"
    first, limit = 0, None
    while first < n // 2:
        ahead = pl.Series(durations[first + 1 : first + 1 + LOOK_AHEAD], dtype=pl.Float64)
        ref = float(ahead.median())  # type: ignore[arg-type]
        mad = float((ahead - ref).abs().median())  # type: ignore[arg-type]
        limit = ref + max(ref / 2, 5 * 1.4826 * mad)
        if durations[first] <= limit:
            break
        first += 1
    if first == 0:
        return 0, (
            f"no warm-up step (the first, {durations[0] / 1e6:.3f} ms, is within the band of "
            f"the next {LOOK_AHEAD}: up to {(limit or 0) / 1e6:.3f} ms)"
        )
    return first, (
        f"the first {first} decode steps (warm-up: each slower than the next {LOOK_AHEAD} "
        "steps' median + max(half, 5 MADs))"
    )


def _clip_ms(spec: WindowSpec, ws: int, we: int) -> tuple[int, int, str]:
    a, b = int(round((spec.a or 0.0) * 1e6)), int(round((spec.b or 0.0) * 1e6))
    if ws + a >= we:
        raise BadInputError(
            f"--window {spec.text}: starts after the window ends ({(we - ws) / 1e6:.3f} ms long)"
        )
    end = min(ws + b, we)
    cut = " (cut at the window end)" if ws + b > we else ""
    return ws + a, end, f"milliseconds {spec.a:g} to {(end - ws) / 1e6:g} of the window{cut}"


def choose_window(
    spec: WindowSpec,
    default: tuple[int, int],
    steps: pl.DataFrame,
    spans: pl.DataFrame,
) -> WindowChoice:
    """The window of *spec* within the *default* window, from the decode *steps* (columns
    ``s, e``, in the default window, sorted) and the compile/capture *spans* (``s, e,
    what``). One-line :class:`BadInputError` for a window outside the trace or holding no
    step."""
    ws, we = default
    if spec.kind == "requests":
        return WindowChoice(ws, we)
    starts, ends = steps["s"].to_list(), steps["e"].to_list()
    if spec.kind == "ms":
        start, end, why = _clip_ms(spec, ws, we)
        if starts and not any(start <= s < end for s in starts):
            raise BadInputError(f"--window {spec.text}: leaves no decode step")
        return _choice(spec, ws, we, start, end, why, steps)
    if spec.kind == "steps":
        n, m = int(spec.a or 0), int(spec.b or 0)
        if not starts:
            raise BadInputError(f"--window {spec.text}: the run has no decode steps")
        if n >= len(starts):
            raise BadInputError(
                f"--window {spec.text}: the run has {len(starts)} decode steps (0 to "
                f"{len(starts) - 1})"
            )
        last = min(m, len(starts) - 1)
        cut = f" (the run ends at step {last})" if m > last else ""
        why = f"decode steps {n} to {last}{cut}"
        return _choice(spec, ws, we, starts[n], min(ends[last], we), why, steps)
    return _auto(spec, ws, we, steps, spans)


def _auto(
    spec: WindowSpec, ws: int, we: int, steps: pl.DataFrame, spans: pl.DataFrame
) -> WindowChoice:
    durations = (steps["e"] - steps["s"]).to_list()
    first, why = steady_state(durations)
    start = int(steps["s"][first]) if first else ws
    half = ws + (we - ws) // 2
    early = spans.filter((pl.col("e") > ws) & (pl.col("e") <= half))
    cut_spans: list[CutSpan] = []
    if early.height:
        past = int(early["e"].max())  # type: ignore[arg-type]
        if past > start:
            # the first step that starts after the last early compile/capture span
            later = [int(s) for s in steps["s"].to_list() if s >= past]
            start = later[0] if later else past
        cut_spans = [
            {"what": str(w), "start_ns": int(s), "end_ns": int(e)}
            for s, e, w in early.select("s", "e", "what").iter_rows()
        ]
        why += f"; {len(cut_spans)} compile/graph-capture spans before the steady state"
    if start >= we:
        start = ws
        why = "nothing would remain after the warm-up: the default window kept"
    return _choice(spec, ws, we, start, we, why, steps, cut_spans)


def _choice(
    spec: WindowSpec,
    ws: int,
    we: int,
    start: int,
    end: int,
    why: str,
    steps: pl.DataFrame,
    spans: list[CutSpan] | None = None,
) -> WindowChoice:
    before = int(steps.filter(pl.col("s") < start).height) if steps.height else 0
    dropped: WindowDropped = {
        "before_ns": start - ws,
        "after_ns": we - end,
        "steps_before": before,
        "spans": spans or [],
        "why": why,
    }
    return WindowChoice(start, end, spec.text, dropped)
