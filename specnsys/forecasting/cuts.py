"""``--cut PHASE=AMOUNT``: a phase made shorter, as the article applies its fixes.

* ``schedule=-17ms/step`` -- 17 ms off every decode step (units ns, us, ms, s; ``/request``:
  off every request);
* ``sample=-66%`` -- two thirds of the phase's time gone;
* ``kv=0`` -- the phase removed.

The phase must be one the model predicts (else the error lists those it does), and a cut may
not take more than the phase has: both refused in one line before anything is forecast.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from specnsys.errors import UsageError
from specnsys.forecasting.results import CutSpec

__all__ = ["check_cut_phases", "parse_cut", "parse_cuts"]

_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_TIME = re.compile(r"^-?\s*(\d+(?:\.\d*)?|\.\d+)\s*(ns|us|µs|ms|s)\s*/\s*(step|request)$")
_PERCENT = re.compile(r"^-?\s*(\d+(?:\.\d*)?|\.\d+)\s*%$")


def parse_cut(text: str) -> CutSpec:
    """One ``PHASE=AMOUNT`` (module docs)."""
    phase, sep, amount = text.partition("=")
    phase, amount = phase.strip(), amount.strip()
    if not sep or not phase or not amount:
        raise UsageError(
            f"--cut {text!r}: write PHASE=-17ms/step, PHASE=-66% or PHASE=0"
        )
    if amount.startswith("+"):
        raise UsageError(f"--cut {text!r}: a cut takes time off a phase (-X, not +X)")
    if re.fullmatch(r"-?0+(\.0*)?", amount):
        return CutSpec(phase, text, "fraction", 1.0)
    m = _PERCENT.match(amount)
    if m:
        fraction = float(m.group(1)) / 100.0
        if fraction > 1.0:
            raise UsageError(
                f"--cut {text!r}: larger than the phase ({m.group(1)}% of {phase}; at most 100%)"
            )
        if fraction <= 0.0:
            raise UsageError(f"--cut {text!r}: a cut of 0% changes nothing")
        return CutSpec(phase, text, "fraction", fraction)
    m = _TIME.match(amount)
    if m:
        ns = float(m.group(1)) * _UNITS[m.group(2)]
        if ns <= 0:
            raise UsageError(f"--cut {text!r}: a cut of 0 changes nothing")
        return CutSpec(phase, text, f"per_{m.group(3)}", ns)
    raise UsageError(
        f"--cut {text!r}: {amount!r} is not -X{{ns,us,ms,s}}/step, -X{{...}}/request, -N% or 0"
    )


def parse_cuts(texts: Iterable[str]) -> tuple[CutSpec, ...]:
    cuts = tuple(parse_cut(t) for t in texts)
    seen: set[str] = set()
    for c in cuts:
        if c.phase in seen:
            raise UsageError(f"--cut: {c.phase} is cut twice; give one cut per phase")
        seen.add(c.phase)
    return cuts


def check_cut_phases(cuts: Sequence[CutSpec], phases: Iterable[str]) -> None:
    """Refuse a cut of a phase the model does not predict."""
    known = sorted(set(phases))
    for c in cuts:
        if c.phase not in known:
            raise UsageError(
                f"--cut {c.text}: unknown phase {c.phase!r} (the model predicts "
                f"{', '.join(known) or 'no phase'})"
            )
