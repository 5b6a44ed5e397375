"""Pure formulas: Amdahl's law and Leviathan et al.'s expected speedup (docs/design.md#metrics).

No trace access here: every function takes numbers and returns numbers, so the what-if
analysis, the tests of published tables and the trace analyses share one implementation.

* Amdahl: ``S = 1 / ((1 - p) + p / r)``, ceiling ``1 / (1 - p)``.
* Leviathan, Kalman, Matias (ICML 2023), Theorem 3.8, i.i.d. acceptance ``alpha``, ``k``
  drafts per step, draft/target cost ratio ``c``: expected tokens per step
  ``tau = (1 - alpha^(k+1)) / (1 - alpha)`` and expected walltime improvement
  ``tau / (k c + 1)``. The theorem assumes the verify pass over ``k + 1`` positions costs one
  ordinary target step, so it is a prediction for the *accelerable* (decode) part only; the
  end-to-end what-if puts it into Amdahl's law with the trace's ``p``.
"""

from __future__ import annotations

import math

from specnsys.errors import UsageError

__all__ = [
    "DEFAULT_K_MAX",
    "amdahl_ceiling",
    "amdahl_speedup",
    "best_k",
    "expected_speedup",
    "tau",
    "whatif",
]

DEFAULT_K_MAX = 64
"""Largest k the best-k search tries (the published optimum for alpha 0.9, c 0.05 is 13)."""

_TIE = 1e-12
"""Relative tolerance under which two speedups count as equal (the smaller k wins).

Exact ties occur: alpha 0.5, c 0.2 gives 1.25x for both k = 1 and k = 2, and the published
table lists k = 1 -- the cheaper setting for the same speedup.
"""


def _check_p(p: float) -> float:
    if not (isinstance(p, int | float) and 0.0 <= p <= 1.0):
        raise UsageError(f"p must be a fraction in [0, 1], got {p!r}")
    return float(p) + 0.0  # -0.0 (a given "-0") is 0


def _check_alpha(alpha: float) -> float:
    if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0):
        raise UsageError(f"alpha must be an acceptance rate in [0, 1], got {alpha!r}")
    return float(alpha) + 0.0


#: The largest draft length any what-if considers: far past every real k, and a bound on the
#: best-k search (the command line allows the same: specnsys.cli.common.K_LIMIT).
K_LIMIT = 1024


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= K_LIMIT:
        raise UsageError(f"k must be an integer from 1 to {K_LIMIT:,}, got {k!r}")
    return k


def _check_c(c: float) -> float:
    if not (isinstance(c, int | float) and math.isfinite(c) and c >= 0.0):
        raise UsageError(f"c must be a cost ratio >= 0, got {c!r}")
    return float(c) + 0.0


def amdahl_speedup(p: float, r: float) -> float:
    """End-to-end speedup when a share *p* of the time becomes *r* times faster."""
    p = _check_p(p)
    if not (isinstance(r, int | float) and r > 0 and math.isfinite(r)):
        raise UsageError(f"r must be a finite speedup > 0, got {r!r}")
    return 1.0 / ((1.0 - p) + p / r)


def amdahl_of_computed(p: float, r: float) -> float:
    """:func:`amdahl_speedup` for an *r* the formulas computed (Leviathan's expectation), not
    one a user gave: a step cost beyond the float range (``k x c`` overflowing) makes *r*
    exactly 0.0, whose limit is an end-to-end speedup of 0 (1 when nothing is accelerable,
    p = 0); a given r of 0 stays refused by :func:`amdahl_speedup`."""
    if r == 0.0:
        return 1.0 if _check_p(p) == 0.0 else 0.0
    return amdahl_speedup(p, r)


def amdahl_ceiling(p: float) -> float | None:
    """``1 / (1 - p)``: the speedup with infinitely fast accelerable work; None if p == 1."""
    p = _check_p(p)
    return None if p >= 1.0 else 1.0 / (1.0 - p)


def tau(alpha: float, k: int) -> float:
    """Expected tokens per speculative step, bonus token included (k + 1 when alpha == 1)."""
    alpha, k = _check_alpha(alpha), _check_k(k)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan's expected walltime improvement ``(1 - a^(k+1)) / ((1 - a)(k c + 1))``."""
    return tau(alpha, k) / (_check_k(k) * _check_c(c) + 1.0)


def best_k(alpha: float, c: float, k_max: int = DEFAULT_K_MAX) -> tuple[int, float]:
    """The k in ``1..k_max`` with the highest expected speedup (smallest k on a tie).

    A speedup below 1 at the best k means speculation cannot pay at these ``alpha``/``c``
    (Leviathan's corollary: some k helps exactly when ``alpha > c``).
    """
    alpha, c, k_max = _check_alpha(alpha), _check_c(c), _check_k(k_max)
    best, best_s = 1, expected_speedup(alpha, 1, c)
    for k in range(2, k_max + 1):
        s = expected_speedup(alpha, k, c)
        if s > best_s * (1.0 + _TIE):
            best, best_s = k, s
    return best, best_s


def whatif(
    alpha: float,
    k: int | None,
    c: float,
    p: float | None = None,
    *,
    k_max: int = DEFAULT_K_MAX,
) -> dict[str, object]:
    """Leviathan's expected decode speedup at *k* and at the best k, and, with *p*, the
    end-to-end result Amdahl's law allows (the decode speedup applied to the share *p*).

    Keys: ``alpha``, ``k``, ``c``, ``p``, ``tau``, ``expected_speedup`` (at *k*; None without
    k), ``best_k``, ``best_speedup``, ``best_k_at_search_limit`` (the optimum may lie beyond
    ``k_max``, e.g. alpha = 1 with c < 1), ``k_max``, ``speculation_pays`` (best speedup
    > 1), ``e2e_speedup`` / ``best_e2e_speedup`` / ``amdahl_ceiling`` (None without p) and
    ``by_k``: ``[{"k", "tau", "speedup", "e2e_speedup"}]`` for k = 1..max(k, best k, 8).
    """
    alpha, c = _check_alpha(alpha), _check_c(c)
    if k is not None:
        k = _check_k(k)
    if p is not None:
        p = _check_p(p)
    k_best, s_best = best_k(alpha, c, k_max)

    def e2e(s: float) -> float | None:
        return None if p is None else amdahl_of_computed(p, s)

    s_k = None if k is None else expected_speedup(alpha, k, c)
    rows = [
        {
            "k": j,
            "tau": tau(alpha, j),
            "speedup": expected_speedup(alpha, j, c),
            "e2e_speedup": e2e(expected_speedup(alpha, j, c)),
        }
        for j in range(1, max(k or 1, k_best, 8) + 1)
    ]
    return {
        "alpha": alpha,
        "k": k,
        "c": c,
        "p": p,
        "tau": None if k is None else tau(alpha, k),
        "expected_speedup": s_k,
        "best_k": k_best,
        "best_speedup": s_best,
        "best_k_at_search_limit": k_best == k_max,
        "k_max": k_max,
        "speculation_pays": s_best > 1.0,
        "e2e_speedup": None if s_k is None else e2e(s_k),
        "best_e2e_speedup": e2e(s_best),
        "amdahl_ceiling": None if p is None else amdahl_ceiling(p),
        "by_k": rows,
    }
