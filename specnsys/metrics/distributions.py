"""Per-step distributions: the tails a median hides (TPOT p99 is what SLOs are written in).

Over the decode steps of the window (:func:`specnsys.metrics.steps.step_table`), per phase,
the time the phase took in each step (its ranges starting in the step, clipped to its end;
a step without the phase counts 0 there, so every phase has one value per step), and per
step the time per output token a sequence saw: ``duration_ns * batch / tokens`` (the step's
length over the tokens each of its sequences gained). Each is summarised as count, mean,
min, p50, p90, p99 and max, the quantiles interpolated linearly between order statistics
(DuckDB's ``quantile_cont``, NumPy's default).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from specnsys.results import NotAvailable, to_dict

__all__ = ["Spread", "StepDistributions", "spread", "step_distributions"]

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Spread:
    """count, mean, min, p50, p90, p99, max of one quantity (ns)."""

    count: int
    mean: float | None
    min: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


def spread(values: pl.Series) -> Spread:
    """The :class:`Spread` of *values* (nulls left out; all None but count for none)."""
    v = values.drop_nulls().cast(pl.Float64)
    if v.len() == 0:
        return Spread(0, None, None, None, None, None, None)
    q = [float(v.quantile(x, interpolation="linear")) for x in QUANTILES]  # type: ignore[arg-type]
    return Spread(
        int(v.len()), float(v.mean()), float(v.min()), q[0], q[1], q[2], float(v.max())  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class StepDistributions:
    """The per-step distributions of one run (module docs); ``of`` says over what."""

    of: str
    steps: int
    step_ns: Spread
    ns_per_token: Spread | NotAvailable
    phases: dict[str, Spread]


def step_distributions(steps: pl.DataFrame, parts: pl.DataFrame) -> dict[str, object] | None:
    """The JSON of the :class:`StepDistributions` of *steps* (a step table) and *parts*
    (:func:`~specnsys.metrics.steps.step_phase_times` of the same steps); None without
    steps."""
    if steps.height == 0:
        return None
    per_step = steps.select("step", "duration_ns", "batch", "tokens")
    phases = {}
    for name in sorted(parts["phase"].unique().to_list()):
        mine = parts.filter(pl.col("phase") == name).select("step", "ns")
        values = per_step.join(mine, on="step", how="left")["ns"].fill_null(0)
        phases[name] = spread(values)
    usable = per_step.filter(
        pl.col("tokens").is_not_null() & (pl.col("tokens") > 0) & pl.col("batch").is_not_null()
    )
    per_token: Spread | NotAvailable = (
        spread(usable.select(pl.col("duration_ns") * pl.col("batch") / pl.col("tokens")).to_series())
        if usable.height
        else NotAvailable("needs tokens marks and the batch (acceptance marks or requests) per step")
    )
    result = StepDistributions(
        of="decode steps of the window; a phase absent from a step counts 0 there",
        steps=per_step.height,
        step_ns=spread(per_step["duration_ns"]),
        ns_per_token=per_token,
        phases=phases,
    )
    return to_dict(result)
