"""The forecast's first simulation, kept as a reference for tests and benchmarks.

The simulation (``specnsys/forecasting/simulate.py``) draws each request about the steps it
takes. Its first version drew, for every request, a row of acceptances as long as the
longest request; the two must agree in law. This is that version, written from the
definition (a draw's tokens are 1 plus the cumulative probabilities at or below it), and a
generator that counts what it is asked to draw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["CountingGenerator", "padded_steps", "tokens_by_search"]

#: Draws one matrix of :func:`padded_steps` holds (the first version's bound).
PADDED_BLOCK = 4_000_000


class CountingGenerator:
    """A seeded :class:`numpy.random.Generator` stand-in that counts the uniform draws asked
    of its ``random``."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.drawn = 0

    def random(self, shape: tuple[int, int], dtype: Any = np.float64) -> npt.NDArray[Any]:
        self.drawn += shape[0] * shape[1]
        out: npt.NDArray[Any] = self.rng.random(shape, dtype=dtype)
        return out


def tokens_by_search(
    draws: npt.NDArray[np.float64], cumulative: npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """A draw's tokens by definition: 1 plus the cumulative probabilities at or below it."""
    found: npt.NDArray[np.int64] = np.searchsorted(cumulative, draws, side="right") + 1
    return found


def padded_steps(
    needed: npt.NDArray[np.int64],
    cumulative: npt.NDArray[np.float64],
    rng: Any,
    tokens_of: Callable[..., npt.NDArray[Any]] = tokens_by_search,
) -> tuple[npt.NDArray[np.int64], float]:
    """Each request's decode steps and the tokens it had before each of its steps but the
    first, summed over requests, the first version's way: every request draws a row as long
    as the longest *needed*, in request order, at most :data:`PADDED_BLOCK` draws a matrix
    (the rows of one generator's stream, so the blocks draw what one matrix would). A
    benchmark passes the simulation's own *tokens_of* (comparisons, not a search), so that
    the reference costs what the first version did."""
    width = max(1, int(needed.max()))
    block = max(1, PADDED_BLOCK // width)
    steps = np.zeros(needed.size, dtype=np.int64)
    before_sum = 0.0
    for lo in range(0, needed.size, block):
        need = needed[lo : lo + block]
        tokens = tokens_of(rng.random((need.size, width)), cumulative)
        cum = np.cumsum(tokens, axis=1, dtype=np.int64)
        before = cum < need[:, None]
        steps[lo : lo + block] = before.sum(axis=1) + (need > 0)
        before_sum += float(np.where(before, cum, 0).sum())
    return steps, before_sum
