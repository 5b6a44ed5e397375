"""What the nesting of a thread's phase ranges says (docs/design.md#nesting-by-role).

:func:`~specnsys.attribution.phase_map.phase_ranges_sql` gives every phase range the phase its
nesting makes it (a forward inside a prefill is prefill work, anything inside a draft is draft
work). This module reads the same frame once more for what the metrics and the structural
checks need and the phase times cannot show:

* how many draft ranges a step really ran, at the finest granularity annotated (the *leaves*:
  draft ranges with no draft range inside), so that one draft forward is measured whether the
  loop hooks each draft forward, each draft step, or both nested;
* how many ranges took another phase from their nesting (forwards run by a prefill, a draft
  model's own sampling), so the output can say so;
* the structural errors the roles cannot resolve: a ``verify`` inside a ``draft`` (the wrong
  model hooked), a ``draft`` inside a ``verify``, a non-accelerable phase inside a target
  forward or verify (its time leaves the accelerable part), and decode steps that hold one
  phase only (nothing separates the step's sampling or cache work from its forward).

All of it is Polars over the driver thread's ranges that start in the window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import polars as pl

from specnsys.vocabulary import ACCELERABLE, DRAFT_ROLE, PHASES, STEP_PHASE

__all__ = ["NESTING_KEYS", "NestingFacts", "nesting_facts"]


class NestingFacts(TypedDict):
    """The nesting facts of :func:`nesting_facts` (keys described there): the structural
    checks and the draft-forward count read them by name, so each key has its type."""

    draft_ranges: int
    draft_leaves: int
    draft_leaf_ns: int
    draft_nested: bool
    reassigned: dict[str, int]
    verify_in_draft: int
    draft_in_verify: int
    non_accelerable_in_accelerable: dict[str, int]
    decode_children: list[str]

#: The keys of :func:`nesting_facts`'s dict (what a breakdown keeps as ``nesting``).
NESTING_KEYS = (
    "draft_ranges",
    "draft_leaves",
    "draft_leaf_ns",
    "draft_nested",
    "reassigned",
    "verify_in_draft",
    "draft_in_verify",
    "non_accelerable_in_accelerable",
    "decode_children",
)

#: Target forwards: the accelerable phases a non-accelerable range should not sit in.
_TARGET_FORWARDS = ("forward", "verify")
_NON_ACCELERABLE = tuple(p for p in PHASES if p not in ACCELERABLE and p != "request")


def _enclosed_by(frame: pl.DataFrame, names: Sequence[str], column: str = "named") -> pl.Series:
    """For each range of *frame* (one thread, with ``srn``/``ern``), the *column* value of the
    outermost range named one of *names* (by ``named``) that strictly contains it, else null."""
    outer = (
        frame.filter(pl.col("named").is_in(list(names)))
        .sort("srn")
        .with_columns(pl.col("ern").cum_max().shift(1).alias("_before"))
        .filter(pl.col("_before").is_null() | (pl.col("_before") < pl.col("srn")))
        .select(pl.col("srn").alias("_o_srn"), pl.col("ern").alias("_o_ern"),
                pl.col(column).alias("_o_value"))
    )  # fmt: skip
    found = (
        frame.with_row_index("_row")
        .sort("srn")
        .join_asof(outer, left_on="srn", right_on="_o_srn", strategy="backward",
                   allow_exact_matches=False)
        .with_columns(
            pl.when(pl.col("_o_ern") > pl.col("ern")).then(pl.col("_o_value")).alias("_in")
        )
        .sort("_row")
    )  # fmt: skip
    return found["_in"]


def _counts(frame: pl.DataFrame, by: str) -> dict[str, int]:
    return {str(k): int(n) for k, n in frame.group_by(by).len().sort(by).iter_rows()}


def nesting_facts(ranges: pl.DataFrame, gtid: int | None, ws: int, we: int) -> NestingFacts:
    """The nesting facts (module docs) of thread *gtid*'s phase *ranges* (the frame of
    :func:`~specnsys.attribution.phase_map.phase_ranges`) starting in ``[ws, we)``:

    * ``draft_ranges`` -- counted ``draft`` ranges (nested draft ranges count once);
    * ``draft_leaves`` -- ranges named ``draft`` that are draft work and hold no range named
      ``draft`` (a draft forward when the loop hooks them);
    * ``draft_leaf_ns`` -- the leaves' summed durations (unclosed ones to the window end);
    * ``draft_nested`` -- whether some draft range holds another (leaves finer than steps);
    * ``reassigned`` -- ``{"named->phase": n}``: ranges whose nesting gave them another phase;
    * ``verify_in_draft`` / ``draft_in_verify`` -- structural errors, counts;
    * ``non_accelerable_in_accelerable`` -- ``{phase: n}`` of non-accelerable ranges inside a
      ``forward`` or ``verify`` (outside any draft);
    * ``decode_children`` -- the phases of the ranges inside ``decode`` ranges (sorted).
    """
    empty: NestingFacts = {
        "draft_ranges": 0,
        "draft_leaves": 0,
        "draft_leaf_ns": 0,
        "draft_nested": False,
        "reassigned": {},
        "verify_in_draft": 0,
        "draft_in_verify": 0,
        "non_accelerable_in_accelerable": {},
        "decode_children": [],
    }
    if gtid is None:
        return empty
    mine = ranges.filter(
        (pl.col("gtid") == gtid) & (pl.col("s") >= ws) & (pl.col("s") < we)
    ).select(
        pl.col("named").cast(pl.String), pl.col("phase").cast(pl.String), "role", "srn", "ern",
        "counted", "leaf", (pl.min_horizontal(pl.col("e").fill_null(we), pl.lit(we)) - pl.col("s"))
        .alias("ns"),
    )  # fmt: skip
    if mine.height == 0:
        return empty
    is_draft_work = pl.col("phase") == DRAFT_ROLE
    named_draft = mine.filter((pl.col("named") == DRAFT_ROLE) & is_draft_work)
    moved = mine.filter(pl.col("named") != pl.col("phase")).select(
        (pl.col("named") + "->" + pl.col("phase")).alias("move")
    )
    in_target = _enclosed_by(mine, _TARGET_FORWARDS)
    in_decode = _enclosed_by(mine, (STEP_PHASE,))
    flagged = mine.with_columns(in_target.alias("in_target"), in_decode.alias("in_decode"))
    verify_in_draft = flagged.filter((pl.col("named") == "verify") & (pl.col("role") == DRAFT_ROLE))
    draft_in_verify = flagged.filter(
        (pl.col("named") == DRAFT_ROLE) & (pl.col("in_target") == "verify")
    )
    misplaced = flagged.filter(
        pl.col("named").is_in(list(_NON_ACCELERABLE))
        & pl.col("in_target").is_not_null()
        & ~is_draft_work
    )
    children = flagged.filter(pl.col("in_decode").is_not_null())["phase"].unique().sort()
    return {
        "draft_ranges": int(mine.filter(is_draft_work & pl.col("counted")).height),
        "draft_leaves": int(named_draft.filter(pl.col("leaf")).height),
        "draft_leaf_ns": int(named_draft.filter(pl.col("leaf"))["ns"].sum()),
        "draft_nested": bool(named_draft.filter(~pl.col("leaf")).height > 0),
        "reassigned": _counts(moved, "move") if moved.height else {},
        "verify_in_draft": int(verify_in_draft.height),
        "draft_in_verify": int(draft_in_verify.height),
        "non_accelerable_in_accelerable": _counts(misplaced, "named") if misplaced.height else {},
        "decode_children": children.to_list(),
    }
