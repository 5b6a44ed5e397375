"""Draft forwards per step and the structural checks of an annotated loop.

Two things the phase times alone get wrong when a loop is annotated in a style specnsys did
not expect (docs/design.md#nesting-by-role):

* **One draft forward.** The draft cost ratio c compares one draft forward with one verify
  forward. A loop may hook each draft forward, each draft step (k forwards inside), or both
  nested; :func:`draft_forwards` counts the forwards a step really ran from the finest
  granularity the trace holds, and says which it used: the innermost ``draft`` ranges when
  draft ranges nest (``nested_draft_ranges``), the draft ranges themselves when there are at
  least 1.5 per speculative step (``decode`` ranges, else ``verify``:
  ``repeated_draft_ranges``), else the mean ``proposed`` mark per sequence-step times the
  draft ranges (``proposed_marks``).
* **Structure.** :func:`structural_warnings` turns the nesting facts of the breakdown and the
  counts of the analysis into one warning line each: a speculative run without ``verify`` or
  without ``draft``, decode steps the token or acceptance marks cannot account for, a
  ``verify`` inside a ``draft`` (or the reverse), a non-accelerable phase inside a target
  forward, and decode steps that hold one phase only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specnsys.attribution.nesting import NestingFacts
    from specnsys.metrics.acceptance import Acceptance

__all__ = [
    "DRAFT_FORWARD_SOURCES",
    "STRUCTURE_PREFIX",
    "DraftForwards",
    "draft_forwards",
    "structural_warnings",
]

STRUCTURE_PREFIX = "annotation structure: "
"""How every structural warning starts (what a script or a test looks for)."""

#: Where the draft forwards per step came from (``draft_forwards_source``), in the order tried.
DRAFT_FORWARD_SOURCES = {
    "nested_draft_ranges": "the innermost draft ranges (draft ranges nest)",
    "repeated_draft_ranges": "the draft ranges (1.5 or more per speculative step)",
    "proposed_marks": "the proposed marks (mean drafts per sequence-step) per draft range",
}

#: Draft ranges per speculative step from which each draft range is one draft forward (a
#: draft hooked per step has one per step; a first step named prefill adds a few).
REPEATED = 1.5

#: Decode steps may exceed what the marks imply by this much before a warning.
STEP_TOLERANCE = 0.10


@dataclass(frozen=True)
class DraftForwards:
    """The draft forwards of a speculative run: ``total`` in the window, ``per_step`` (per
    speculative step: a verify range, else a draft range), and ``source`` (a key of
    :data:`DRAFT_FORWARD_SOURCES`); all None with ``reason`` when the trace cannot tell."""

    total: float | None
    per_step: float | None
    source: str | None
    reason: str | None = None
    forward_ns: float | None = None
    """One draft forward when the trace times it apart (the innermost ranges of nested
    draft ranges: their mean duration, without the step's own work and the outer hook);
    else None, and one draft forward is the draft time over ``total``."""


def draft_forwards(
    counts: dict[str, int], nesting: NestingFacts | None, acceptance: Acceptance | None
) -> DraftForwards:
    """The draft forwards of a run with the range *counts* (counted ranges per phase),
    *nesting* (:func:`specnsys.attribution.nesting.nesting_facts`) and *acceptance*
    statistics (module docs)."""
    drafts = int(counts.get("draft", 0))
    steps = int(counts.get("decode", 0)) or int(counts.get("verify", 0)) or drafts
    if drafts <= 0:
        return DraftForwards(None, None, None, "the run has no draft ranges")
    if nesting and nesting.get("draft_nested") and int(nesting.get("draft_leaves", 0)) > 0:
        total = float(nesting["draft_leaves"])
        forward = float(nesting.get("draft_leaf_ns", 0)) / total or None
        return DraftForwards(total, total / steps, "nested_draft_ranges", forward_ns=forward)
    if drafts >= REPEATED * steps:
        return DraftForwards(float(drafts), drafts / steps, "repeated_draft_ranges")
    if acceptance is not None and acceptance.get("sequence_steps"):
        per_range = float(acceptance["proposed_total"]) / float(acceptance["sequence_steps"])
        total = drafts * per_range
        return DraftForwards(total, total / steps, "proposed_marks")
    return DraftForwards(
        None,
        None,
        None,
        "one draft range per step and no proposed marks: the draft forwards a step ran are "
        "not in the trace",
    )


def _phase_list(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _step_checks(
    steps: int, tokens: int | None, acceptance: Acceptance | None, step_phase: str
) -> list[str]:
    """Decode steps that the token count or the acceptance marks cannot account for."""
    out: list[str] = []
    if tokens and steps > tokens * (1 + STEP_TOLERANCE):
        out.append(
            f"{steps} decode steps ({step_phase} ranges) for {tokens} output tokens: a step "
            f"emits at least one token per sequence, so {step_phase} is probably hooked on a "
            "call made several times per step (per-step times are too small)"
        )
    seq_steps = int(acceptance["sequence_steps"]) if acceptance else 0
    if seq_steps and steps > seq_steps * (1 + STEP_TOLERANCE):
        out.append(
            f"{steps} decode steps ({step_phase} ranges) but {seq_steps} sequence-steps of "
            "proposed/accepted marks: every speculative step marks each of its sequences once, "
            "so the step ranges and the marks disagree"
        )
    return out


def structural_warnings(
    mode: str,
    counts: dict[str, int],
    nesting: NestingFacts | None,
    *,
    steps: int,
    step_phase: str,
    tokens: int | None,
    acceptance: Acceptance | None,
) -> list[str]:
    """One warning line per structural problem of an annotated run (module docs); none for a
    generic run, whose phases are not the vocabulary's."""
    if mode not in ("spec", "baseline"):
        return []
    out: list[str] = []
    if mode == "spec" and not counts.get("verify"):
        out.append(
            f"a speculative run without verify ranges: its target forwards are its "
            f"{counts['forward']:,} forward ranges (accelerable, beside draft), so r and the "
            "predicted speedup hold only if those are the verify passes; c and verify/forward "
            "are not available"
            if counts.get("forward")
            else "a speculative run without verify ranges: the target's forwards over the "
            "drafts are not annotated, so their time is counted as other phases, and r and "
            "the predicted speedup leave them out"
        )
    if mode == "spec" and not counts.get("draft"):
        out.append(
            "a speculative run without draft ranges: the draft's work is not annotated, so "
            "its time is counted as non-accelerable, and r and the prediction credit verify "
            "alone"
        )
    out.extend(_step_checks(steps, tokens, acceptance, step_phase))
    if nesting is not None:
        out.extend(_nesting_checks(nesting, counts))
    return [STRUCTURE_PREFIX + line for line in out]


def _nesting_checks(nest: NestingFacts, counts: dict[str, int]) -> list[str]:
    """The structural errors the nesting facts show (those of an older breakdown without
    them cannot be checked)."""
    out: list[str] = []
    if nest.get("verify_in_draft"):
        out.append(
            f"{nest['verify_in_draft']} verify ranges inside draft ranges "
            "(the draft model's forward hooked as verify?): their time is counted as draft"
        )
    if nest.get("draft_in_verify"):
        out.append(
            f"{nest['draft_in_verify']} draft ranges inside verify ranges "
            "(the target's forward hooked as draft?): a verify pass does not run the draft"
        )
    misplaced = nest.get("non_accelerable_in_accelerable") or {}
    if misplaced:
        out.append(
            f"non-accelerable phases inside a target forward or verify ({_phase_list(misplaced)}"
            " ranges): their time is counted as those phases, not as the forward's"
        )
    children = nest.get("decode_children")
    if counts.get("decode") and children is not None and len(children) <= 1:
        inner, owners = (
            (f"only {children[0]}", f"decode's or {children[0]}'s") if children
            else ("no phase", "decode's")
        )  # fmt: skip
        out.append(
            f"every decode step holds {inner}: the step's sampling, KV-cache and sync work are "
            f"not annotated apart (their time counts as {owners})"
        )
    return out
