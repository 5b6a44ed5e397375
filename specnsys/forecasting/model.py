"""The step cost model, fitted on :class:`~specnsys.forecasting.fitdata.FitData` (docs/forecast.md).

Every term is an ordinary least-squares fit (:mod:`specnsys.forecasting.ols`) over the finest
rows the sources hold:

==================  =====================  ===================================================
term                rows                   regressors (in order of preference)
==================  =====================  ===================================================
``forward``         baseline decode steps  step, batch, ctx
``verify``          speculative steps      step, positions = (k+1) x batch, (k+1) x ctx; with
                                           one k captured, the baseline's forward steps join as
                                           the k = 0 points (positions = batch)
``draft``           speculative steps      forwards F, F x batch, F x ctx, step (with one k,
                                           step is F's multiple: the cost stays per forward)
``sample_step``     decode steps, by role  step, positions scored
``prefill``         prefill ranges         prefill, input_tokens (``input_tokens`` marks);
                                           past the longest fitted prompt, the verify or
                                           forward cost per position where those passes
                                           reached further (the term's knot)
``draft_prefill``   draft prefill ranges   prefill, input_tokens (knot: the draft's passes)
*other phases*      runs, by role          steps, sequence_steps, requests, run
==================  =====================  ===================================================

``ctx`` is the context tokens of the step's batch (input plus the output so far, summed over
its sequences). The *other phases* (schedule, sync, kv, the decode range's own time,
unannotated, and the sample and prefill time outside the fitted ranges) are fitted on whole
runs: their time per run against the run's decode steps, sequence-steps, requests and a
constant, so per-step fixed costs and per-request ones come apart where the runs vary them.

A regressor the rows cannot separate from the ones before it is dropped and said
(``dropped``); a term the sources cannot support at all is in ``missing`` with what the
forecast assumes instead, never a silent zero. The acceptance profile is pooled per draft
position (by sampling labels where runs carry them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from specnsys.errors import BadInputError
from specnsys.forecasting.fitdata import BASELINE, SPEC, FitData, FitRun
from specnsys.forecasting.ols import Matrix, OlsFit, least_squares
from specnsys.forecasting.results import AcceptanceProfile, CostModel, FittedOn, Term
from specnsys.results import NotAvailable
from specnsys.vocabulary import PREFILL_ROLES

__all__ = [
    "RUN_REGRESSORS",
    "acceptance_profiles",
    "STEP_TERMS",
    "fit_model",
    "run_term_name",
]

#: The step terms: name -> (role, phase, the step column fitted, its regressors).
STEP_TERMS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "forward": (BASELINE, "forward", "forward_ns", ("step", "batch", "ctx")),
    "verify": (SPEC, "verify", "verify_ns", ("step", "positions", "ctx_positions")),
    "draft": (SPEC, "draft", "draft_ns", ("forwards", "forward_batch", "forward_ctx", "step")),
    "sample_step/baseline": (BASELINE, "sample", "sample_ns", ("step", "positions")),
    "sample_step/spec": (SPEC, "sample", "sample_ns", ("step", "positions")),
}
#: Run-level regressors of the other phases, and of what a fitted range leaves of its phase.
RUN_REGRESSORS = ("steps", "sequence_steps", "requests", "run")
_OUTSIDE_REGRESSORS = ("requests", "run")

_FORMULAS = {
    "step": "a",
    "batch": "batch",
    "ctx": "ctx",
    "positions": "(k+1)*batch",
    "ctx_positions": "(k+1)*ctx",
    "forwards": "F",
    "forward_batch": "F*batch",
    "forward_ctx": "F*ctx",
    "steps": "steps",
    "sequence_steps": "sequence_steps",
    "requests": "requests",
    "run": "1",
    "prefill": "1",
    "input_tokens": "input_tokens",
}


def run_term_name(phase: str, role: str) -> str:
    return f"{phase}/{role}"


def _formula(y: str, names: Sequence[str]) -> str:
    """``y = c[step] + c[batch]*batch + ...``: the coefficients are keyed by regressor."""
    parts = []
    for n in names:
        x = _FORMULAS.get(n, n)
        parts.append(f"c[{n}]" if x in ("a", "1") else f"c[{n}]*{x}")
    return f"{y} = {' + '.join(parts)}"


def _term(
    name: str,
    role: str,
    y: str,
    names: Sequence[str],
    fit: OlsFit,
    rows: str,
    calibration: float | NotAvailable,
    assumed: str | None = None,
    *,
    symbol: str,
) -> Term:
    def na(value: float | None, why: str) -> float | NotAvailable:
        return NotAvailable(why) if value is None else value

    return Term(
        name=name,
        role=role,
        y=y,
        formula=_formula(symbol, names),
        coefficients=fit.coefficients,
        dropped=fit.dropped,
        n=fit.n,
        rows=rows,
        r2=na(fit.r2, "every fitted value is the same"),
        relative_rms=na(fit.relative_rms, "the fitted values are all 0"),
        calibration=calibration,
        assumed=assumed,
    )


def _runs_frame(runs: Sequence[FitRun]) -> pl.DataFrame:
    return pl.DataFrame(
        {"run_id": [r.run_id for r in runs], "role": [r.role for r in runs],
         "k": [r.k for r in runs]},
        schema={"run_id": pl.String, "role": pl.String, "k": pl.Int64},
    )  # fmt: skip


def _step_rows(data: FitData) -> pl.DataFrame:
    """The steps with every step regressor as a column."""
    steps = data.steps.join(_runs_frame(data.runs), on="run_id")
    ctx = pl.col("ctx")
    return steps.with_columns(
        pl.lit(1.0).alias("step"),
        pl.col("batch").cast(pl.Float64),
        pl.col("positions").cast(pl.Float64),
        ((pl.col("k") + 1) * ctx).alias("ctx_positions"),
        (pl.col("forwards") * pl.col("batch")).alias("forward_batch"),
        (pl.col("forwards") * ctx).alias("forward_ctx"),
    )


def _matrix(frame: pl.DataFrame, names: Sequence[str], y: str) -> tuple[Matrix, Matrix]:
    x = frame.select(pl.col(n).cast(pl.Float64) for n in names).to_numpy()
    return (np.asarray(x, dtype=np.float64),
            np.asarray(frame[y].cast(pl.Float64).to_numpy(), dtype=np.float64))  # fmt: skip


@dataclass
class _Builder:
    """Terms, missing terms and assumptions, collected while fitting; *rows* are the steps
    with every step regressor (:func:`_step_rows`), made once."""

    data: FitData
    terms: list[Term]
    missing: dict[str, str]
    assumptions: list[str]
    rows: pl.DataFrame

    def runs_word(self, frame: pl.DataFrame) -> str:
        return f"{frame.height} decode steps of {frame['run_id'].n_unique()} runs"

    def calibration(self, role: str, phase: str, column: str) -> float | NotAvailable:
        """Exclusive time of *phase* over its range time in the steps, over the role's runs."""
        runs = [r for r in self.data.runs if r.role == role]
        ids = [r.run_id for r in runs]
        ranged = float(self.data.steps.filter(pl.col("run_id").is_in(ids))[column].sum())
        exclusive = float(sum(r.phases.get(phase, 0) for r in runs))
        if ranged <= 0:
            return NotAvailable(f"no {phase} range time in the decode steps")
        return exclusive / ranged


def _with_ctx(frame: pl.DataFrame, names: Sequence[str], ctx_names: Sequence[str]) -> tuple[
    list[str], str | None
]:
    """*names* without the context regressors when some row lacks the context."""
    if frame.height and frame["ctx"].null_count() == 0:
        return list(names), None
    why = (
        "the context length of each step is not known (it needs input_tokens marks in the "
        "prefills, request ranges and first_token/output_tokens marks)"
    )
    return [n for n in names if n not in ctx_names], why


def _step_term(b: _Builder, rows: pl.DataFrame, name: str) -> None:
    role, phase, column, names = STEP_TERMS[name]
    own = rows.filter((pl.col("role") == role) & (pl.col(column) > 0))
    note = None
    if name == "verify" and own.height and own["k"].n_unique() < 2:
        base = rows.filter((pl.col("role") == BASELINE) & (pl.col("forward_ns") > 0))
        if base.height:
            base = base.with_columns(
                pl.col("forward_ns").alias("verify_ns"),
                pl.col("batch").alias("positions"),
                pl.col("ctx").alias("ctx_positions"),
            )
            own = pl.concat([own, base.select(own.columns)])
            note = (
                "one k captured: the baseline's forward steps are the k = 0 points (a target "
                "pass over (k+1)*batch positions costs what a forward over as many does)"
            )
    own = own.filter(pl.col("batch").is_not_null())
    if own.height == 0:
        b.missing[name] = f"no {role} decode step has {phase} range time"
        return
    kept, why_ctx = _with_ctx(own, names, ("ctx", "ctx_positions", "forward_ctx"))
    x, y = _matrix(own, kept, column)
    fit = least_squares(x, y, kept)
    if fit is None:
        b.missing[name] = f"too few {role} decode steps to fit {phase} ({own.height})"
        return
    dropped = dict(fit.dropped)
    if why_ctx:
        dropped.update({n: why_ctx for n in names if n not in kept})
    fit = OlsFit(fit.coefficients, dropped, fit.n, fit.r2, fit.relative_rms, fit.rms)
    assumed = note
    if why_ctx:
        b.missing["context length"] = (
            f"{why_ctx}; assumed step costs independent of context length (the fits' mean "
            "context)"
        )
    if name == "draft" and "step" in fit.dropped and "forwards" in fit.coefficients:
        extra = "one k captured: the draft's fixed cost counted per draft forward"
        assumed = extra if assumed is None else f"{assumed}; {extra}"
    y_text = f"{phase} range time per {role} decode step"
    calibration = (
        NotAvailable("the phase's time outside the decode steps is a run-level term")
        if phase == "sample" else b.calibration(role, phase, column)
    )  # fmt: skip
    b.terms.append(
        _term(name, role, y_text, names, fit, b.runs_word(own), calibration, assumed,
              symbol=column)
    )  # fmt: skip


def _prefill_term(b: _Builder, phase: str) -> bool:
    """The per-range fit of *phase* against its input tokens; False when the sources cannot
    support it (then the run-level term covers the phase)."""
    rows = b.data.prefills.filter(pl.col("phase") == phase)
    marked = rows.filter(pl.col("input_tokens").is_not_null() & (pl.col("duration_ns") > 0))
    if rows.height == 0 or marked.height < rows.height or marked.height == 0:
        return False
    names = ["prefill", "input_tokens"]
    x, y = _matrix(marked.with_columns(pl.lit(1.0).alias("prefill")), names, "duration_ns")
    fit = least_squares(x, y, names)
    if fit is None:
        return False
    assumed = None
    if "input_tokens" not in fit.coefficients:
        assumed = (
            f"{phase} time does not grow with the prompt in these ranges (its slope fitted "
            "below 0 or not separable): a fixed time per range"
        )
    runs = [r for r in b.data.runs if r.run_id in set(marked["run_id"].to_list())]
    exclusive = float(sum(r.phases.get(phase, 0) for r in runs))
    calibration = exclusive / float(marked["duration_ns"].sum())
    term = _term(phase, "both", f"{phase} range time", names, fit,
                 f"{marked.height} {phase} ranges of {len(runs)} runs", calibration, assumed,
                 symbol=f"{phase}_ns")  # fmt: skip
    b.terms.append(_with_knot(b, term, float(marked["input_tokens"].cast(pl.Float64).max())))  # type: ignore[arg-type]
    return True


#: The step terms whose passes run the same model as a prefill term, with the coefficient
#: that is their cost per position and the step column that counts their positions.
_PASSES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "prefill": (("verify", "positions", "positions"), ("forward", "batch", "batch")),
    "draft_prefill": (("draft", "forward_batch", "batch"),),
}


def _with_knot(b: _Builder, term: Term, longest: float) -> Term:
    """*term* with a knot at its *longest* fitted prompt when the same model's decode passes
    ran over more positions than that in one pass: past the knot, each prompt token costs
    their fitted cost per position, the evidence that reaches there, not the prefill fit's
    slope extrapolated (on a CPU the per-token cost of a pass falls as it grows: a slope
    fitted on short prompts overstates long ones). The passes' reach and slope are said in
    ``assumed``."""
    slope = term.coefficients.get("input_tokens")
    if slope is None:
        return term
    fitted = {t.name: t for t in b.terms}
    rows = b.rows
    best: tuple[float, float, str] | None = None
    for name, coefficient, column in _PASSES.get(term.name, ()):
        pass_term = fitted.get(name)
        if pass_term is None or coefficient not in pass_term.coefficients:
            continue
        role, _phase, y, _names = STEP_TERMS[name]
        own = rows.filter((pl.col("role") == role) & (pl.col(y) > 0))
        most = own[column].max()
        if not isinstance(most, int | float):
            continue
        reach, per_position = float(most), pass_term.coefficients[coefficient]
        if reach > longest and per_position > 0 and (best is None or reach > best[0]):
            best = (reach, per_position, name)
    if best is None:
        return term
    reach, per_position, name = best
    said = (
        f"prompts past {longest:.0f} tokens (the longest fitted): each further token costs "
        f"{per_position / 1e3:.2f} us, one more position of the {name} passes (fitted over up "
        f"to {reach:.0f} positions per pass), not the prefill slope of "
        f"{slope / 1e3:.2f} us extrapolated"
    )
    return replace(
        term,
        coefficients={**term.coefficients, "input_tokens_beyond": per_position - slope},
        formula=f"{term.formula} + c[input_tokens_beyond]*max(0, input_tokens - {longest:.0f})",
        assumed=said if term.assumed is None else f"{term.assumed}; {said}",
        knot=longest,
    )


def _run_rows(data: FitData, role: str) -> pl.DataFrame:
    runs = data.of_role(role)
    seq = data.steps.group_by("run_id").agg(
        pl.col("batch").sum().cast(pl.Float64).alias("sequence_steps"),
        pl.col("sample_ns").sum().cast(pl.Float64).alias("sample_in_steps"),
    )
    frame = pl.DataFrame(
        {
            "run_id": [r.run_id for r in runs],
            "steps": [float(r.steps) for r in runs],
            "requests": [float(r.requests) for r in runs],
            "run": [1.0] * len(runs),
        },
        schema={"run_id": pl.String, "steps": pl.Float64, "requests": pl.Float64,
                "run": pl.Float64},
    )  # fmt: skip
    return frame.join(seq, on="run_id", how="left").fill_null(0.0)


def _run_terms(b: _Builder, role: str, step_phases: set[str], prefill_fitted: set[str]) -> None:
    runs = b.data.of_role(role)
    if not runs:
        return
    frame = _run_rows(b.data, role)
    by_id = {r.run_id: r for r in runs}
    inseparable: list[str] = []
    phases = sorted({p for r in runs for p in r.phases} - step_phases)
    for phase in phases:
        if phase in prefill_fitted:
            continue
        totals = [float(by_id[i].phases.get(phase, 0)) for i in frame["run_id"]]
        y = np.asarray(totals)
        names: tuple[str, ...] = RUN_REGRESSORS
        what = f"{phase} time per {role} run"
        assumed = None
        if phase == "sample" and f"sample_step/{role}" in {t.name for t in b.terms}:
            y = y - frame["sample_in_steps"].to_numpy()
            names, what = _OUTSIDE_REGRESSORS, f"sample time outside the decode steps per {role} run"
        elif phase in PREFILL_ROLES:
            names = _OUTSIDE_REGRESSORS
            b.missing[f"{phase} vs input tokens"] = (
                f"not every {phase} range carries an input_tokens mark; assumed a fixed "
                f"{phase} time per request, whatever the prompt length"
            )
        x = frame.select(names).to_numpy().astype(np.float64)
        fit = least_squares(x, y, names)
        name = run_term_name(phase, role)
        if fit is None:
            b.missing[name] = f"no {role} run to fit {phase} on"
            continue
        if "requests" in fit.dropped and phase not in PREFILL_ROLES:
            inseparable.append(phase)
        b.terms.append(_term(name, role, what, names, fit, f"{len(runs)} {role} runs",
                             NotAvailable("fitted on the exclusive time itself"), assumed,
                             symbol=f"{phase}_ns"))  # fmt: skip
    if inseparable:
        b.assumptions.append(
            f"{role} runs: a per-request cost of {', '.join(inseparable)} cannot be told from "
            "their per-step and per-run costs (the runs do not vary their requests apart from "
            "their steps): counted per step and per run"
        )


def acceptance_profiles(
    runs: Sequence[FitRun], *, by_sampling: bool = True
) -> tuple[AcceptanceProfile, ...]:
    """The pooled per-position acceptance of the speculative *runs*: one profile per sampling
    setting (their labels), or one over all of them."""
    groups: dict[tuple[tuple[str, str], ...], list[FitRun]] = {}
    for r in runs:
        if r.role == SPEC and r.accept_reached:
            groups.setdefault(r.sampling if by_sampling else (), []).append(r)
    out = []
    for sampling, members in sorted(groups.items()):
        depth = max(len(r.accept_kept) for r in members)
        conditional: list[float] = []
        accepted = judged = 0
        for i in range(depth):
            kept = sum(r.accept_kept[i] for r in members if len(r.accept_kept) > i)
            before = sum(
                (r.accept_kept[i - 1] if i else r.accept_reached[0])
                for r in members if len(r.accept_kept) > i
            )  # fmt: skip
            accepted += kept
            judged += before
            conditional.append(kept / before if before else 0.0)
        survival = list(np.cumprod(conditional)) if conditional else []
        alpha: float | NotAvailable = (
            accepted / judged if judged else NotAvailable("no draft was judged")
        )
        out.append(
            AcceptanceProfile(
                sampling=dict(sampling),
                conditional=tuple(conditional),
                survival=tuple(float(s) for s in survival),
                alpha=alpha,
                beyond=alpha,
                sequence_steps=sum(r.accept_reached[0] for r in members),
                runs=len(members),
                source="measured",
            )
        )
    return tuple(out)


def _fitted_on(data: FitData) -> FittedOn:
    runs = data.runs
    req = data.requests

    def mean(column: str) -> float | NotAvailable:
        values = req[column].drop_nulls()
        if values.len() == 0 or values.len() < req.height:
            return NotAvailable(f"not every request of the sources has its {column}")
        return float(values.mean())  # type: ignore[arg-type]

    labels: dict[str, set[str]] = {}
    for r in runs:
        for n, v in r.labels.items():
            labels.setdefault(n, set()).add(v)
    return FittedOn(
        sources=tuple(dict.fromkeys(r.source for r in runs)),
        runs=len(runs),
        baseline_runs=len(data.of_role(BASELINE)),
        spec_runs=len(data.of_role(SPEC)),
        k=tuple(sorted({r.k for r in runs if r.role == SPEC})),
        concurrency=tuple(sorted({r.concurrency for r in runs})),
        decode_steps=sum(r.steps for r in runs),
        requests=sum(r.requests for r in runs),
        input_tokens_mean=mean("input_tokens"),
        output_tokens_mean=mean("output_tokens"),
        labels={n: tuple(sorted(v)) for n, v in sorted(labels.items())},
    )


def _forwards_per_draft(runs: Sequence[FitRun]) -> float | NotAvailable:
    ratios = [
        r.draft_forwards_per_step / r.k
        for r in runs
        if r.role == SPEC and r.k and r.draft_forwards_per_step
    ]
    if not ratios:
        return NotAvailable("no speculative run says its draft forwards per step")
    return float(np.mean(ratios))


def _borrowed(b: _Builder) -> None:
    """Terms of a role without runs, taken from the other role's fits (and said)."""
    names = {t.name: t for t in b.terms}
    if b.data.of_role(BASELINE) or not b.data.of_role(SPEC):
        return
    verify = names.get("verify")
    if verify is not None:
        rename = {"step": "step", "positions": "batch", "ctx_positions": "ctx"}
        b.terms.append(
            Term(
                name="forward", role=BASELINE, y="forward range time per baseline decode step",
                formula="forward = the verify fit at (k+1)*batch = batch",
                coefficients={rename[n]: c for n, c in verify.coefficients.items()},
                dropped={}, n=0, rows="none: no baseline run", r2=verify.r2,
                relative_rms=verify.relative_rms, calibration=verify.calibration,
                assumed="no baseline run: a target forward over a batch costs what the verify "
                "fit gives for that many positions (its k = 0 point)",
            )
        )  # fmt: skip
    for t in list(b.terms):
        if t.role != SPEC or t.name in ("verify", "draft", "draft_prefill"):
            continue
        if t.name.startswith("draft_prefill/"):
            continue
        name = t.name.replace("/spec", "/baseline")
        b.terms.append(
            Term(
                name=name, role=BASELINE, y=t.y.replace("spec", "baseline"), formula=t.formula,
                coefficients=dict(t.coefficients), dropped=dict(t.dropped), n=0,
                rows="none: no baseline run", r2=t.r2, relative_rms=t.relative_rms,
                calibration=t.calibration,
                assumed=f"no baseline run: {name} taken from the speculative runs' fit",
            )
        )  # fmt: skip
    b.missing["baseline runs"] = (
        "no baseline run among the sources: the baseline's forward is the verify fit at k = 0 "
        "and its other phases cost what they cost in the speculative runs"
    )


def fit_model(data: FitData) -> CostModel:
    """The cost model of *data* (module docs)."""
    if not data.runs:
        raise BadInputError("no run to fit a cost model on")
    b = _Builder(data, [], {}, [], _step_rows(data))
    for name in STEP_TERMS:
        _step_term(b, b.rows, name)
    fitted = {t.name for t in b.terms}
    prefill_fitted = {p for p in PREFILL_ROLES if _prefill_term(b, p)}
    for role in (BASELINE, SPEC):
        step_phases = {STEP_TERMS[n][1] for n in fitted if STEP_TERMS[n][0] == role}
        step_phases.discard("sample")  # what its fitted ranges leave is a run-level term
        _run_terms(b, role, step_phases, prefill_fitted)
    _borrowed(b)
    if not data.of_role(SPEC):
        b.missing["speculative runs"] = (
            "no speculative run among the sources: draft, verify and acceptance cannot be "
            "fitted, so nothing speculative is forecast"
        )
    profiles = acceptance_profiles(data.runs)
    if data.of_role(SPEC) and not profiles:
        b.missing["acceptance"] = "no proposed/accepted marks in the speculative runs"
    for t in b.terms:
        if t.assumed:
            b.assumptions.append(f"{t.name}: {t.assumed}")
    return CostModel(
        fitted_on=_fitted_on(data),
        terms=tuple(b.terms),
        acceptance=profiles,
        missing=b.missing,
        assumptions=tuple(b.assumptions),
        draft_forwards_per_draft=_forwards_per_draft(data.runs),
    )
