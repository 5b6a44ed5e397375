"""Output tokens from whatever the trace holds, and which source gave them.

Per-token time, r and the measured speedup all divide by the output tokens ``T``. A trace may
state them outright or only imply them; the sources, tried in this order (the first that
answers is used and named in ``tokens_source``):

1. ``tokens_marks`` -- the ``tokens`` marks (one per step for the whole batch, and one per
   prefill): what the workload says it emitted, cut at each request's length.
2. ``output_tokens_marks`` -- every request's ``output_tokens`` mark (its output length),
   summed. Exact as well, and so tried before the counts derived below: those cannot see
   where a request's last step was cut short.
3. ``acceptance_marks`` -- a speculative run's ``accepted`` marks (one per sequence per step,
   DESIGN.md section 3): each sequence-step yields its accepted drafts plus the bonus or
   correction token, ``accepted + 1``; plus one first token per request (from its prefill).
   A request's last step may be cut at its length, which the marks do not say: the count is an
   upper bound, over by at most k per request (what the workload's ``tokens`` marks count as
   ``min(accepted + 1, remaining)``).
4. ``forward_steps`` -- a baseline run: each ``forward`` range yields one token per request
   open across it (``request`` ranges), plus one first token per request.
5. ``given`` -- a count the user supplies (``--tokens N``), which overrides all of the above;
   applied by :meth:`specnsys.metrics.Analysis.with_tokens`, outside the cached analysis.

The first token of a request comes from its prefill: in a trace with ``prefill`` ranges, one
per request (however the prefill was split or batched), or one per ``prefill`` range when the
trace has no request ranges; a trace without prefill ranges shows no first tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.phase_map import mapped_nvtx_sql, phase_ranges_sql
from specnsys.attribution.rules import REQUEST
from specnsys.metrics.events import Scope, marks_relation
from specnsys.vocabulary import BASELINE_ACCELERABLE, TOKENS_MARK

if TYPE_CHECKING:
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace
    from specnsys.metrics.acceptance import Acceptance

__all__ = [
    "GIVEN",
    "NOTE_PREFIX",
    "SOURCES",
    "TokenCount",
    "count_tokens",
    "first_tokens",
    "source_words",
    "from_acceptance",
    "from_forward_steps",
    "from_output_tokens",
    "from_tokens_marks",
    "token_counts",
    "token_counts_of",
]

#: Every source, in the order they are tried, with the words the text outputs use for it.
SOURCES: dict[str, str] = {
    "tokens_marks": "tokens marks",
    "output_tokens_marks": "output_tokens marks",
    "acceptance_marks": "derived from acceptance marks",
    "forward_steps": "derived from forward steps",
    "given": "given",
}

GIVEN = "given"
"""The source of a count the user supplied."""

NOTE_PREFIX = "no tokens marks: "
"""How every note about a count from another source begins (a given count drops them)."""

PREFILL_PHASE = "prefill"


def source_words(source: str | None) -> str:
    """The words the text outputs use for *source* (``tokens_source``): "not counted" for
    None, the key itself for a source this version does not know."""
    return "not counted" if source is None else SOURCES.get(source, source)


@dataclass(frozen=True)
class TokenCount:
    """Output tokens of one trace, the source that gave them (a key of :data:`SOURCES`), a
    warning about the count (derived counts say how) and, when no source answers, why."""

    tokens: int | None
    source: str | None
    note: str | None = None
    reason: str | None = None


def from_tokens_marks(trace: Trace, scope: Scope) -> int | None:
    """The sum of the ``tokens`` marks in the window; None when there is none."""
    ((n, total),) = marks_relation(
        trace, scope, (TOKENS_MARK,), "count(*) AS n, sum(payload_int) AS total"
    ).fetchall()
    return int(total) if n else None


def from_output_tokens(lat: pl.DataFrame) -> int | None:
    """The sum of the requests' ``output_tokens`` marks, when every request has one."""
    if lat.height and lat["output_tokens"].null_count() == 0:
        # each payload fits 64 bits, their sum may not: summed in 128 (Polars's Int64 wraps)
        return int(lat["output_tokens"].cast(pl.Int128).sum())
    return None


def first_tokens(lat: pl.DataFrame, range_counts: dict[str, int]) -> int:
    """First tokens, one per prefilled request: the requests, else the ``prefill`` ranges; 0
    when the trace has no prefill ranges (nothing shows where a first token came from)."""
    prefills = int(range_counts.get(PREFILL_PHASE, 0))
    return (lat.height or prefills) if prefills else 0


def from_acceptance(acceptance: Acceptance | None, first: int) -> int | None:
    """``sum(accepted + 1)`` over the sequence-steps plus *first* (first tokens); None without
    acceptance statistics (:func:`specnsys.metrics.acceptance.acceptance_stats`)."""
    if acceptance is None or not acceptance.get("sequence_steps"):
        return None
    return int(acceptance["accepted_total"]) + int(acceptance["sequence_steps"]) + first


def from_forward_steps(trace: Trace, scope: Scope, first: int) -> int | None:
    """One token per request open across each ``forward`` range of the driver thread that
    starts in the window, plus *first*; None without forward ranges or request ranges.

    A request is open across a forward when its range started at or before the forward's
    start and ends at or after the forward's end (or never ends): a request admitted in this
    iteration is in the batch, one that emitted its last token in the previous step is not.
    """
    rows = trace.connection.execute(  # all: DuckDB refuses
        forward_steps_sql(scope.rules), scope.params()
    ).fetchall()
    forwards, requests, open_steps = rows[0] if rows else (0, 0, 0)  # (work beside a result)
    if not forwards or not requests:
        return None
    return int(open_steps) + first


#: An end far past any trace: a request that never ends is open across every later forward.
_NEVER = 2**63 - 1


def forward_steps_sql(rules: PhaseRules) -> str:
    """The forward ranges, the request ranges and the (forward, open request) pairs of
    :func:`from_forward_steps`, counted.

    The pair condition is two inequalities with the open end as the largest time, not an
    ``e IS NULL OR`` test: DuckDB then runs it as a range join (IE_JOIN); with the OR it
    merged on the start alone and filtered every pair of a forward and a request started
    before it (1.40 s at 73k forwards and 9k requests, 8.67 s at 200k and 25k, against 0.03
    and 0.08 s; docs/performance.md#issue-35-twelfth-session-tokens-from-forward-steps)."""
    forward = BASELINE_ACCELERABLE[0]
    return f"""
    WITH fwd AS (
        SELECT s, coalesce(e, s) AS e FROM ({phase_ranges_sql(rules)})
        WHERE pid = $pid AND phase = '{forward}' AND counted
          AND ($gtid IS NULL OR gtid = $gtid) AND s >= $ws AND s < $we
    ),
    req AS (
        SELECT s, coalesce(e, {_NEVER}) AS e FROM ({mapped_nvtx_sql(rules)})
        WHERE pid = $pid AND phase = '{REQUEST}' AND (e IS NULL OR e >= s)
    )
    SELECT (SELECT count(*) FROM fwd), (SELECT count(*) FROM req),
           (SELECT count(*) FROM fwd JOIN req ON req.s <= fwd.s AND req.e >= fwd.e)
    """


def token_counts(
    trace: Trace,
    scope: Scope,
    lat: pl.DataFrame,
    acceptance: Acceptance | None,
    range_counts: dict[str, int],
) -> dict[str, int | None]:
    """What each source (but ``given``) counts in the window, None where it has nothing: the
    cross-check of the derived counts against the marks."""
    first = first_tokens(lat, range_counts)
    return {
        "tokens_marks": from_tokens_marks(trace, scope),
        "output_tokens_marks": from_output_tokens(lat),
        "acceptance_marks": from_acceptance(acceptance, first),
        "forward_steps": from_forward_steps(trace, scope, first),
    }


def token_counts_of(
    trace: Trace, *, rules: object | None = None, pid: int | None = None
) -> dict[str, int | None]:
    """:func:`token_counts` of *trace* (its analysis window and acceptance marks, *rules* and
    *pid* as in :func:`~specnsys.metrics.analyze_trace`): how far each way of counting the
    output tokens agrees with the others on one trace."""
    from specnsys.attribution.timeline import exclusive_phase_times
    from specnsys.metrics.acceptance import acceptance_stats
    from specnsys.metrics.events import resolve
    from specnsys.metrics.requests import request_latencies

    mapping = resolve(rules)
    b = exclusive_phase_times(trace, pid=pid, rules=mapping)
    scope = Scope.of(b, mapping)
    acceptance, _note = acceptance_stats(trace, scope)
    return token_counts(trace, scope, request_latencies(trace, scope), acceptance, b.range_counts)


def count_tokens(
    trace: Trace,
    scope: Scope,
    lat: pl.DataFrame,
    acceptance: Acceptance | None,
    range_counts: dict[str, int],
) -> TokenCount:
    """The output tokens from the first source that answers (see the module docs)."""
    marked = from_tokens_marks(trace, scope)
    if marked is not None:
        return TokenCount(marked, "tokens_marks")
    per_request = from_output_tokens(lat)
    if per_request is not None:
        return TokenCount(
            per_request,
            "output_tokens_marks",
            f"{NOTE_PREFIX}output tokens summed from the requests' output_tokens marks",
        )
    first = first_tokens(lat, range_counts)
    derived = from_acceptance(acceptance, first)
    if derived is not None and acceptance is not None:
        k = int(acceptance["k"])
        over = min(k * first, derived)
        return TokenCount(
            derived,
            "acceptance_marks",
            f"{NOTE_PREFIX}output tokens derived from the acceptance marks (accepted + 1 "
            f"per sequence-step, plus {first} first tokens): an upper bound, as a request's "
            f"last step may have been cut at its length; over by at most k = {k} per request "
            f"({over} tokens, {over / derived:.1%})",
        )
    derived = from_forward_steps(trace, scope, first)
    if derived is not None:
        return TokenCount(
            derived,
            "forward_steps",
            f"{NOTE_PREFIX}output tokens derived from the forward steps (one per request "
            f"open across each forward, plus {first} first tokens)",
        )
    return TokenCount(
        None,
        None,
        reason=(
            "the trace has no tokens marks (output tokens per step), no output_tokens mark on "
            "every request, no acceptance marks (speculative run) and no forward ranges with "
            "request ranges (baseline run), so tokens cannot be counted; annotate the loop "
            "with specnsys.annotate.mark_tokens or give the count with --tokens"
        ),
    )
