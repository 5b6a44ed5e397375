"""Number formats the text renderers share."""

from __future__ import annotations

#: From this magnitude up a number is written in exponent form.
EXPONENT_FROM = 1e6


def fixed_or_exponent(x: float, spec: str) -> str:
    """*x* in the fixed-point *spec* (``".3f"``) below a million, from a million up in exponent
    form with three decimals: a given ``--c 1e308``, or the speedup it leads to, was written
    with 309 digits."""
    return format(x, spec) if abs(x) < EXPONENT_FROM else f"{x:.3e}"
