"""Ordinary least squares over the columns the rows can tell apart (docs/forecast.md#fits).

A term of the cost model names its regressors in order of preference (``steps`` before
``requests`` before a per-run constant ...). Rows taken from one capture often cannot separate
two of them: every run of a sweep has the same number of requests, so a per-request cost and a
per-run constant are the same column. :func:`least_squares` keeps a regressor only when it is
not (to rounding) a linear combination of the ones kept before it, and says for each dropped
one which kept regressors it could not be told from, so the term can report it "not
available: why" and the forecast can list what it assumed instead of fitting a number that the
data do not determine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["COLLINEAR_TOLERANCE", "OlsFit", "least_squares"]

COLLINEAR_TOLERANCE = 1e-7
"""A regressor is dropped when what is left of it after projecting it on the kept ones (both
scaled to unit length) is shorter than this: a linear combination up to float rounding."""

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class OlsFit:
    """One least-squares fit: the kept regressors' coefficients, the dropped ones and why."""

    coefficients: dict[str, float]
    dropped: dict[str, str]
    """Regressor -> why it was left out (which kept regressors it is a combination of)."""
    n: int
    r2: float | None
    """``1 - SS_res / SS_tot``; None when every y is the same (nothing to explain)."""
    relative_rms: float | None
    """The residuals' root mean square over the mean |y|: the spread a prediction inherits."""
    rms: float | None
    """The residuals' root mean square, in the unit of y."""

    def predict(self, values: dict[str, float]) -> float:
        """``sum(coefficient * value)`` over the kept regressors (a missing value counts 0)."""
        return float(sum(c * values.get(name, 0.0) for name, c in self.coefficients.items()))


def _independent(columns: Matrix, names: Sequence[str]) -> tuple[list[int], dict[str, str]]:
    """The indices of the columns kept (in order) and why each other one was dropped."""
    kept: list[int] = []
    dropped: dict[str, str] = {}
    for j, name in enumerate(names):
        col = columns[:, j]
        norm = float(np.linalg.norm(col))
        if norm == 0.0:
            dropped[name] = "zero in every row"
            continue
        unit = col / norm
        if kept:
            basis = columns[:, kept] / np.linalg.norm(columns[:, kept], axis=0)
            coef, *_ = np.linalg.lstsq(basis, unit, rcond=None)
            left = float(np.linalg.norm(unit - basis @ coef))
            if left < COLLINEAR_TOLERANCE:
                mates = [names[kept[i]] for i, c in enumerate(coef) if abs(c) > 1e-6]
                dropped[name] = (
                    f"not separable from {', '.join(mates) or 'the kept regressors'} in these "
                    "rows (a fixed ratio in every one)"
                )
                continue
        kept.append(j)
    return kept, dropped


def least_squares(
    rows: Matrix,
    y: npt.NDArray[np.float64],
    names: Sequence[str],
    *,
    signed: Sequence[str] = ("run",),
) -> OlsFit | None:
    """The fit ``y ~ sum(coefficient_j * rows[:, j])`` (no implicit intercept: a constant is a
    column of ones among *names*), over the independent columns (module docs). A cost cannot
    be negative: a coefficient fitted below 0 (noise, or a regressor that stands in for
    another) is left out and the rest refitted, the most negative first; only the *signed*
    regressors (a per-run constant: what a window's edges cut off) may be negative. None
    without rows or when no column is left."""
    n = int(rows.shape[0]) if rows.ndim == 2 else 0
    if n == 0 or len(names) == 0:
        return None
    kept, dropped = _independent(rows, names)
    while True:
        if not kept or n < len(kept):
            return None
        sub = rows[:, kept]
        coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
        scale = np.abs(coef) * np.linalg.norm(sub, axis=0)
        negative = [
            i for i, c in enumerate(coef)
            if names[kept[i]] not in signed and c < 0 and scale[i] > 1e-9 * (np.linalg.norm(y) or 1)
        ]  # fmt: skip
        if not negative or len(kept) == 1:
            break
        worst = min(negative, key=lambda i: coef[i] * np.linalg.norm(sub[:, i]))
        dropped[names[kept[worst]]] = "fitted below 0 (a cost cannot be negative): left out"
        kept.pop(worst)
    residual = y - sub @ coef
    ss_res = float(residual @ residual)
    centred = y - float(np.mean(y))
    ss_tot = float(centred @ centred)
    mean_abs = float(np.mean(np.abs(y)))
    rms = float(np.sqrt(ss_res / n))
    return OlsFit(
        coefficients={names[j]: float(c) for j, c in zip(kept, coef, strict=True)},
        dropped=dropped,
        n=n,
        r2=1.0 - ss_res / ss_tot if ss_tot > 0 else None,
        relative_rms=rms / mean_abs if mean_abs > 0 else None,
        rms=rms,
    )
