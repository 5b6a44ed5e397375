"""A closed-loop run of a workload, in decode steps (docs/forecast.md#the-simulated-run).

The cost model's per-step terms are linear in the batch and in the context, so a run's cost
needs only a few sums over its steps: the number of decode steps, the sequence-steps (the
batch summed over steps), the context tokens summed over sequence-steps. They come from the
loop every engine of this kind runs:

* ``concurrency`` slots; a request waiting is admitted into the first slot that frees, and
  decodes from the next step on (its first output token came from its prefill);
* a request of ``o`` output tokens needs ``o - 1`` more from decode steps; in one step it gets
  1 (baseline) or ``1 + accepted`` (speculative: the accepted drafts and the bonus token),
  cut at what it still needs;
* ``accepted`` follows the per-position acceptance profile: the i-th draft is kept with the
  conditional rate ``q_i`` once the drafts before it were.

A baseline run is deterministic. A speculative run is simulated ``replicates`` times with
drafts drawn from the profile (a seeded generator, so the same inputs give the same numbers)
and the sums averaged; a profile that always accepts the same number of drafts needs one
replicate.
"""

from __future__ import annotations

import hashlib
import heapq
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_DRAWS", "RunSums", "draw_probability", "served_tokens", "simulate_run", "tokens_distribution"]

#: Draws one token matrix may hold (requests x steps), and all replicates together.
_MATRIX_MAX = 4_000_000
_TOTAL_MAX = 40_000_000
_REPLICATES_MAX = 64
#: Draft positions :func:`_tokens` compares one by one; past them, a binary search per draw
#: (on a 4,000 x 1,000 matrix: 93 against 186 ms at 64 positions, 558 against 236 at 128).
_COMPARED_MAX = 64
#: Output tokens one simulated run may serve (:func:`served_tokens`, more than the draws of a
#: speculative replicate: :func:`_spec_once`). At that bound a run of 4 replicates takes
#: 1.2 s (65,536 requests of 1,024 tokens, k = 1) to 6.7 s (2**26 requests of one token);
#: 10**6 requests of 2**20 tokens would take hours.
MAX_DRAWS = 1 << 26

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class RunSums:
    """The sums over one simulated run that the cost model needs (means over replicates)."""

    steps: float
    sequence_steps: float
    ctx: float
    """Context tokens over sequence-steps: at each step, each decoding request's input plus
    the output it has so far."""
    requests: int
    tokens: float
    input_tokens: float
    replicates: int


def tokens_distribution(survival: Sequence[float], k: int) -> npt.NDArray[np.float64]:
    """``P(tokens = j)`` for j = 1 .. k + 1 from ``P(accepted >= i)`` (i = 1 .. k)."""
    s = np.array([1.0, *survival[:k], 0.0])
    p = s[:-1] - s[1:]
    p = np.clip(p, 0.0, None)
    out: npt.NDArray[np.float64] = p / p.sum()
    return out


def _makespan(steps: Sequence[int], concurrency: int) -> int:
    """Decode steps of the loop (module docs) whose requests need *steps* steps each, in
    admission order."""
    # one slot: the steps add up; a slot each: the longest (no heap operation per request)
    if concurrency <= 1:
        return sum(s for s in steps if s > 0)
    if concurrency >= len(steps):
        return max((s for s in steps if s > 0), default=0)
    # when each slot frees; a heap (all 0 is one). More slots than requests are never used:
    # each request takes a fresh one, and a list of 10**9 slots would take 7.45 GiB.
    free = [0] * max(1, min(concurrency, len(steps)))
    for s in steps:
        if s > 0:  # into the slot that frees first, which then frees s steps later
            heapq.heapreplace(free, free[0] + s)
    return max(free)


def _baseline(needed: Ints, inputs: npt.NDArray[np.float64], concurrency: int) -> tuple[
    float, float, float
]:
    s = needed.astype(np.float64)
    ctx = float(np.sum(s * (inputs + 1.0) + s * (s - 1.0) / 2.0))
    return float(_makespan(needed.tolist(), concurrency)), float(s.sum()), ctx


def _tokens(
    draws: npt.NDArray[np.floating[Any]], cumulative: npt.NDArray[np.floating[Any]]
) -> npt.NDArray[np.integer[Any]]:
    """Tokens per draw: 1 plus the cumulative probabilities at or below it (what
    ``searchsorted(cumulative, draws, side="right") + 1`` gives), one comparison per draft
    position over the matrix: a binary search per draw cost 3-10x more on the few (k)
    positions (docs/performance.md#issue-35-twelfth-session-the-forecasts-simulation)."""
    if cumulative.size > _COMPARED_MAX:  # a binary search costs less from about 100 positions
        found: npt.NDArray[np.integer[Any]] = np.searchsorted(cumulative, draws, side="right")
        return found + 1
    # a byte per draw while k + 1 fits one (it always does in practice): the matrix is
    # cumulated into 64-bit sums by the caller
    small = np.int8 if cumulative.size < np.iinfo(np.int8).max else np.int64
    tokens = np.ones(draws.shape, dtype=small)
    for bound in cumulative:
        tokens += draws >= bound
    return tokens


def _spec_once(
    needed: Ints,
    inputs: npt.NDArray[np.float64],
    cumulative: npt.NDArray[np.float64],
    concurrency: int,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """One speculative replicate: each request's steps (the draws until its tokens reach
    what it needs) and its context, summed, and the run's length in steps.

    The draws are about what the run uses, not the requests times the longest: requests are
    taken longest first, in blocks of rows none shorter than 3/4 of the block's longest, and
    a row draws about the steps it should take (:func:`_rows_steps`), the few rows that fall
    short drawing again. 100,000 requests of about 500 tokens with 20 of 32,768 take 2.4e7
    draws at k = 4, not 3.3e9 (bench/simulate.py). Each request's draws stay independent and
    identically distributed, so its steps keep their law."""
    if not needed.size or int(needed.max()) == 0:
        return 0.0, 0.0, 0.0
    share = np.diff(np.concatenate(([0.0], cumulative, [1.0])))  # P(tokens = 1 .. k + 1)
    count = np.arange(1, share.size + 1)
    per_step = float(share @ count)  # tokens a step: mean and standard deviation
    spread = float(np.sqrt(max(0.0, float(share @ count**2) - per_step**2)))
    if not (np.isfinite(per_step) and np.isfinite(spread) and per_step >= 1.0):
        # they size the chunks only: one token a step is a chunk as long as the need
        per_step, spread = 1.0, 0.0
    order = np.argsort(-needed, kind="stable")
    shorter = -needed[order]  # ascending
    steps = np.zeros(needed.size, dtype=np.int64)
    ctx = 0.0
    lo = 0
    while lo < needed.size:
        width = int(needed[order[lo]])
        if width == 0:  # the rest need nothing: no steps
            break
        near = int(np.searchsorted(shorter, -(width * 3 // 4), side="left"))
        rows = order[lo : min(near, lo + max(1, _MATRIX_MAX // width))]  # memory bounded
        own, row_ctx = _rows_steps(needed[rows], cumulative, (per_step, spread), rng)
        steps[rows] = own
        ctx += float(np.sum(own * (inputs[rows] + 1.0))) + row_ctx
        lo += rows.size
    return float(_makespan(steps.tolist(), concurrency)), float(steps.sum()), ctx


def _rows_steps(
    need: Ints,
    cumulative: npt.NDArray[np.float64],
    per_step: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[Ints, float]:
    """Decode steps of each request needing *need* tokens (> 0), and the tokens it had
    before each of its steps but the first, summed: drawn in chunks of steps until every
    request has its tokens.

    A chunk is the steps the longest still needs on average (its tokens over *per_step*'s
    mean) plus ``4 x spread x sqrt(tokens) / mean``, at least four standard deviations of
    that count (``spread x sqrt(tokens) / mean**1.5``), so a second chunk is rare. Draws are
    32-bit floats against the cumulative probabilities rounded to them (a law off by at most
    2**-24 a token count; 3x cheaper to draw), and the running tokens 32-bit integers while
    they fit (10x cheaper to sum along a row than 64-bit)."""
    mean, spread = per_step
    bounds = cumulative.astype(np.float32)
    # a chunk's running tokens stay below twice the need times the tokens a step can take
    wide = np.int32 if 2 * int(need.max()) * (cumulative.size + 1) < 2**31 else np.int64
    own: Ints = (need > 0).astype(np.int64)  # the step that reaches what it needs
    have: npt.NDArray[np.signedinteger[Any]] = np.zeros(need.size, dtype=wide)
    active = np.flatnonzero(need > 0)
    ctx = 0.0
    while active.size:
        left = int((need[active] - have[active]).max())
        cols = min(left, int(np.ceil((left + 4.0 * spread * np.sqrt(left)) / mean)) + 2)
        tokens = _tokens(rng.random((active.size, cols), dtype=np.float32), bounds)
        cum: npt.NDArray[np.signedinteger[Any]] = np.cumsum(tokens, axis=1, dtype=wide)
        cum += have[active, None]
        before = cum < need[active, None]
        own[active] += before.sum(axis=1)
        ctx += float(np.sum(cum, where=before, dtype=np.int64))
        have[active] = cum[:, -1]
        active = active[cum[:, -1] < need[active]]
    return own, ctx


def simulate_run(
    outputs: Sequence[int],
    inputs: Sequence[int] | None,
    concurrency: int,
    k: int,
    survival: Sequence[float],
    *,
    weights: Sequence[float] | None = None,
    requests: int | None = None,
    seed: int = 0,
) -> RunSums:
    """The sums of one closed-loop run (module docs) of the requests *outputs* / *inputs*
    (input lengths unknown: None, context counts the output only), at *concurrency* and *k*
    drafts per step (0: a baseline) under the acceptance *survival* ``P(accepted >= i)``.
    With *weights*, each replicate serves *requests* requests drawn by weight.

    A pure function of its arguments (the generator is seeded), so a run asked for again is
    answered from a small cache: ``advise`` forecasts the same configurations with and without
    each cut, which change the costs, not the run (32 runs, 13 of them distinct, on the
    2M-kernel bench export). The cache keeps a digest of the arguments, not the arguments:
    a workload of a million requests is not held for the life of the process."""
    key = _run_key(outputs, inputs, survival, weights, (concurrency, k, requests, seed))
    with _RUNS_LOCK:
        found = _RUNS.get(key)
        if found is not None:
            _RUNS.move_to_end(key)
            return found
    result = _simulate(outputs, inputs, concurrency, k, survival, weights, requests, seed)
    with _RUNS_LOCK:
        _RUNS[key] = result
        while len(_RUNS) > _RUNS_KEPT:
            _RUNS.popitem(last=False)
    return result


#: The simulated runs kept (:func:`simulate_run`), least recently asked for dropped first.
_RUNS: OrderedDict[bytes, RunSums] = OrderedDict()
_RUNS_KEPT = 32
_RUNS_LOCK = threading.Lock()


def _run_key(
    outputs: Sequence[int],
    inputs: Sequence[int] | None,
    survival: Sequence[float],
    weights: Sequence[float] | None,
    scalars: tuple[int | None, ...],
) -> bytes:
    """A digest of a run's arguments: each sequence's values as the simulation reads them
    (the outputs as 64-bit integers, the rest as floats) with their count, then the scalars."""
    digest = hashlib.blake2b(digest_size=16)
    for values, kind in ((outputs, np.int64), (inputs, np.float64), (survival, np.float64),
                         (weights, np.float64)):  # fmt: skip
        if values is None:
            digest.update(b"-")
            continue
        array = np.ascontiguousarray(np.asarray(values, dtype=kind))
        digest.update(array.size.to_bytes(8, "little"))
        digest.update(array.tobytes())
    digest.update(repr(scalars).encode())
    return digest.digest()


def draw_probability(weights: Sequence[float] | None) -> npt.NDArray[np.float64] | None:
    """Each row's chance of being drawn for a request: its weight over their sum (None
    without weights: the rows are served in order)."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    out: npt.NDArray[np.float64] = w / w.sum()
    return out


def served_tokens(
    outputs: npt.ArrayLike, probability: npt.ArrayLike | None, requests: int
) -> int:
    """Output tokens one simulated run serves, at least 1: the rows' sum, or *requests* times
    their mean by *probability*; about the token draws of a speculative replicate."""
    out = np.asarray(outputs, dtype=np.float64)
    if probability is None:
        total = float(out.sum())
    else:
        total = requests * float(np.dot(np.asarray(probability, dtype=np.float64), out))
    return max(1, int(np.ceil(total)))


def _simulate(
    outputs: Sequence[int],
    inputs: Sequence[int] | None,
    concurrency: int,
    k: int,
    survival: Sequence[float],
    weights: Sequence[float] | None,
    requests: int | None,
    seed: int,
) -> RunSums:
    rng = np.random.default_rng(seed)
    out = np.asarray(outputs, dtype=np.int64)
    inp = np.zeros(out.size) if inputs is None else np.asarray(inputs, dtype=np.float64)
    n = out.size if weights is None else int(requests or out.size)
    probability = draw_probability(weights)
    dist = tokens_distribution(survival, k) if k > 0 else np.array([1.0])
    cumulative = np.cumsum(dist)[:-1]
    fixed = weights is None and (k == 0 or np.count_nonzero(dist) == 1)
    # as many replicates as the draws allow, at least 4 (the spread of the mean shrinks
    # with their number; a long workload is its own average)
    replicates = 1 if fixed else max(4, min(_REPLICATES_MAX, _TOTAL_MAX // served_tokens(
        out, probability, n)))
    sums = np.zeros(3)
    tokens = 0.0
    input_sum = 0.0
    for _ in range(replicates):
        if probability is not None:
            pick = rng.choice(out.size, size=n, p=probability)
            o, i = out[pick], inp[pick]
        else:
            o, i = out, inp
        needed = np.maximum(o - 1, 0)
        if k == 0:
            sums += _baseline(needed, i, concurrency)
        else:
            sums += _spec_once(needed, i, cumulative, concurrency, rng)
        tokens += float(o.sum())
        input_sum += float(i.sum())
    sums /= replicates
    return RunSums(
        steps=float(sums[0]),
        sequence_steps=float(sums[1]),
        ctx=float(sums[2]),
        requests=n,
        tokens=tokens / replicates,
        input_tokens=input_sum / replicates,
        replicates=replicates,
    )
