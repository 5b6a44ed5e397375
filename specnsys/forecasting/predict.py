"""A run's time by phase from the cost model, at any workload, concurrency and k.

A simulated run (:mod:`specnsys.forecasting.simulate`) gives the sums the terms are linear in;
each phase's predicted time is then (docs/forecast.md#from-terms-to-a-run):

* a step term (forward, verify, draft, the sampling in the steps): its fit evaluated at the
  run's sums -- ``steps`` for the constant, ``sequence_steps`` for the batch, ``(k+1) x
  sequence_steps`` for the positions, ``F x ...`` for the draft forwards -- times its
  calibration (exclusive phase time over range time in the fit runs);
* a prefill term: ``sum over requests of (c0 + c1 * input_tokens)`` (plus, past its knot,
  ``c2 * (input_tokens - knot)``) times its calibration;
* a run term (everything else): its fit at the run's steps, sequence-steps and requests.

Cuts (``--cut``) then take their share off a phase; a cut larger than the phase is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specnsys.errors import UsageError
from specnsys.forecasting.fitdata import BASELINE, SPEC
from specnsys.forecasting.model import STEP_TERMS
from specnsys.forecasting.results import CostModel, CutSpec, Term
from specnsys.forecasting.simulate import RunSums, simulate_run
from specnsys.forecasting.workload import Workload
from specnsys.results import NotAvailable
from specnsys.vocabulary import ACCELERABLE, PREFILL_ROLES

__all__ = ["RunPrediction", "predict_run", "term_of"]


@dataclass(frozen=True)
class RunPrediction:
    """One predicted run: time per phase (ns), output tokens, and the simulated sums."""

    role: str
    k: int
    concurrency: int
    phases: dict[str, float]
    tokens: float
    sums: RunSums
    forwards: float
    """Draft forwards per step (0 for a baseline)."""

    @property
    def window_ns(self) -> float:
        return sum(self.phases.values())

    @property
    def accelerable_ns(self) -> float:
        return sum(v for p, v in self.phases.items() if p in ACCELERABLE)

    @property
    def per_token_ns(self) -> float:
        return self.window_ns / self.tokens if self.tokens else float("nan")


def term_of(model: CostModel, name: str) -> Term | None:
    return next((t for t in model.terms if t.name == name), None)


def _value(x: float | NotAvailable, default: float = 1.0) -> float:
    return default if isinstance(x, NotAvailable) else float(x)


def step_values(sums: RunSums, k: int, forwards: float, steps: float | None = None) -> dict[
    str, float
]:
    """The step regressors summed over a run (or, with *steps* 1 and per-step sums, one
    step): what a step term's coefficients multiply."""
    n = sums.steps if steps is None else steps
    return {
        "step": n,
        "batch": sums.sequence_steps,
        "ctx": sums.ctx,
        "positions": (k + 1) * sums.sequence_steps,
        "ctx_positions": (k + 1) * sums.ctx,
        "forwards": forwards * n,
        "forward_batch": forwards * sums.sequence_steps,
        "forward_ctx": forwards * sums.ctx,
    }


def _inputs(model: CostModel, workload: Workload) -> tuple[Sequence[int] | None, str | None]:
    """The workload's input lengths, or the fit's mean (said) where the model needs them."""
    if workload.input_tokens is not None:
        return workload.input_tokens, None
    needs = any(
        "input_tokens" in t.coefficients or any("ctx" in n for n in t.coefficients)
        for t in model.terms
    )
    mean = model.fitted_on.input_tokens_mean
    if not needs:
        return None, None
    if isinstance(mean, NotAvailable):
        return None, "the workload gives no input lengths: prompt-dependent costs left out"
    length = max(1, round(mean))
    return [length] * len(workload.output_tokens), (
        f"the workload gives no input lengths: every prompt taken as the sources' mean, "
        f"{length} tokens"
    )


def predict_run(
    model: CostModel,
    workload: Workload,
    *,
    role: str,
    k: int,
    concurrency: int,
    survival: Sequence[float],
    cuts: Sequence[CutSpec] = (),
    seed: int = 0,
) -> tuple[RunPrediction, tuple[str, ...]]:
    """The predicted run (module docs) and what it had to assume."""
    notes: list[str] = []
    inputs, note = _inputs(model, workload)
    if note:
        notes.append(note)
    sums = simulate_run(
        workload.output_tokens, inputs, concurrency, k if role == SPEC else 0, survival,
        weights=workload.weights, requests=workload.requests, seed=seed,
    )  # fmt: skip
    ratio = _value(model.draft_forwards_per_draft)
    forwards = ratio * k if role == SPEC else 0.0
    kk = k if role == SPEC else 0
    values = step_values(sums, kk, forwards)
    phases: dict[str, float] = {}
    for name, (term_role, phase, _column, _names) in STEP_TERMS.items():
        term = term_of(model, name)
        if term_role != role or term is None:
            continue
        phases[phase] = phases.get(phase, 0.0) + _evaluate(term, values) * _value(term.calibration)
    run_values = {
        "steps": sums.steps,
        "sequence_steps": sums.sequence_steps,
        "requests": float(sums.requests),
        "run": 1.0,
    }
    for phase in PREFILL_ROLES:
        if role == BASELINE and phase == "draft_prefill":
            continue
        term = term_of(model, phase)
        if term is None:
            continue
        less = 1 if phase == "draft_prefill" else 0
        read = sums.input_tokens - less * sums.requests
        prefill_values = {"prefill": float(sums.requests), "input_tokens": max(read, 0.0),
                          "input_tokens_beyond": _beyond(term, inputs, workload, sums, less)}  # fmt: skip
        phases[phase] = _evaluate(term, prefill_values) * _value(term.calibration)
    suffix = f"/{role}"
    for term in model.terms:
        if not term.name.endswith(suffix) or term.name in STEP_TERMS:
            continue
        phase = term.name[: -len(suffix)]
        phases[phase] = phases.get(phase, 0.0) + _evaluate(term, run_values)
    clipped = sorted(p for p, v in phases.items() if v < 0)
    if clipped:
        notes.append(f"predicted below 0 and taken as 0: {', '.join(clipped)} ({role})")
    phases = {p: max(v, 0.0) for p, v in phases.items()}
    prediction = RunPrediction(role, kk, concurrency, phases, sums.tokens, sums, forwards)
    return apply_cuts(prediction, cuts), tuple(notes)


def _beyond(
    term: Term, inputs: Sequence[int] | None, workload: Workload, sums: RunSums, less: int
) -> float:
    """The prompt tokens a run reads past *term*'s knot (``Term.knot``), summed over its
    requests: each request's tokens past it, or their weighted mean times the requests."""
    if term.knot is None or inputs is None:
        return 0.0
    over = np.clip(np.asarray(inputs, dtype=np.float64) - less - term.knot, 0.0, None)
    if workload.weights is None:
        return float(over.sum())
    w = np.asarray(workload.weights, dtype=np.float64)
    return float(sums.requests * (over * w).sum() / w.sum())


def _evaluate(term: Term, values: dict[str, float]) -> float:
    return float(sum(c * values.get(n, 0.0) for n, c in term.coefficients.items()))


def apply_cuts(prediction: RunPrediction, cuts: Sequence[CutSpec]) -> RunPrediction:
    """*prediction* with each cut taken off its phase (refused when larger than the phase)."""
    if not cuts:
        return prediction
    phases = dict(prediction.phases)
    for cut in cuts:
        have = phases.get(cut.phase, 0.0)
        if cut.kind == "fraction":
            off = cut.amount * have
        else:
            count = prediction.sums.steps if cut.kind == "per_step" else prediction.sums.requests
            off = cut.amount * count
            if off > have * (1 + 1e-9):
                unit = "step" if cut.kind == "per_step" else "request"
                each = have / count if count else 0.0
                raise UsageError(
                    f"--cut {cut.text}: larger than the phase: {cut.phase} takes "
                    f"{each / 1e6:.3f} ms per {unit} in the predicted "
                    f"{prediction.role} run (concurrency {prediction.concurrency}"
                    f"{f', k {prediction.k}' if prediction.role == SPEC else ''})"
                )
        phases[cut.phase] = max(have - off, 0.0)
    return RunPrediction(
        prediction.role, prediction.k, prediction.concurrency, phases, prediction.tokens,
        prediction.sums, prediction.forwards,
    )  # fmt: skip
