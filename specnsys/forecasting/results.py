"""The forecast's typed results (docs/forecast.md): frozen dataclasses of :mod:`specnsys.results`.

A number the sources cannot support is a :class:`~specnsys.results.NotAvailable` with its
reason, never a zero; ``to_dict`` of a :class:`Forecast` is ``specnsys forecast --json``, and
``specnsys.results.save`` / ``load`` keep one (kind ``forecast``; an :class:`Advice` is kind
``advice``, a :class:`FormulaForecast` kind ``forecast-formula``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specnsys.results import NotAvailable, Result, result_kind

__all__ = [
    "AcceptanceProfile",
    "Advice",
    "AdviceStep",
    "Cell",
    "CostModel",
    "Curve",
    "CutSpec",
    "CutStep",
    "CutWorth",
    "FittedOn",
    "Forecast",
    "FormulaForecast",
    "HeldOut",
    "HeldOutRun",
    "Interval",
    "Term",
    "WorkloadSummary",
]


@dataclass(frozen=True)
class Term:
    """One fitted cost: ``y = sum(coefficient * regressor)`` over the rows it names."""

    name: str
    role: str
    """Whose runs it was fitted on: ``baseline``, ``spec`` or ``both``."""
    y: str
    """What is fitted (a range's time per decode step, a phase's time per run, ...)."""
    formula: str
    coefficients: dict[str, float]
    """Regressor -> ns per unit of it (``step``: per decode step; ``run``: per run)."""
    dropped: dict[str, str]
    """Regressors the rows could not separate from the kept ones, and why."""
    n: int
    rows: str
    """The rows it was fitted on, in words (``312 decode steps of 9 runs``)."""
    r2: float | NotAvailable
    relative_rms: float | NotAvailable
    """Root mean square of the residuals over the mean |y|: the fit's spread."""
    calibration: float | NotAvailable
    """Exclusive phase time over the fitted range time, summed over the runs (1 when ranges
    hold nothing else; a GPU trace's exclusive time also takes kernels that outlast a range)."""
    assumed: str | None = None
    """What had to be assumed because the rows could not tell (None: nothing)."""
    knot: float | None = None
    """A prefill term's longest fitted prompt, past which each token costs what one more
    position costs in the target passes that reached further (``input_tokens_beyond``
    counts the tokens past it; None: the fit's own slope throughout)."""


@dataclass(frozen=True)
class AcceptanceProfile:
    """Per-position acceptance: the conditional rate of each draft position, not only a mean."""

    sampling: dict[str, str]
    """The sampling labels of the runs it was measured on (empty: none labelled)."""
    conditional: tuple[float, ...]
    """``q_i``: of the sequence-steps whose first i - 1 drafts were accepted, the share whose
    i-th draft was too (i = 1 .. the largest measured k)."""
    survival: tuple[float, ...]
    """``P(accepted >= i) = q_1 * ... * q_i``."""
    alpha: float | NotAvailable
    """Pooled accepted / judged drafts (Leviathan's i.i.d. alpha, maximum likelihood)."""
    beyond: float | NotAvailable
    """The rate assumed for positions past the measured ones (the pooled alpha)."""
    sequence_steps: int
    runs: int
    source: str
    """``measured`` (from proposed/accepted marks) or ``given`` (``--alpha``)."""


@dataclass(frozen=True)
class FittedOn:
    """What the model was fitted on."""

    sources: tuple[str, ...]
    runs: int
    baseline_runs: int
    spec_runs: int
    k: tuple[int, ...]
    concurrency: tuple[int, ...]
    decode_steps: int
    requests: int
    input_tokens_mean: float | NotAvailable
    output_tokens_mean: float | NotAvailable
    labels: dict[str, tuple[str, ...]]
    """Each label the runs carry, with the values seen."""


@dataclass(frozen=True)
class CostModel:
    """The step cost model fitted from traces (docs/forecast.md#the-model)."""

    fitted_on: FittedOn
    terms: tuple[Term, ...]
    acceptance: tuple[AcceptanceProfile, ...]
    missing: dict[str, str]
    """Term -> why the sources cannot support it and what is assumed instead."""
    assumptions: tuple[str, ...]
    draft_forwards_per_draft: float | NotAvailable
    """Draft forwards a step runs per drafted token (1 when one forward proposes each):
    what turns a forecast's k into the draft term's forwards."""


@dataclass(frozen=True)
class WorkloadSummary:
    """The traffic forecast: where it came from and its lengths."""

    source: str
    requests: int
    """Requests in one simulated run."""
    rows: int
    weighted: bool
    input_tokens_mean: float | NotAvailable
    input_tokens_max: int | NotAvailable
    output_tokens_mean: float
    output_tokens_max: int


@dataclass(frozen=True)
class CutSpec:
    """One ``--cut PHASE=...``: a phase made shorter, as the article applies it."""

    phase: str
    text: str
    kind: str
    """``per_step`` / ``per_request`` (ns off each), or ``fraction`` (of the phase's time)."""
    amount: float
    """ns per step or request, or the fraction removed (1 = all of it)."""


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    basis: str
    """Where the width comes from (held-out runs' errors, or the fits' residuals)."""


@dataclass(frozen=True)
class CutWorth:
    """What going without one non-accelerable phase would be worth at a cell."""

    phase: str
    ns_per_token_saved: float
    """Its predicted time per output token in the speculative run."""
    p_after: float | NotAvailable
    ceiling_after: float | NotAvailable
    speedup_after: float | NotAvailable


@dataclass(frozen=True)
class Cell:
    """One (concurrency, k) of the forecast."""

    concurrency: int
    k: int
    p: float | NotAvailable
    """The baseline's accelerable (forward) share of its window, for this workload."""
    amdahl_ceiling: float | NotAvailable
    ns_per_output_token: float | NotAvailable
    """The speculative run's predicted window over its output tokens."""
    baseline_ns_per_output_token: float | NotAvailable
    speedup: float | NotAvailable
    """The step model's end-to-end speedup: baseline over speculative time per token."""
    amdahl_speedup: float | NotAvailable
    """``1 / ((1 - p) + p / r)`` with the predicted p and r, beside the step model's."""
    r: float | NotAvailable
    """Accelerable time per output token, baseline over speculative."""
    speedup_interval: Interval | NotAvailable
    ns_per_output_token_interval: Interval | NotAvailable
    best_k: int | NotAvailable
    best_k_speedup: float | NotAvailable
    tokens_per_step: float | NotAvailable
    """Output tokens per sequence-step of the simulated speculative run (bonus included,
    truncation at each request's end included)."""
    decode_steps: float | NotAvailable
    mean_batch: float | NotAvailable
    draft_cost_ratio: float | NotAvailable
    """One draft forward over one target forward at this cell's batch and context."""
    break_even_c: float | NotAvailable
    """The draft cost ratio at which this cell's speedup would be 1."""
    verify_to_forward: float | NotAvailable
    verify_ratio_warning: bool | NotAvailable
    phases_ns_per_token: dict[str, float]
    """The speculative run's predicted time per output token, by phase."""
    baseline_phases_ns_per_token: dict[str, float]
    cut_first: tuple[CutWorth, ...]
    """Non-accelerable phases, most worth cutting first."""
    measured_speedup: float | NotAvailable
    measured_ns_per_output_token: float | NotAvailable


@dataclass(frozen=True)
class Curve:
    """Predicted speedup against k at one concurrency (what ``plot forecast`` draws)."""

    concurrency: int
    k: tuple[int, ...]
    speedup: tuple[float, ...]
    best_k: int
    """The k of the highest predicted speedup (the smallest on a tie)."""
    best_speedup: float
    measured_k: tuple[int, ...]
    measured_speedup: tuple[float, ...]


@dataclass(frozen=True)
class HeldOutRun:
    source: str
    role: str
    k: int
    concurrency: int
    predicted_ns_per_token: float
    measured_ns_per_token: float
    error: float
    """predicted / measured - 1."""


@dataclass(frozen=True)
class HeldOut:
    """The model's error on runs it did not see: each run predicted by a fit without it."""

    method: str
    runs: tuple[HeldOutRun, ...]
    median_abs_error: float | NotAvailable
    max_abs_error: float | NotAvailable
    baseline_error_90: float | NotAvailable
    """The 90th percentile of |error| over held-out baseline runs."""
    spec_error_90: float | NotAvailable


@result_kind("forecast")
@dataclass(frozen=True)
class Forecast(Result):
    """``specnsys forecast``: the fitted model, the workload, one cell per (concurrency, k)."""

    model: CostModel
    workload: WorkloadSummary
    cuts: tuple[CutSpec, ...]
    cells: tuple[Cell, ...]
    curves: tuple[Curve, ...]
    held_out: HeldOut
    assumptions: tuple[str, ...]
    """Everything the forecast assumed, the model's and the workload's."""
    data_warnings: tuple[str, ...] = field(default=(), metadata={"json": False})


@result_kind("forecast-formula")
@dataclass(frozen=True)
class FormulaForecast(Result):
    """``specnsys forecast`` without sources: Amdahl and Leviathan on given numbers."""

    p: float | NotAvailable
    r: float | NotAvailable
    amdahl_ceiling: float | NotAvailable
    speedup: float | NotAvailable
    """End to end: Amdahl(p, r), with r the decode speedup when alpha, k and c give it."""
    alpha: float | NotAvailable
    k: int | NotAvailable
    c: float | NotAvailable
    tokens_per_step: float | NotAvailable
    """Leviathan's expectation ``(1 - alpha^(k+1)) / (1 - alpha)``."""
    step_cost: float | NotAvailable
    """``k c + 1`` target forwards (the verify pass counted as one forward)."""
    decode_speedup: float | NotAvailable
    best_k: int | NotAvailable
    best_k_speedup: float | NotAvailable
    k_max: int | NotAvailable
    """The best-k search's largest k (``--k-max``): a best k equal to it may not be the best."""
    definitions: dict[str, str]


@dataclass(frozen=True)
class CutStep:
    """Advice step 1: one more non-accelerable phase gone, and the forecast after it."""

    phase: str
    ns_per_token_saved: float
    p_after: float | NotAvailable
    ceiling_after: float | NotAvailable
    speedup_after: float | NotAvailable


@dataclass(frozen=True)
class AdviceStep:
    """One of the article's three next steps, with the figure that backs it."""

    order: int
    what: str
    advice: str
    figure: str
    """The number that backs it, in words."""
    command: str
    """The command that shows it (a figure, or the forecast with the change applied)."""


@result_kind("advice")
@dataclass(frozen=True)
class Advice(Result):
    """``specnsys advise``: cut the non-accelerable items, then set k, then the draft size."""

    source: str
    concurrency: int
    k: int
    steps: tuple[AdviceStep, ...]
    cuts: tuple[CutStep, ...]
    forecast: Forecast
    data_warnings: tuple[str, ...] = field(default=(), metadata={"json": False})
