"""``specnsys forecast`` without sources: Amdahl's law and Leviathan's expectation on numbers.

The article's arithmetic, checkable by hand (docs/forecast.md#the-articles-arithmetic):

* ``p`` and ``r``: the end-to-end speedup ``1 / ((1 - p) + p / r)`` and the ceiling
  ``1 / (1 - p)`` (p 0.3 at r 5: 1.31x; p 0.9 at r 2: 1.81x; p 0.55: at most 2.2x);
* ``alpha``, ``k`` and ``c``: Leviathan's expected tokens per step
  ``(1 - alpha^(k+1)) / (1 - alpha)``, the step's cost ``k c + 1`` target forwards (the verify
  pass counted as one forward) and the decode speedup, their ratio; with ``p`` it goes into
  Amdahl's law as ``r``.
"""

from __future__ import annotations

from specnsys.errors import UsageError
from specnsys.forecasting.results import FormulaForecast
from specnsys.metrics import amdahl
from specnsys.results import NotAvailable

__all__ = ["formula_forecast"]

DEFINITIONS = {
    "speedup": "1 / ((1 - p) + p / r)",
    "amdahl_ceiling": "1 / (1 - p)",
    "tokens_per_step": "(1 - alpha^(k+1)) / (1 - alpha): a draft counts only when every draft "
    "before it was accepted, plus the bonus token",
    "step_cost": "k * c + 1 target forwards",
    "decode_speedup": "tokens_per_step / step_cost (Leviathan et al., Theorem 3.8)",
}


def formula_forecast(
    *,
    p: float | None = None,
    r: float | None = None,
    alpha: float | None = None,
    k: int | None = None,
    c: float | None = None,
    k_max: int = amdahl.DEFAULT_K_MAX,
) -> FormulaForecast:
    """The formulas on the given numbers (module docs); what they cannot give is not
    available with the input it needs."""
    leviathan = (alpha, k, c)
    if all(v is None for v in (p, r, *leviathan)):
        raise UsageError(
            "forecast needs sources (traces or a dataset), or numbers: --p and --r, or --alpha, "
            "--k and --c (with --p for the end-to-end speedup)"
        )
    if r is not None and any(v is not None for v in leviathan):
        raise UsageError("give --r, or --alpha/--k/--c (which give r), not both")
    given = [v is not None for v in leviathan]
    if any(given) and not all(given):
        missing = [n for n, v in zip(("--alpha", "--k", "--c"), leviathan, strict=True) if v is None]
        raise UsageError(f"Leviathan's expectation needs {' and '.join(missing)} as well")
    needs = NotAvailable("needs --alpha, --k and --c")
    tokens: float | NotAvailable = needs
    cost: float | NotAvailable = needs
    decode: float | NotAvailable = needs
    best: int | NotAvailable = needs
    best_s: float | NotAvailable = needs
    computed_r = False  # r is Leviathan's expectation, not a given --r
    if alpha is not None and k is not None and c is not None:
        tokens = amdahl.tau(alpha, k)
        decode = amdahl.expected_speedup(alpha, k, c)
        cost = k * float(c) + 1.0
        best, best_s = amdahl.best_k(alpha, c, k_max)
        r, computed_r = decode, True
    ceiling: float | NotAvailable = NotAvailable("needs --p")
    speedup: float | NotAvailable = NotAvailable("needs --p and --r (or --alpha, --k, --c)")
    if p is not None:
        ceiling_value = amdahl.amdahl_ceiling(p)
        ceiling = NotAvailable("p = 1: no finite ceiling") if ceiling_value is None else ceiling_value
        if r is not None:  # a given r checked as given; Leviathan's r taken to its limit
            law = amdahl.amdahl_of_computed if computed_r else amdahl.amdahl_speedup
            speedup = law(p, r)
    return FormulaForecast(
        p=NotAvailable("not given (--p)") if p is None else float(p) + 0.0,  # -0 is 0
        r=NotAvailable("not given (--r, or --alpha/--k/--c)") if r is None else float(r),
        amdahl_ceiling=ceiling,
        speedup=speedup,
        alpha=NotAvailable("not given") if alpha is None else float(alpha) + 0.0,
        k=NotAvailable("not given") if k is None else k,
        c=NotAvailable("not given") if c is None else float(c) + 0.0,
        tokens_per_step=tokens,
        step_cost=cost,
        decode_speedup=decode,
        best_k=best,
        best_k_speedup=best_s,
        k_max=needs if isinstance(best, NotAvailable) else k_max,
        definitions=DEFINITIONS,
    )
