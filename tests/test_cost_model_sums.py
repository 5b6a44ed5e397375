"""The cost model's sums over decode steps, on values a hostile export can give: each step's
mark sum fits 64 bits (the step table makes it null otherwise), their sum over steps may not,
and Polars's Int64 sums wrap silently (two steps of 2**62 tokens summed to -2**63)."""

from __future__ import annotations

import polars as pl
import pytest

from specnsys.metrics.steps import STEP_COLUMNS
from specnsys.runset.cost_model import StepRun, cost_model

BIG = 2**62


def _steps(run_id: str, rows: list[dict[str, int | None]]) -> pl.DataFrame:
    base: dict[str, int | None] = {c: 0 for c in STEP_COLUMNS}
    base |= {"proposed": None, "accepted": None, "tokens": None}  # no marks unless given
    frame = pl.DataFrame(
        [{**base, "step": i, **row} for i, row in enumerate(rows)],
        schema=STEP_COLUMNS,
    )
    return frame.with_columns(pl.lit(run_id).alias("run_id"))


def test_step_sums_past_64_bits_neither_wrap_nor_fail() -> None:
    spec = _steps("spec", [
        {"duration_ns": 1000, "verify_ns": 400, "draft_ns": 300, "sequences": 1, "batch": 1,
         "proposed": BIG, "accepted": BIG, "tokens": BIG},
        {"duration_ns": 1000, "verify_ns": 500, "draft_ns": 300, "sequences": 1, "batch": 1,
         "proposed": BIG, "accepted": BIG - 1, "tokens": None},
    ])  # fmt: skip
    base = _steps("base", [
        {"duration_ns": 900, "forward_ns": 800, "batch": 1},
        {"duration_ns": 900, "forward_ns": 800, "batch": 1},
    ])  # fmt: skip
    runs = [
        StepRun("spec", "spec", 2, (("model", "m"),), (("model", "m"),), (("k", "2"),)),
        StepRun("base", "baseline", None, (("model", "m"),), (("model", "m"),), (("k", "1"),)),
    ]
    model = cost_model(pl.concat([spec, base]), runs)
    (cell,) = [c for c in model["cells"] if c["steps"]]
    # step 2's tokens: accepted + sequences = 2**62 (no tokens mark)
    assert cell["tokens_per_step"] == pytest.approx(BIG)
    assert cell["draft_ns_per_proposed"] == pytest.approx(600 / (2 * BIG))
    measured = cell["measured_decode_speedup"]
    assert measured is not None and measured > 0
    assert measured == pytest.approx((1800 / 2) / (2000 / (2 * BIG)))
    (family,) = model["families"]
    assert family["draft_ns_per_proposed"] == pytest.approx(600 / (2 * BIG))
