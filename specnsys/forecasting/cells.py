"""The forecast itself: fitted model + workload -> one cell per (concurrency, k).

For each concurrency the baseline run and, for each k, the speculative run of the workload are
predicted (:mod:`specnsys.forecasting.predict`); a cell compares them (docs/forecast.md#a-cell):

* ``p`` = the baseline's forward time / its window; ``amdahl_ceiling`` = ``1 / (1 - p)``;
* ``speedup`` = baseline / speculative time per output token (the step model) and, beside it,
  ``amdahl_speedup`` = ``1 / ((1 - p) + p / r)`` with ``r`` = the accelerable time per token,
  baseline over speculative (what Amdahl's law says the same prediction is worth);
* ``best_k``: the k in 1..k_max of the highest predicted speedup (the smallest on a tie);
* ``draft_cost_ratio`` c = one draft forward / one target forward at the cell's batch and
  context; ``break_even_c``: the c at which the speedup would be 1 (the draft's time scaled);
* ``verify_to_forward``: one verify pass / one forward at the same batch (over 1.3: flagged);
* ``cut_first``: every non-accelerable phase by its predicted time per token, with the p,
  ceiling and speedup if it went away;
* the prediction interval, from the model's errors on runs it did not see (each fit run
  predicted by the model fitted without it), and the measured point where the sources hold
  the cell's configuration for this workload.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from specnsys.errors import BadInputError, UsageError
from specnsys.forecasting.cuts import check_cut_phases
from specnsys.forecasting.fitdata import BASELINE, SPEC, FitData, FitRun
from specnsys.forecasting.model import STEP_TERMS, acceptance_profiles, fit_model
from specnsys.forecasting.predict import RunPrediction, predict_run, step_values, term_of
from specnsys.forecasting.results import (
    AcceptanceProfile,
    Cell,
    CostModel,
    Curve,
    CutSpec,
    CutWorth,
    Forecast,
    HeldOut,
    HeldOutRun,
    Interval,
)
from specnsys.forecasting.simulate import (
    MAX_DRAWS,
    RunSums,
    draw_probability,
    served_tokens,
)
from specnsys.forecasting.workload import Workload, check_lengths
from specnsys.metrics.amdahl import K_LIMIT
from specnsys.metrics.comparison import VERIFY_RATIO_WARNING
from specnsys.results import NotAvailable
from specnsys.vocabulary import ACCELERABLE

__all__ = ["DEFAULT_K_MAX", "HELD_OUT_MAX", "Acceptance", "forecast_data", "source_workload"]

DEFAULT_K_MAX = 12
"""Largest k the best-k search and the curves try."""
HELD_OUT_MAX = 40
"""Runs held out one at a time to measure the model's error (evenly spread over the runs)."""
_TIE = 1e-9


@dataclass(frozen=True)
class Acceptance:
    """The acceptance a forecast runs on: a measured profile, or a given i.i.d. alpha."""

    profile: AcceptanceProfile | None
    alpha: float | None
    note: str

    def survival(self, k: int) -> list[float]:
        """``P(accepted >= i)`` for i = 1..k (positions past the measured ones at the rate
        the profile assumes beyond)."""
        if self.alpha is not None:
            return [self.alpha**i for i in range(1, k + 1)]
        assert self.profile is not None
        measured = list(self.profile.survival[:k])
        beyond = self.profile.beyond
        rate = 0.0 if isinstance(beyond, NotAvailable) else float(beyond)
        last = measured[-1] if measured else 1.0
        while len(measured) < k:
            last *= rate
            measured.append(last)
        return measured


def choose_acceptance(
    model: CostModel, runs: Sequence[FitRun], alpha: float | None, sampling: dict[str, str] | None
) -> Acceptance | None:
    """The acceptance to forecast with (None when the sources have none and none is given)."""
    if alpha is not None:
        if not (isinstance(alpha, int | float) and 0.0 <= alpha <= 1.0):
            raise UsageError(f"--alpha must be an acceptance rate in [0, 1], got {alpha!r}")
        return Acceptance(None, float(alpha), f"acceptance: the given alpha {alpha:g}, i.i.d. "
                          "per position (Leviathan's model)")  # fmt: skip
    profiles = model.acceptance
    if not profiles:
        return None
    if sampling:
        chosen = [p for p in profiles if p.sampling == sampling]
        if not chosen:
            have = "; ".join(_sampling_text(p.sampling) for p in profiles)
            raise UsageError(f"--sampling {_sampling_text(sampling)}: no run has it ({have})")
        profile = chosen[0]
    elif len(profiles) == 1:
        profile = profiles[0]
    else:
        profile = acceptance_profiles(runs, by_sampling=False)[0]
        have = "; ".join(_sampling_text(p.sampling) for p in profiles)
        return Acceptance(profile, None, f"acceptance: pooled over the sampling settings "
                          f"{have} (choose one with --sampling)")  # fmt: skip
    depth = len(profile.conditional)
    beyond = profile.beyond
    tail = "" if isinstance(beyond, NotAvailable) else f", past k = {depth} at {beyond:.3f}"
    return Acceptance(profile, None, f"acceptance: the measured per-position profile "
                      f"({profile.sequence_steps} sequence-steps{tail})")  # fmt: skip


def _sampling_text(sampling: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sampling.items()) or "unlabelled"


def _check_draws(work: Workload) -> None:
    """Refuse a workload whose simulated run would serve more than
    :data:`~specnsys.forecasting.simulate.MAX_DRAWS` output tokens (a speculative replicate
    draws fewer: about one a step)."""
    served = served_tokens(work.output_tokens, draw_probability(work.weights), work.requests)
    if served > MAX_DRAWS:
        mean = "mean output by weight" if work.weights is not None else "mean output"
        raise BadInputError(
            f"{work.source}: {work.requests:,} requests x {served / work.requests:,.1f} tokens "
            f"({mean}) = {served:,} output tokens per simulated run; a forecast simulates at "
            f"most {MAX_DRAWS:,} (a few seconds a run): serve fewer requests (--requests) "
            "or shorter ones"
        )


def source_workload(data: FitData, run: FitRun | None = None) -> Workload:
    """The requests of *run* (default: the first run of the sources) as a workload."""
    run = run or data.runs[0]
    req = data.requests.filter(data.requests["run_id"] == run.run_id)
    outputs = req["output_tokens"].to_list()
    if not outputs or any(o is None or o < 1 for o in outputs):
        per = max(1, round(run.tokens / max(1, run.requests)))
        outputs = [per] * max(1, run.requests)
        where = f"{run.source} (output lengths not marked: {per} tokens each)"
    else:
        where = run.source
    inputs = req["input_tokens"].to_list()
    known = len(inputs) == len(outputs) and all(i is not None and i >= 1 for i in inputs)
    check_lengths(outputs, "output_tokens", run.source)
    if known:
        check_lengths(inputs, "input_tokens", run.source)
    return Workload(tuple(int(o) for o in outputs), tuple(int(i) for i in inputs) if known
                    else None, None, len(outputs), where)  # fmt: skip


@dataclass
class _Context:
    model: CostModel
    workload: Workload
    acceptance: Acceptance | None
    cuts: tuple[CutSpec, ...]
    seed: int
    notes: list[str]

    def run(self, role: str, concurrency: int, k: int) -> RunPrediction:
        survival = self.acceptance.survival(k) if (self.acceptance and role == SPEC) else []
        prediction, notes = predict_run(
            self.model, self.workload, role=role, k=k, concurrency=concurrency,
            survival=survival, cuts=self.cuts, seed=self.seed,
        )  # fmt: skip
        for n in notes:
            if n not in self.notes:
                self.notes.append(n)
        return prediction


def _per_step(sums: RunSums) -> RunSums:
    steps = sums.steps or 1.0
    return RunSums(1.0, sums.sequence_steps / steps, sums.ctx / steps, sums.requests,
                   sums.tokens, sums.input_tokens, sums.replicates)  # fmt: skip


def _term_at(model: CostModel, name: str, values: dict[str, float]) -> float | None:
    term = term_of(model, name)
    if term is None:
        return None
    cal = term.calibration
    scale = 1.0 if isinstance(cal, NotAvailable) else float(cal)
    return scale * sum(c * values.get(n, 0.0) for n, c in term.coefficients.items())


def _costs(model: CostModel, spec: RunPrediction) -> tuple[
    float | None, float | None, float | None
]:
    """One draft forward, one verify pass and one target forward at *spec*'s mean batch and
    context."""
    one = _per_step(spec.sums)
    draft = _term_at(model, "draft", step_values(one, spec.k, spec.forwards, 1.0))
    verify = _term_at(model, "verify", step_values(one, spec.k, spec.forwards, 1.0))
    forward = _term_at(model, "forward", step_values(one, 0, 0.0, 1.0))
    per_forward = None if draft is None or not spec.forwards else draft / spec.forwards
    return per_forward, verify, forward


def _na(why: str) -> NotAvailable:
    return NotAvailable(why)


def _ratio(a: float, b: float) -> float | NotAvailable:
    return a / b if b > 0 else _na("divides by zero")


def _cut_first(base: RunPrediction, spec: RunPrediction) -> tuple[CutWorth, ...]:
    wb, ws, ab = base.window_ns, spec.window_ns, base.accelerable_ns
    rows = []
    for phase, xs in spec.phases.items():
        if phase in ACCELERABLE or xs <= 0:
            continue
        xb = base.phases.get(phase, 0.0)
        left = wb - xb
        p_after: float | NotAvailable = ab / left if left > 0 else _na("nothing left")
        ceiling: float | NotAvailable = (
            1.0 / (1.0 - p_after) if isinstance(p_after, float) and p_after < 1.0
            else _na("p = 1: no finite ceiling")
        )  # fmt: skip
        speedup: float | NotAvailable = (
            (left / base.tokens) / ((ws - xs) / spec.tokens) if ws > xs else _na("nothing left")
        )
        rows.append(CutWorth(phase, xs / spec.tokens, p_after, ceiling, speedup))
    rows.sort(key=lambda c: (-c.ns_per_token_saved, c.phase))
    return tuple(rows)


def _measured(
    data: FitData, workload: Workload, concurrency: int, k: int
) -> tuple[float | NotAvailable, float | NotAvailable]:
    """The measured speedup and spec time per token of runs of this very workload."""
    same = _same_workload_runs(data, workload)
    base = [r.per_token_ns for r in same if r.role == BASELINE and r.concurrency == concurrency]
    spec = [r.per_token_ns for r in same if r.role == SPEC and r.concurrency == concurrency
            and r.k == k]  # fmt: skip
    if not spec:
        return _na("no source ran this configuration"), _na("no source ran this configuration")
    measured_spec = statistics.median(spec)
    if not base:
        return _na("no baseline source at this concurrency"), measured_spec
    return statistics.median(base) / measured_spec, measured_spec


def _same_workload_runs(data: FitData, workload: Workload) -> list[FitRun]:
    """The runs that served exactly the workload's requests (output lengths, and input
    lengths where both are known), so their measurements are points of this forecast."""
    if workload.weights is not None:
        return []
    want_out = sorted(workload.output_tokens)
    want_in = None if workload.input_tokens is None else sorted(workload.input_tokens)
    out = []
    for run in data.runs:
        req = data.requests.filter(data.requests["run_id"] == run.run_id)
        outputs = req["output_tokens"].to_list()
        if None in outputs or sorted(outputs) != want_out:
            continue
        inputs = req["input_tokens"].to_list()
        if want_in is not None and None not in inputs and sorted(inputs) != want_in:
            continue
        out.append(run)
    return out


def _interval(
    value: float, low_error: float, high_error: float, basis: str
) -> Interval | NotAvailable:
    if not math.isfinite(value):
        return _na("no value")
    return Interval(value * (1.0 - low_error), value * (1.0 + high_error), basis)


@dataclass(frozen=True)
class _Errors:
    baseline: float | None
    spec: float | None
    basis: str


def _errors(model: CostModel, held: HeldOut) -> _Errors:
    def step_spread(role: str) -> float | None:
        spreads = [
            float(t.relative_rms)
            for t in model.terms
            if t.role == role and t.name in STEP_TERMS and isinstance(t.relative_rms, float)
        ]
        return max(spreads) if spreads else None

    b = held.baseline_error_90
    s = held.spec_error_90
    if isinstance(b, float) and isinstance(s, float):
        return _Errors(b, s, f"90th percentile of the errors on {len(held.runs)} held-out runs")
    return _Errors(
        b if isinstance(b, float) else step_spread(BASELINE),
        s if isinstance(s, float) else step_spread(SPEC),
        "held-out runs' errors where a run of the role could be held out, else the largest "
        "relative spread of the role's step fits (in-sample)",
    )


def _cell(
    ctx: _Context,
    data: FitData,
    base: RunPrediction,
    spec: RunPrediction | None,
    curve: Curve | None,
    errors: _Errors,
    why_no_spec: str,
) -> Cell:
    model = ctx.model
    wb, tb, ab = base.window_ns, base.tokens, base.accelerable_ns
    p: float | NotAvailable = ab / wb if wb > 0 else _na("empty baseline window")
    ceiling: float | NotAvailable = (
        1.0 / (1.0 - p) if isinstance(p, float) and p < 1.0 else _na("p = 1: no finite ceiling")
    )
    base_ns = wb / tb if tb else float("nan")
    base_phases = {ph: v / tb for ph, v in sorted(base.phases.items()) if v > 0}
    if spec is None:
        return _baseline_cell(base, p, ceiling, base_ns, base_phases, _na(why_no_spec))
    ws, ts, as_ = spec.window_ns, spec.tokens, spec.accelerable_ns
    ns = ws / ts
    speedup = base_ns / ns
    r: float | NotAvailable = (ab / tb) / (as_ / ts) if as_ > 0 else _na("no accelerable time")
    amdahl: float | NotAvailable = (
        1.0 / ((1.0 - p) + p / r) if isinstance(p, float) and isinstance(r, float) and r > 0
        else _na("needs p and r")
    )  # fmt: skip
    draft_fwd, verify, forward = _costs(model, spec)
    c: float | NotAvailable = (
        draft_fwd / forward if draft_fwd is not None and forward else _na("needs the draft and forward terms")
    )  # fmt: skip
    break_even = _break_even_c(base, spec, c)
    v2f: float | NotAvailable = (
        verify / forward if verify is not None and forward else _na("needs the verify and forward terms")
    )  # fmt: skip
    warn: bool | NotAvailable = v2f > VERIFY_RATIO_WARNING if isinstance(v2f, float) else v2f
    seq = spec.sums.sequence_steps
    tps: float | NotAvailable = (ts - spec.sums.requests) / seq if seq > 0 else _na("no decode step")
    measured_speedup, measured_ns = _measured(data, ctx.workload, spec.concurrency, spec.k)
    best_k: int | NotAvailable = _na("no curve")
    best_s: float | NotAvailable = _na("no curve")
    if curve is not None and curve.k:
        best_k, best_s = curve.best_k, curve.best_speedup
    interval_ns, interval_s = _intervals(ns, speedup, errors)
    return Cell(
        concurrency=spec.concurrency,
        k=spec.k,
        p=p,
        amdahl_ceiling=ceiling,
        ns_per_output_token=ns,
        baseline_ns_per_output_token=base_ns,
        speedup=speedup,
        amdahl_speedup=amdahl,
        r=r,
        speedup_interval=interval_s,
        ns_per_output_token_interval=interval_ns,
        best_k=best_k,
        best_k_speedup=best_s,
        tokens_per_step=tps,
        decode_steps=spec.sums.steps,
        mean_batch=seq / spec.sums.steps if spec.sums.steps else _na("no decode step"),
        draft_cost_ratio=c,
        break_even_c=break_even,
        verify_to_forward=v2f,
        verify_ratio_warning=warn,
        phases_ns_per_token={ph: v / ts for ph, v in sorted(spec.phases.items()) if v > 0},
        baseline_phases_ns_per_token=base_phases,
        cut_first=_cut_first(base, spec),
        measured_speedup=measured_speedup,
        measured_ns_per_output_token=measured_ns,
    )


def _baseline_cell(
    base: RunPrediction,
    p: float | NotAvailable,
    ceiling: float | NotAvailable,
    base_ns: float,
    base_phases: dict[str, float],
    na: NotAvailable,
) -> Cell:
    """The cell of a concurrency without a speculative prediction: the baseline's numbers,
    every speculative one *na*."""
    return Cell(
        concurrency=base.concurrency, k=0, p=p, amdahl_ceiling=ceiling,
        ns_per_output_token=na, baseline_ns_per_output_token=base_ns, speedup=na,
        amdahl_speedup=na, r=na, speedup_interval=na, ns_per_output_token_interval=na,
        best_k=na, best_k_speedup=na, tokens_per_step=na, decode_steps=na, mean_batch=na,
        draft_cost_ratio=na, break_even_c=na, verify_to_forward=na,
        verify_ratio_warning=na, phases_ns_per_token={},
        baseline_phases_ns_per_token=base_phases, cut_first=(), measured_speedup=na,
        measured_ns_per_output_token=na,
    )  # fmt: skip


def _break_even_c(
    base: RunPrediction, spec: RunPrediction, c: float | NotAvailable
) -> float | NotAvailable:
    """The draft cost ratio at which this speculative cell would just match the baseline:
    the predicted c scaled by how much draft time the step could afford."""
    draft_total = spec.phases.get("draft", 0.0)
    if draft_total <= 0 or not isinstance(c, float):
        return _na("no draft time predicted")
    wb, tb, ws, ts = base.window_ns, base.tokens, spec.window_ns, spec.tokens
    scale = (wb / tb * ts - (ws - draft_total)) / draft_total
    if scale > 0:
        return c * scale
    return _na(f"even a free draft does not pay at k = {spec.k}: verify and the rest of the "
               "step cost more than the baseline")  # fmt: skip


def _intervals(
    ns: float, speedup: float, errors: _Errors
) -> tuple[Interval | NotAvailable, Interval | NotAvailable]:
    """(time per token, speedup) prediction intervals from the held-out errors of the
    speculative and baseline predictions."""
    eb, es = errors.baseline, errors.spec
    if es is None:
        return _na("no error estimate"), _na("no error estimate")
    interval_ns = _interval(ns, es, es, errors.basis)
    if eb is None:
        return interval_ns, _na("no error estimate")
    low = 1.0 - (1.0 - eb) / (1.0 + es)
    high = (1.0 + eb) / max(1.0 - es, 1e-9) - 1.0
    return interval_ns, _interval(speedup, low, high, errors.basis)


def _curve(
    ctx: _Context, data: FitData, base: RunPrediction, ks: Sequence[int]
) -> Curve:
    speedups = []
    for k in ks:
        spec = ctx.run(SPEC, base.concurrency, k)
        speedups.append(base.per_token_ns / spec.per_token_ns)
    measured_k, measured_s = [], []
    for k in sorted({r.k for r in data.runs if r.role == SPEC}):
        m, _ = _measured(data, ctx.workload, base.concurrency, k)
        if isinstance(m, float):
            measured_k.append(k)
            measured_s.append(m)
    best = int(np.argmax(np.asarray(speedups) * (1.0 - _TIE * np.arange(len(ks)))))
    return Curve(base.concurrency, tuple(ks), tuple(speedups), ks[best], speedups[best],
                 tuple(measured_k), tuple(measured_s))  # fmt: skip


def held_out(data: FitData, seed: int = 0) -> HeldOut:
    """Each run (up to :data:`HELD_OUT_MAX`, evenly spread) predicted by the model fitted on
    the others, at its own requests, concurrency and k, with the others' acceptance."""
    runs = list(data.runs)
    if len(runs) > HELD_OUT_MAX:
        step = len(runs) / HELD_OUT_MAX
        runs = [runs[int(i * step)] for i in range(HELD_OUT_MAX)]
    rows: list[HeldOutRun] = []
    for run in runs:
        rest = data.without(run.run_id)
        if not any(r.role == run.role for r in rest.runs):
            continue
        try:
            model = fit_model(rest)
        except BadInputError:
            continue
        acceptance = choose_acceptance(model, rest.runs, None, None)
        if run.role == SPEC and (acceptance is None or term_of(model, "verify") is None):
            continue
        ctx = _Context(model, source_workload(data, run), acceptance, (), seed, [])
        predicted = ctx.run(run.role, run.concurrency, run.k).per_token_ns
        measured = run.per_token_ns
        if math.isfinite(predicted) and measured > 0:
            rows.append(HeldOutRun(run.source, run.role, run.k, run.concurrency, predicted,
                                   measured, predicted / measured - 1.0))  # fmt: skip
    method = (
        "leave one run out: each run predicted by the model fitted on the other runs, at its "
        "own requests, concurrency and k"
        + (f" ({len(runs)} of {len(data.runs)} runs, evenly spread)" if len(runs) < len(data.runs)
           else "")
    )  # fmt: skip

    def p90(role: str) -> float | NotAvailable:
        errs = [abs(r.error) for r in rows if r.role == role]
        if not errs:
            return _na(f"no {role} run could be held out (it needs another {role} run to fit on)")
        return float(np.quantile(errs, 0.9))

    errs = [abs(r.error) for r in rows]
    none = _na("no run could be held out (each role needs two runs)")
    return HeldOut(
        method=method,
        runs=tuple(rows),
        median_abs_error=float(np.median(errs)) if errs else none,
        max_abs_error=max(errs) if errs else none,
        baseline_error_90=p90(BASELINE),
        spec_error_90=p90(SPEC),
    )


def forecast_data(
    data: FitData,
    *,
    workload: Workload | None = None,
    concurrency: Sequence[int] | None = None,
    k: Sequence[int] | None = None,
    alpha: float | None = None,
    cuts: Sequence[CutSpec] = (),
    k_max: int = DEFAULT_K_MAX,
    sampling: dict[str, str] | None = None,
    seed: int = 0,
    hold_out: bool = True,
    data_warnings: Sequence[str] = (),
) -> Forecast:
    """The forecast of *workload* (default: the sources' own requests) from *data* (module
    docs)."""
    model = fit_model(data)
    for c in concurrency or ():
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise UsageError(f"--concurrency must be a whole number >= 1, got {c!r}")
    for kk in k or ():
        if isinstance(kk, bool) or not isinstance(kk, int) or not 1 <= kk <= K_LIMIT:
            raise UsageError(f"--k must be a whole number in 1..{K_LIMIT}, got {kk!r}")
    if isinstance(k_max, bool) or not isinstance(k_max, int) or not 1 <= k_max <= 64:
        raise UsageError(f"--k-max must be a whole number in 1..64, got {k_max!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"--seed must be a whole number >= 0, got {seed!r}")
    work = workload or source_workload(data)
    _check_draws(work)
    acceptance = choose_acceptance(model, data.runs, alpha, sampling)
    can_spec = acceptance is not None and term_of(model, "verify") is not None
    why_no_spec = (
        "needs a speculative source (draft, verify and acceptance)"
        if term_of(model, "verify") is None
        else "needs the acceptance: proposed/accepted marks, or --alpha"
    )
    concurrencies = sorted(set(concurrency or model.fitted_on.concurrency or (1,)))
    ks = sorted(set(k or model.fitted_on.k or ((1, 2, 3, 4) if alpha is not None else ())))
    ctx = _Context(model, work, acceptance, (), seed, [])
    # the phases a cut may name: those the model predicts, in either kind of run
    probe = ctx.run(BASELINE, concurrencies[0], 0).phases.keys() | (
        ctx.run(SPEC, concurrencies[0], ks[0] if ks else 1).phases.keys() if can_spec else set()
    )
    check_cut_phases(cuts, probe)
    ctx = replace(ctx, cuts=tuple(cuts))
    held = held_out(data, seed) if hold_out else HeldOut(
        "not computed", (), _na("not computed"), _na("not computed"), _na("not computed"),
        _na("not computed"),
    )  # fmt: skip
    errors = _errors(model, held)
    cells: list[Cell] = []
    curves: list[Curve] = []
    curve_k = list(range(1, max(k_max, *(ks or [1])) + 1))
    for conc in concurrencies:
        base = ctx.run(BASELINE, conc, 0)
        curve = _curve(ctx, data, base, curve_k) if can_spec else None
        if curve is not None:
            curves.append(curve)
        if not can_spec or not ks:
            cells.append(_cell(ctx, data, base, None, None, errors, why_no_spec))
            continue
        for kk in ks:
            cells.append(_cell(ctx, data, base, ctx.run(SPEC, conc, kk), curve, errors,
                               why_no_spec))  # fmt: skip
    assumptions = [*model.assumptions, *model.missing.values()]
    if acceptance is not None:
        assumptions.append(acceptance.note)
    assumptions += ctx.notes
    for cut in cuts:
        assumptions.append(f"cut: {cut.text} in the baseline and the speculative runs")
    return Forecast(
        model=model,
        workload=work.summary(),
        cuts=tuple(cuts),
        cells=tuple(cells),
        curves=tuple(curves),
        held_out=held,
        assumptions=tuple(dict.fromkeys(assumptions)),
        data_warnings=tuple(data_warnings),
    )
