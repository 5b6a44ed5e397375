"""The cost model of one speculative step, fitted on a dataset's ``steps`` table.

A speculative decode step over a batch of ``B`` sequences with ``k`` drafts each costs

* **drafting**: ``D(n) = d0 + d1 * n`` for the ``n = k * B`` proposed tokens (``proposed``
  marks of the step); ``d1`` is the draft cost per proposed token, ``d0`` the fixed cost of the
  draft passes (launches, the draft's own schedule);
* **verification**: ``V(x) = v0 + v1 * x`` for the ``x = (k + 1) * B`` positions the target
  scores in one pass (each sequence's k drafts plus the bonus position); ``v1`` is the
  **marginal cost per verified position**, ``v0`` the fixed cost of a target pass. On a GPU
  with spare compute ``v1`` is small and a verify step costs about one decode step (the wide
  pass is almost free); once ``(k + 1) * B`` fills the GPU, ``v1`` approaches the per-token
  cost of a plain decode step and speculation stops paying (vLLM #32374: "effective batch
  becomes batch x k");
* **the rest** of the step (schedule, sample, sync, kv, ...): ``O``, taken from the baseline
  decode steps of the same configuration (mean of ``duration_ns - forward_ns``): the model
  assumes speculation leaves it unchanged, as Amdahl's prediction does for the
  non-accelerable time.

The coefficients are ordinary least-squares fits over every decode step of one *family* (the
runs that share every label but ``k``, ``mode``, ``concurrency``, ``repeat`` and ``commit``:
one model, draft, workload, GPU), so the steps of all k and concurrencies pin one line:
``verify_ns`` on ``(k + 1) * batch`` (steps with a verify range), ``draft_ns`` on ``proposed``
(steps with proposed marks); the baseline's ``forward_ns`` on ``batch`` is fitted the same way,
for reference. Each fit says its number of steps and R^2 = 1 - SS_res / SS_tot.

Per speculative configuration (a cell: the runs that share every label but ``repeat`` and
``commit``, their steps pooled), with ``tau`` the measured tokens per step (the steps'
``tokens`` marks; else accepted + sequences, one bonus token per sequence):

* ``verify_to_forward_same_batch`` = sum of its verify times / sum of the baseline's mean
  forward time at each step's batch (over the steps whose batch the baseline has); above
  :data:`~specnsys.metrics.comparison.VERIFY_RATIO_WARNING` (1.3) verification is no longer
  almost free: a warning;
* predicted decode speedup = ``(sum dur_b / sum tokens_b) / (sum_i [D(n_i) + V(x_i) + O] /
  sum tokens_s)``: the baseline's measured time per token over its decode steps against the
  fitted cost of the speculative steps (their own batches and proposals) over the tokens they
  measured; by linearity this is the cost at the mean batch;
* measured decode speedup = the same with the speculative steps' measured durations; ``gap`` =
  measured / predicted - 1 (the part of the step the fitted costs do not explain: a
  non-linear verify cost, or a rest of the step that grew with speculation).

Decode steps only: prefill and the time between steps are outside this model (the sweep's
end-to-end speedup, from ``compare``, includes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import NotRequired, TypedDict

import polars as pl

from specnsys.metrics.comparison import VERIFY_RATIO_WARNING

__all__ = [
    "FAMILY_EXCLUDED", "CostCell", "CostModel", "Family", "Fit", "StepRun", "cost_model",
    "least_squares", "step_points",
]

#: Labels that vary inside one family (one fitted cost line).
FAMILY_EXCLUDED = ("k", "mode", "concurrency", "repeat", "commit")

Key = tuple[tuple[str, str], ...]


class Fit(TypedDict):
    """A least-squares line ``y = intercept + slope * x`` (:func:`least_squares`)."""

    slope: float
    intercept: float
    steps: int
    r2: float | None
    x: str
    y: str
    fitted: str


class Family(TypedDict):
    """One family's fitted step costs (one set of labels but k, mode, concurrency, ...)."""

    labels: dict[str, str]
    verify_fit: Fit | None
    draft_fit: Fit | None
    draft_ns_per_proposed: float | None
    draft_ns_per_proposed_steps: int
    baseline_forward_fit: Fit | None


class RestPerStep(TypedDict):
    """The step time outside verify and draft (spec) or forward (baseline), ns."""

    baseline: float
    spec: float


class CostCell(TypedDict):
    """One speculative configuration's measured and predicted step costs (:func:`_cell`)."""

    labels: dict[str, str]
    k: int | None
    steps: int
    baseline_steps: int
    batch_mean: float | None
    tokens_per_step: float | None
    tokens_source: str
    verify_ns_per_step: float | None
    verify_ns_per_position: float | None
    draft_ns_per_proposed: float | None
    verify_to_forward_same_batch: float | None
    verify_to_forward_steps: int
    verify_ratio_warning: bool | None
    predicted_decode_speedup: float | None
    measured_decode_speedup: float | None
    decode_gap: float | None
    predicted_from: str
    rest_ns_per_step: NotRequired[RestPerStep]


class CostModel(TypedDict, total=False):
    """:func:`cost_model`'s document; a dataset without steps has ``not_available`` only."""

    families: list[Family]
    cells: list[CostCell]
    verify_ratio_warning_above: float
    not_available: dict[str, str]


@dataclass(frozen=True)
class StepRun:
    """What the cost model needs to know of a run (the sweep builds these from ``runs``)."""

    run_id: str
    role: str
    """``spec`` or ``baseline`` (others are left out)."""
    k: int | None
    family: Key
    match: Key
    """The labels a speculative run shares with its baselines."""
    cell: Key


def least_squares(frame: pl.DataFrame, x: str, y: str) -> Fit | None:
    """The least-squares line ``y = intercept + slope * x`` over *frame*'s rows: slope,
    intercept, the number of steps and R^2 (None where every y is the same). None with fewer
    than two distinct x values (no line is determined)."""
    s = frame.select(
        pl.len().alias("n"),
        pl.col(x).cast(pl.Float64).mean().alias("mx"),
        pl.col(y).cast(pl.Float64).mean().alias("my"),
    ).row(0, named=True)
    if s["n"] < 2:
        return None
    dx = pl.col(x).cast(pl.Float64) - s["mx"]
    dy = pl.col(y).cast(pl.Float64) - s["my"]
    m = frame.select(
        (dx * dx).sum().alias("sxx"), (dx * dy).sum().alias("sxy"), (dy * dy).sum().alias("syy")
    ).row(0, named=True)
    if m["sxx"] <= 0:
        return None
    slope = m["sxy"] / m["sxx"]
    intercept = s["my"] - slope * s["mx"]
    residual = max(m["syy"] - slope * m["sxy"], 0.0)
    return {
        "slope": slope,
        "intercept": intercept,
        "steps": int(s["n"]),
        "r2": 1.0 - residual / m["syy"] if m["syy"] > 0 else None,
        "x": x,
        "y": y,
        "fitted": "least squares",
    }


def _runs_frame(runs: list[StepRun]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [r.run_id for r in runs],
            "role": [r.role for r in runs],
            "k": [r.k for r in runs],
            "family": [json.dumps(r.family) for r in runs],
            "match": [json.dumps(r.match) for r in runs],
            "cell": [json.dumps(r.cell) for r in runs],
        },
        schema={"run_id": pl.String, "role": pl.String, "k": pl.Int64, "family": pl.String,
                "match": pl.String, "cell": pl.String},
    )  # fmt: skip


def step_points(steps: pl.DataFrame, runs: list[StepRun]) -> pl.DataFrame:
    """The decode steps of *runs* with their run's role, k, family, match and cell, and
    ``positions`` = (k + 1) * batch and ``step_tokens`` (tokens marks, else accepted +
    sequences for a speculative step, batch for a baseline one; a float)."""
    frame = steps.join(
        _runs_frame([r for r in runs if r.role in ("spec", "baseline")]), on="run_id"
    )
    spec = pl.col("role") == "spec"
    return frame.with_columns(
        pl.when(spec).then((pl.col("k") + 1) * pl.col("batch")).alias("positions"),
        # as floats: a step's marks fit 64 bits, a sum over steps (or accepted + sequences)
        # may not, and an Int64 sum wraps silently (a hostile export's 2 x 2**62 tokens)
        pl.coalesce(
            pl.col("tokens"),
            pl.when(spec).then(pl.col("accepted").cast(pl.Float64) + pl.col("sequences"))
            .otherwise(pl.col("batch")),
        ).cast(pl.Float64).alias("step_tokens"),
    )


def _verify_steps(points: pl.DataFrame) -> pl.DataFrame:
    return points.filter(
        (pl.col("role") == "spec") & (pl.col("verify_ns") > 0) & pl.col("positions").is_not_null()
    )


def _draft_steps(points: pl.DataFrame) -> pl.DataFrame:
    return points.filter(
        (pl.col("role") == "spec") & (pl.col("proposed") > 0) & (pl.col("draft_ns") > 0)
    )


def _baseline_steps(points: pl.DataFrame) -> pl.DataFrame:
    return points.filter(
        (pl.col("role") == "baseline") & (pl.col("forward_ns") > 0) & pl.col("batch").is_not_null()
    )


def _at(fit: Fit, column: str) -> pl.Expr:
    intercept, slope = float(fit["intercept"]), float(fit["slope"])
    return pl.lit(intercept) + pl.lit(slope) * pl.col(column).cast(pl.Float64)


def cost_model(steps: pl.DataFrame, runs: list[StepRun]) -> CostModel:
    """The fitted costs per family and the per-cell comparison (see the module docs), as a
    JSON-able dict: ``families`` (fits), ``cells`` (one per speculative configuration) and
    ``not_available`` (why a family or cell has no number)."""
    points = step_points(steps, runs)
    families: list[Family] = []
    cells: list[CostCell] = []
    na: dict[str, str] = {}
    for family in sorted(set(points["family"].to_list())):
        own = points.filter(pl.col("family") == family)
        labels = dict(json.loads(family))
        where = _where(labels)
        verify = least_squares(_verify_steps(own), "positions", "verify_ns")
        draft = least_squares(_draft_steps(own), "proposed", "draft_ns")
        forward = least_squares(_baseline_steps(own), "batch", "forward_ns")
        drafts = _draft_steps(own)
        per_proposed = (
            float(drafts["draft_ns"].sum()) / _float_sum(drafts["proposed"])
            if drafts.height else None
        )  # fmt: skip
        if verify is None:
            na[f"verify fit ({where})"] = (
                "needs speculative steps with a verify range, k and a batch at two or more "
                "values of (k + 1) * batch"
            )
        if draft is None:
            na[f"draft fit ({where})"] = (
                "needs steps with draft ranges at two or more proposal counts"
            )
        families.append(
            {
                "labels": labels,
                "verify_fit": verify,
                "draft_fit": draft,
                "draft_ns_per_proposed": per_proposed,
                "draft_ns_per_proposed_steps": drafts.height,
                "baseline_forward_fit": forward,
            }
        )
        for cell in sorted(set(own.filter(pl.col("role") == "spec")["cell"].to_list())):
            cells.append(_cell(own, cell, verify, draft, na))
    return {
        "families": families,
        "cells": cells,
        "verify_ratio_warning_above": VERIFY_RATIO_WARNING,
        "not_available": na,
    }


def _cell(
    family_points: pl.DataFrame,
    cell: str,
    verify: Fit | None,
    draft: Fit | None,
    na: dict[str, str],
) -> CostCell:
    """One speculative configuration's measured and predicted step costs."""
    labels = dict(json.loads(cell))
    where = _where(labels)
    spec = family_points.filter((pl.col("cell") == cell) & (pl.col("role") == "spec"))
    match = spec["match"][0]
    base = _baseline_steps(family_points.filter(pl.col("match") == match))
    vsteps = _verify_steps(spec)
    dsteps = _draft_steps(spec)
    out: CostCell = {
        "labels": labels,
        "k": spec["k"][0],
        "steps": spec.height,
        "baseline_steps": base.height,
        "batch_mean": _mean(spec["batch"]),
        "tokens_per_step": _ratio(spec["step_tokens"].sum(), spec.height),
        "tokens_source": "tokens marks"
        if spec["tokens"].null_count() == 0
        else ("accepted + sequences where tokens marks are missing"),
        "verify_ns_per_step": _mean(vsteps["verify_ns"]) if vsteps.height else None,
        "verify_ns_per_position": _ratio(vsteps["verify_ns"].sum(), vsteps["positions"].sum()),
        "draft_ns_per_proposed": _ratio(dsteps["draft_ns"].sum(), _float_sum(dsteps["proposed"])),
        "verify_to_forward_same_batch": None,
        "verify_to_forward_steps": 0,
        "verify_ratio_warning": None,
        "predicted_decode_speedup": None,
        "measured_decode_speedup": None,
        "decode_gap": None,
        "predicted_from": "fitted verify and draft lines of the family, the measured tokens "
        "per step, the baseline's measured rest of the step",
    }
    if base.height == 0:
        na[f"baseline decode steps ({where})"] = (
            "no baseline run with the same labels but k/mode has decode steps with forward time"
        )
        return out
    _verify_to_forward(out, vsteps, base, where, na)
    base_per_token = _ratio(base["duration_ns"].sum(), base["step_tokens"].sum())
    spec_tokens = spec["step_tokens"].sum()
    measured = _ratio(spec["duration_ns"].sum(), spec_tokens)
    if base_per_token and measured:
        out["measured_decode_speedup"] = base_per_token / measured
    if verify is None or draft is None or not base_per_token or not spec_tokens:
        na[f"predicted_decode_speedup ({where})"] = (
            "needs the family's verify and draft fits and token counts on both sides"
        )
        return out
    rest = float(base.select((pl.col("duration_ns") - pl.col("forward_ns")).mean()).item())
    predicted_ns = (
        spec.select(
            (_at(verify, "positions").fill_null(0.0) + _at(draft, "proposed").fill_null(0.0)).sum()
        ).item()
        + rest * spec.height
    )
    predicted = base_per_token / (predicted_ns / float(spec_tokens))
    out["rest_ns_per_step"] = {
        "baseline": rest,
        "spec": float(
            spec.select(
                (pl.col("duration_ns") - pl.col("verify_ns") - pl.col("draft_ns")).mean()
            ).item()
        ),
    }
    out["predicted_decode_speedup"] = predicted
    if (measured_speedup := out["measured_decode_speedup"]) is not None:
        out["decode_gap"] = measured_speedup / predicted - 1.0
    return out


def _verify_to_forward(
    out: CostCell, vsteps: pl.DataFrame, base: pl.DataFrame, where: str, na: dict[str, str]
) -> None:
    """Verify over baseline forward at the same batch size into *out* (with the 1.3
    warning), or why not into *na*."""
    forward_at = base.group_by("batch").agg(pl.col("forward_ns").mean().alias("fwd"))
    same = vsteps.join(forward_at, on="batch")
    if same.height == 0:
        na[f"verify_to_forward_same_batch ({where})"] = (
            "no speculative step ran at a batch size the baseline's steps have"
        )
        return
    ratio = float(same["verify_ns"].sum()) / float(same["fwd"].sum())
    out["verify_to_forward_same_batch"] = ratio
    out["verify_to_forward_steps"] = same.height
    out["verify_ratio_warning"] = ratio > VERIFY_RATIO_WARNING


def _ratio(num: float | Decimal | None, den: float | Decimal | None) -> float | None:
    return float(num) / float(den) if num is not None and den else None


def _float_sum(values: pl.Series) -> float:
    """The sum of mark counts over steps, in floats: each fits 64 bits, their sum may not."""
    return float(values.cast(pl.Float64).sum())


def _mean(values: pl.Series) -> float | None:
    """The mean of a numeric column (None when it has no value)."""
    mean = values.mean()
    return mean if isinstance(mean, (int, float)) else None


def _where(labels: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in labels.items()) or "all runs"
