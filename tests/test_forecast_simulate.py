"""The simulated run's pieces against their definitions (specnsys/forecasting/simulate.py).

The forecast's simulator is the time of ``forecast`` and ``advise`` on a long workload; its
pieces were made cheaper without changing a number: the tokens of a draw by comparisons
instead of a binary search, the loop's slots by one heap operation per request, and a run
asked for again answered from a cache. These tests hold each piece to what it replaced."""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specnsys.forecasting import simulate
from specnsys.forecasting.simulate import _makespan, _tokens, simulate_run
from specnsys.testing.draws import CountingGenerator, padded_steps


def _heap_makespan(steps: list[int], concurrency: int) -> int:
    """The loop as first written: pop the slot that frees first, push its new end, keep the
    largest end seen."""
    free = [0] * concurrency
    heapq.heapify(free)
    end = 0
    for s in steps:
        if s <= 0:
            continue
        start = heapq.heappop(free)
        heapq.heappush(free, start + s)
        end = max(end, start + s)
    return end


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2, 40), max_size=60), st.integers(1, 9))
def test_makespan_is_the_list_schedule(steps: list[int], concurrency: int) -> None:
    assert _makespan(steps, concurrency) == _heap_makespan(steps, concurrency)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=9),
    st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_tokens_of_a_draw_are_the_binary_searchs(
    weights: list[float], seed: int, on_bounds: bool
) -> None:
    """1 + the number of cumulative probabilities at or below the draw, ties included."""
    p = np.asarray(weights) + 1e-3
    cumulative = np.cumsum(p / p.sum())[:-1]
    draws = np.random.default_rng(seed).random((7, 11))
    if on_bounds and cumulative.size:  # draws exactly on a bound count it
        draws[0, : cumulative.size] = cumulative[: draws.shape[1]]
    expected = np.searchsorted(cumulative, draws, side="right") + 1
    got = _tokens(draws, cumulative)
    assert got.shape == draws.shape
    assert np.array_equal(got.astype(np.int64), expected)


def test_more_slots_than_requests_cost_nothing() -> None:
    """A concurrency of 10**12 (one slot a request) takes no slot list of that size (the
    first version made one: 7.45 GiB at 10**9)."""
    assert _makespan([3, 5, 0, -1], 10**12) == 5
    assert _makespan([], 10**12) == 0


def test_many_draft_positions_keep_the_wide_integers() -> None:
    cumulative = np.linspace(0.0, 1.0, 200, endpoint=False)[1:]
    draws = np.random.default_rng(3).random((5, 40))
    got = _tokens(draws, cumulative)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.searchsorted(cumulative, draws, side="right") + 1)


def test_a_run_asked_for_again_is_the_same_and_not_simulated_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    simulated: list[int] = []
    real = simulate._simulate

    def counted(*args: Any) -> simulate.RunSums:
        simulated.append(args[-1])  # the seed
        return real(*args)

    monkeypatch.setattr(simulate, "_simulate", counted)
    monkeypatch.setattr(simulate, "_RUNS", OrderedDict())
    survival = [0.8, 0.6, 0.4, 0.2]
    outputs = list(range(1, 300))
    first = simulate_run(outputs, None, 8, 4, survival, seed=5)
    # the same values as another sequence type: the same run
    again = simulate_run(tuple(outputs), None, 8, 4, tuple(survival), seed=5)
    assert again == first and simulated == [5]
    other = simulate_run(outputs, None, 8, 4, survival, seed=6)  # another seed: another run
    assert other != first and simulated == [5, 6]
    assert simulate_run(outputs, None, 8, 4, survival, weights=[1.0] * 299, seed=5) != first
    assert simulate_run(outputs, list(outputs), 8, 4, survival, seed=5) != first
    assert len(simulated) == 4
    # the numbers are a simulation's, not the cache's: a fresh one gives them again
    monkeypatch.setattr(simulate, "_RUNS", OrderedDict())
    assert simulate_run(outputs, None, 8, 4, survival, seed=5) == first


def test_the_cache_keeps_the_last_runs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate, "_RUNS", OrderedDict())
    for seed in range(simulate._RUNS_KEPT + 5):
        simulate_run([3, 4, 5], None, 2, 2, [0.5, 0.25], seed=seed)
    assert len(simulate._RUNS) == simulate._RUNS_KEPT


def test_the_key_reads_the_arguments_as_the_simulation_does() -> None:
    """Output lengths are integers to the simulation: two past 2**53 that one float holds are
    two runs; the same values as another sequence type are one."""
    key = simulate._run_key
    assert key([2**53, 3], None, [0.5], None, (1, 1, None, 0)) != key(
        [2**53 + 1, 3], None, [0.5], None, (1, 1, None, 0)
    )
    assert key([4, 3], [10, 20], [0.5], None, (1, 1, None, 0)) == key(
        np.asarray([4, 3]).tolist(), (10, 20), (0.5,), None, (1, 1, None, 0)
    )
    assert key([4, 3], None, [0.5], None, (1, 1, None, 0)) != key(
        [4, 3], None, [0.5], [1.0, 1.0], (1, 1, None, 0)
    )


@pytest.mark.parametrize(
    ("needed", "most"),
    [
        # 3,000 short requests beside a long one: the first version drew 3,001 x 20,000
        ([20_000] + [50] * 3_000, 2 * (20_000 + 50 * 3_000)),
        # long requests draw about their steps (tokens over 2.2 a step), not their tokens
        ([10_000] * 200, int(1.2 * 200 * 10_000 / 2.2)),
    ],
)
def test_draws_follow_each_requests_steps_not_the_longest(needed: list[int], most: int) -> None:
    cumulative = np.cumsum(simulate.tokens_distribution([0.7, 0.5], 2))[:-1]
    rng = CountingGenerator(1)
    simulate._spec_once(np.asarray(needed, dtype=np.int64), np.zeros(len(needed)), cumulative,
                        4, rng)  # type: ignore[arg-type]  # fmt: skip
    assert 0 < rng.drawn <= most


@pytest.mark.parametrize("survival", [[0.8, 0.55, 0.3], [0.2, 0.05], [1.0, 1.0], [0.0]])
def test_draws_by_length_keep_the_distribution(survival: list[float]) -> None:
    """Drawn longest first in blocks and in chunks of steps, each request's steps and context
    keep their law: the means over 400 seeds equal the padded version's within four standard
    errors, on lengths that differ by 100x, and exactly where every step is alike."""
    needed = np.array([3, 400, 17, 4, 90, 1, 0, 250, 8, 8, 1_500], dtype=np.int64)
    cumulative = np.cumsum(simulate.tokens_distribution(survival, len(survival)))[:-1]
    inputs = np.zeros(needed.size)
    new, old = [], []
    for seed in range(400):
        steps, _, ctx = simulate._spec_once(
            needed, inputs, cumulative, needed.size, np.random.default_rng(seed))
        new.append((steps, ctx))
        own, before = padded_steps(needed, cumulative, np.random.default_rng(seed))
        # a slot each: the run lasts as its longest request
        old.append((float(own.max()), before + float(own.sum())))
    a, b = np.asarray(new), np.asarray(old)
    error = np.sqrt(a.var(axis=0) / len(a) + b.var(axis=0) / len(b))
    assert np.all(np.abs(a.mean(axis=0) - b.mean(axis=0)) <= 4 * error)


def test_a_profile_without_finite_moments_still_runs() -> None:
    """The chunks are sized from the profile's mean and spread of tokens a step; a NaN in
    the profile (no mean) falls back to chunks as long as what a request needs, and the run
    still ends: each request takes between need / (k + 1) and need steps."""
    sums = simulate._simulate([10, 20], None, 1, 2, [float("nan"), 0.5], None, None, 0)
    assert 9 / 3 + 19 / 3 <= sums.steps <= 9 + 19
