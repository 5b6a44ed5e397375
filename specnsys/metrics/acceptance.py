"""Acceptance statistics from the ``proposed``/``accepted`` marks (docs/design.md#metrics).

One mark pair per sequence per speculative step: ``proposed`` = k offered drafts, ``accepted``
= accepted drafts (0..k, the bonus/correction token not counted). The pair is emitted
back to back on one thread, so the i-th ``proposed`` and the i-th ``accepted`` of a thread
(in time order) belong together.

Estimators (named, because engines disagree, see the reference notes section 1.3):

* ``mean_accepted`` -- accepted drafts per sequence-step (gpt-fast's "Mean Accepted");
* ``tokens_per_step`` -- ``mean_accepted + 1``: tokens a sequence-step yields, bonus
  included (Spec-Bench's "mean accepted tokens"), before truncation at a request's end;
* ``by_position[i-1]`` -- per-position survival ``a_i``: fraction of sequence-steps that
  proposed at least i drafts whose i-th draft was accepted;
* ``alpha`` -- pooled survival ratio ``sum(accepted) / sum(min(accepted + 1, proposed))``,
  i.e. ``(a_1 + .. + a_k) / (a_0 + .. + a_{k-1})`` with ``a_0 = 1`` for a fixed k: accepted
  drafts over drafts that were actually judged. It is the maximum-likelihood alpha of
  Leviathan's i.i.d. model (a geometric truncated at k), unbiased where accepted/proposed is
  biased low (drafts after a rejection were never judged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import polars as pl

from specnsys.metrics.amdahl import K_LIMIT, tau
from specnsys.metrics.events import Scope, marks_relation
from specnsys.vocabulary import ACCEPTANCE_MARKS, PROPOSED_MARK

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["Acceptance", "acceptance_from_pairs", "acceptance_stats"]


class Acceptance(TypedDict):
    """The acceptance statistics of a speculative run (``Analysis.acceptance``; the estimators
    of the module docs), typed so that a reader of ``alpha`` or ``k`` gets a number."""

    mean_accepted: float
    by_position: list[float]
    alpha: float
    tokens_per_step: float
    k: int
    k_values: list[int]
    sequence_steps: int
    accepted_total: int
    proposed_total: int
    acceptance_rate: float
    accepted_histogram: list[int]
    alpha_by_position: list[float | None]
    expected_tokens_per_step: float
    invalid_pairs: int
    steps_without_drafts: int


def _pairs(trace: Trace, scope: Scope) -> tuple[pl.DataFrame, int, int]:
    """(proposed, accepted) pairs, plus the counts of proposed and accepted marks.

    The marks come as a flag and a payload, not their names, and are ordered in Polars, which
    was faster than :func:`~specnsys.metrics.events.marks` (names as strings, ordered in SQL;
    docs/performance.md#attribution-and-metrics)."""
    columns = (
        f"id, start AS t, global_tid AS gtid, text = '{PROPOSED_MARK}' AS is_proposed, "
        "payload_int AS value"
    )
    m = (
        marks_relation(trace, scope, ACCEPTANCE_MARKS, columns)
        .pl()
        .sort("t", "id")  # time order, then emission order on one thread
        .with_columns(pl.int_range(pl.len()).over("gtid", "is_proposed").alias("rank"))
    )
    proposed = m.filter(pl.col("is_proposed")).select(
        "gtid", "rank", pl.col("value").alias("proposed")
    )
    accepted = m.filter(~pl.col("is_proposed")).select(
        "gtid", "rank", pl.col("value").alias("accepted")
    )
    pairs = proposed.join(accepted, on=["gtid", "rank"], how="inner")
    return pairs.select("proposed", "accepted"), proposed.height, accepted.height


def acceptance_from_pairs(pairs: pl.DataFrame) -> Acceptance | None:
    """Statistics of a frame with integer columns ``proposed`` and ``accepted``.

    Pairs with ``proposed`` outside ``0..MAX_PROPOSED`` or ``accepted`` outside
    ``0..proposed`` are not counted (their number is ``invalid_pairs``); a ``0/0`` pair is a
    sequence-step that proposed nothing (prompt lookup without a match: it still yields the
    target's token), counted in the means and in ``steps_without_drafts``, never in a
    position. None without a pair that proposed a draft.
    """
    valid = pairs.filter(
        (pl.col("proposed") >= 0)
        & (pl.col("proposed") <= MAX_PROPOSED)
        & (pl.col("accepted") >= 0)
        & (pl.col("accepted") <= pl.col("proposed"))
    )
    steps = valid.height
    drafting = valid.filter(pl.col("proposed") >= 1)
    if drafting.height == 0:
        return None
    k_max = int(drafting["proposed"].max())  # type: ignore[arg-type]
    k_values = sorted(int(v) for v in drafting["proposed"].unique())
    # Per position i: the pairs that proposed at least i drafts (reached) and those whose
    # i-th was accepted (kept; accepted <= proposed, so they reached it), from the counts of
    # each value cumulated from the top: linear in the pairs and k, not their product.
    reached, kept = (
        _at_least(valid[column], k_max) for column in ("proposed", "accepted")
    )
    by_position = [kept[i] / reached[i] for i in range(1, k_max + 1)]
    histogram = (
        valid.group_by("accepted")
        .len()
        .join(pl.DataFrame({"accepted": list(range(k_max + 1))}), on="accepted", how="right")
        .sort("accepted")["len"]
        .fill_null(0)
        .to_list()
    )
    total_accepted = int(valid["accepted"].sum())
    judged = int(
        valid.select(pl.min_horizontal(pl.col("accepted") + 1, pl.col("proposed")).sum()).item()
    )
    alpha = total_accepted / judged
    mean_accepted = total_accepted / steps
    k = k_values[0] if len(k_values) == 1 else k_max
    previous = [1.0, *by_position[:-1]]
    return {
        "mean_accepted": mean_accepted,
        "by_position": by_position,
        "alpha": alpha,
        "tokens_per_step": mean_accepted + 1.0,
        "k": k,
        "k_values": k_values,
        "sequence_steps": steps,
        "accepted_total": total_accepted,
        "proposed_total": int(valid["proposed"].sum()),
        "acceptance_rate": total_accepted / int(valid["proposed"].sum()),
        "accepted_histogram": [int(v) for v in histogram],
        "alpha_by_position": [
            (cur / prev if prev > 0 else None)
            for cur, prev in zip(by_position, previous, strict=True)
        ],
        "expected_tokens_per_step": tau(alpha, k),
        "invalid_pairs": pairs.height - steps,
        "steps_without_drafts": steps - drafting.height,
    }


#: The most drafts one pair may propose, the k the formulas take (:data:`~specnsys.metrics.
#: amdahl.K_LIMIT`); a pair past it is invalid. Real drafters propose tens (trees of EAGLE or
#: Medusa, prompt lookup); a hostile export's ``proposed`` of 10**9 made the analysis build a
#: list of that length (a MemoryError under ``ulimit -v``).
MAX_PROPOSED = K_LIMIT


def _at_least(values: pl.Series, top: int) -> list[int]:
    """``[n(v >= 0), n(v >= 1), .., n(v >= top)]`` of *values* (integers in ``0..top``)."""
    counts = values.value_counts(name="n").filter(pl.col(values.name) <= top)
    per = [0] * (top + 2)
    for v, n in counts.iter_rows():
        per[int(v)] += int(n)
    out = [0] * (top + 1)
    running = 0
    for i in range(top, -1, -1):
        running += per[i]
        out[i] = running
    return out


def acceptance_stats(trace: Trace, scope: Scope) -> tuple[Acceptance | None, str | None]:
    """Acceptance statistics of the window, or (None, reason) when there are none.

    A warning reason is also returned (second item) when marks do not pair up.
    """
    pairs, n_proposed, n_accepted = _pairs(trace, scope)
    stats = acceptance_from_pairs(pairs)
    note = None
    if n_proposed != n_accepted:
        note = (
            f"{n_proposed} proposed and {n_accepted} accepted marks do not pair up; "
            f"{pairs.height} pairs used"
        )
    if stats is not None and stats["invalid_pairs"]:
        extra = (
            f"{stats['invalid_pairs']} mark pairs with accepted outside 0..proposed or "
            f"proposed above {MAX_PROPOSED} ignored"
        )
        note = extra if note is None else f"{note}; {extra}"
    return stats, note
