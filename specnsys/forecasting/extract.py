"""One trace as fit data: its :class:`~specnsys.forecasting.fitdata.FitRun` and its rows.

From the trace's analysis (phases, tokens, acceptance, draft forwards) and SQL over its model:

* the decode steps of :func:`specnsys.metrics.steps.analysis_steps`, with ``ctx``: the context
  tokens of the step's batch, the sum over the requests decoding in it (first token before the
  step's start, end after it) of ``input + 1 + (output - 1) * (t - first) / (end - first)``
  -- each request's prompt plus the output it had emitted by then, interpolated linearly
  between its first token and its end (the marks say how many tokens a request emitted, not
  when each of them came). Null when a request lacks its input length, first token or output
  length;
* every ``prefill`` / ``draft_prefill`` range of the process (the outermost of its phase) with
  the sum of the ``input_tokens`` marks inside it;
* every request with its input tokens (the ``input_tokens`` of the first prefill that starts
  after it, on its thread: a loop admits a request, then reads its prompt) and output tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.phase_map import phase_ranges_sql
from specnsys.errors import BadInputError
from specnsys.forecasting.fitdata import BASELINE, SPEC, FitRun
from specnsys.metrics.analysis import analysis_steps
from specnsys.metrics.events import Scope, resolve
from specnsys.metrics.requests import request_latencies
from specnsys.vocabulary import DOMAIN, INPUT_TOKENS_MARK, PREFILL_ROLES

if TYPE_CHECKING:
    from specnsys.attribution.context import AttributionContext
    from specnsys.attribution.rules import PhaseRules
    from specnsys.ingest import Trace
    from specnsys.metrics.analysis import Analysis

__all__ = ["TraceFit", "trace_fit"]

TraceFit = tuple[FitRun, pl.DataFrame, pl.DataFrame, pl.DataFrame]


def _prefills(trace: Trace, scope: Scope) -> pl.DataFrame:
    """``phase, s, gtid, duration_ns, input_tokens`` of every prefill-role range:
    ``input_tokens`` sums the marks of its thread in ``[s, e)`` (NULL without one).

    The sum is a difference of the thread's running sums of marks, read before the range's
    start and before its end by two as-of joins: an equality on the thread with a range on
    the time was a hash join on the thread filtered pair by pair, prefills x marks (3.28 s at
    40k of each; docs/performance.md#issue-35-twelfth-session-tokens-from-forward-steps).
    Marks at one instant are summed first, so the join lands on all of them. A sum past 64
    bits (each mark fits, a hostile export's may add up past it) is NULL: not known."""
    sql = f"""
    WITH r AS (
        SELECT id, gtid, s, least(coalesce(e, $we), $we) AS e, phase
        FROM ({phase_ranges_sql(scope.rules)})
        WHERE counted AND pid = $pid AND list_contains($phases, phase) AND s >= $ws AND s < $we
    ),
    m AS (
        SELECT global_tid AS g, start AS t, sum(payload_int) AS v, count(*) AS n FROM nvtx
        WHERE kind = 'mark' AND domain = $domain AND pid = $pid AND text = $mark
          AND payload_int IS NOT NULL AND start IS NOT NULL AND global_tid IS NOT NULL
        GROUP BY global_tid, start
    ),
    c AS (  -- per thread, the marks up to and including each instant
        SELECT g, t, sum(v) OVER w AS cv, sum(n) OVER w AS cn FROM m
        WINDOW w AS (PARTITION BY g ORDER BY t ROWS UNBOUNDED PRECEDING)
    )
    SELECT r.phase, r.s, r.gtid, r.e - r.s AS duration_ns,
           CASE WHEN coalesce(b.cn, 0) > coalesce(a.cn, 0)
                THEN TRY_CAST(coalesce(b.cv, 0) - coalesce(a.cv, 0) AS BIGINT) END AS input_tokens
    FROM r
    ASOF LEFT JOIN c a ON a.g = r.gtid AND r.s > a.t
    ASOF LEFT JOIN c b ON b.g = r.gtid AND r.e > b.t
    ORDER BY r.s, r.id
    """
    params = {
        "pid": scope.pid,
        "ws": scope.start_ns,
        "we": scope.end_ns,
        "phases": list(PREFILL_ROLES),
        "domain": DOMAIN,
        "mark": INPUT_TOKENS_MARK,
    }
    frame: pl.DataFrame = trace.connection.sql(sql, params=params).pl()
    return frame


def _requests(trace: Trace, scope: Scope, prefills: pl.DataFrame) -> pl.DataFrame:
    """``start, end, first_token, input_tokens, output_tokens`` per request."""
    lat = request_latencies(trace, scope).select(
        "start", "end", "first_token", pl.col("output_tokens").cast(pl.Int64)
    )
    if lat.height == 0:
        return lat.with_columns(pl.lit(None, pl.Int64).alias("input_tokens"))
    target = prefills.filter(pl.col("phase") == "prefill").select(
        pl.col("s").cast(pl.Int64), pl.col("input_tokens").cast(pl.Int64)
    )
    return (
        lat.with_columns(pl.col("start").cast(pl.Int64))
        .sort("start")
        .join_asof(target.sort("s"), left_on="start", right_on="s", strategy="forward")
        .drop("s")
    )


def _context(steps: pl.DataFrame, requests: pl.DataFrame) -> pl.Series:
    """``ctx`` per step (module docs); all null when any request lacks what it needs."""
    needed = ("first_token", "end", "input_tokens", "output_tokens")
    if requests.height == 0 or any(requests[c].null_count() for c in needed):
        return pl.Series("ctx", [None] * steps.height, dtype=pl.Float64)
    req = requests.select(
        pl.col("first_token").cast(pl.Float64).alias("f"),
        pl.col("end").cast(pl.Float64).alias("e"),
        pl.col("input_tokens").cast(pl.Float64).alias("i"),
        pl.col("output_tokens").cast(pl.Float64).alias("o"),
    )
    t = pl.col("start_ns")
    span = (pl.col("e") - pl.col("f")).clip(lower_bound=1.0)
    ctx = (
        steps.select("step", pl.col("start_ns").cast(pl.Float64))
        .join_where(req, pl.col("f") <= pl.col("start_ns"), pl.col("start_ns") < pl.col("e"))
        .group_by("step")
        .agg(
            (pl.col("i") + 1.0 + (pl.col("o") - 1.0) * (t - pl.col("f")) / span).sum().alias("ctx")
        )
    )
    joined = steps.select("step").join(ctx, on="step", how="left").sort("step")
    return joined["ctx"].fill_null(0.0)


def trace_fit(
    trace: Trace,
    analysis: Analysis,
    rules: PhaseRules | None,
    context: AttributionContext | None = None,
) -> TraceFit:
    """The fit data of one analysed trace (module docs): the run, its steps, prefills and
    requests. Raises :class:`BadInputError` for a run the model cannot use (a generic run,
    no output tokens, no decode steps, a speculative run without proposed marks)."""
    path = analysis.path or str(getattr(trace, "path", ""))
    if analysis.mode not in (BASELINE, SPEC):
        raise BadInputError(
            f"{path}: a {analysis.mode} run (neither a baseline nor a speculative run): the "
            "cost model is fitted on forward, draft and verify phases"
        )
    if not analysis.tokens:
        raise BadInputError(f"{path}: the output tokens are not known, so no time per token")
    if analysis.mode == SPEC and analysis.k is None:
        raise BadInputError(
            f"{path}: a speculative run without valid proposed/accepted marks: its k and acceptance "
            "are unknown"
        )
    b = analysis.breakdown
    if b is None:
        raise BadInputError(f"{path}: the analysis has no phase breakdown")
    scope = Scope.of(b, resolve(rules), context)
    steps = analysis_steps(trace, analysis, rules, context)
    if steps.height == 0:
        raise BadInputError(f"{path}: no decode steps in the window")
    prefills = _prefills(trace, scope)
    requests = _requests(trace, scope, prefills)
    k = int(analysis.k or 0) if analysis.mode == SPEC else 0
    run_id = path
    forwards = analysis.draft_forwards_per_step if analysis.mode == SPEC else 0.0
    steps = steps.with_columns(
        pl.lit(run_id).alias("run_id"),
        ((k + 1) * pl.col("batch")).alias("positions"),
        pl.lit(float(forwards if forwards is not None else k)).alias("forwards"),
        _context(steps, requests),
    )
    acc = analysis.acceptance
    by_position = [float(a) for a in (acc.get("by_position") or [] if acc else [])]
    reached = int((acc.get("sequence_steps") or 0) if acc else 0)
    run = FitRun(
        run_id=run_id,
        source=path,
        role=analysis.mode,
        k=k,
        concurrency=int(steps["batch"].max() or 1),  # type: ignore[arg-type]
        window_ns=analysis.window_ns,
        tokens=int(analysis.tokens),
        requests=int(analysis.requests),
        steps=steps.height,
        phases={n: int(r["wall_ns"]) for n, r in analysis.phases.items() if r["wall_ns"] > 0},
        accept_reached=tuple(reached for _ in by_position),
        accept_kept=tuple(round(a * reached) for a in by_position),
        draft_forwards_per_step=analysis.draft_forwards_per_step,
        identity={"rules": analysis.rules, "gpu": "GPU" if analysis.gpu else "CPU only"},
    )
    return (
        run,
        steps,
        prefills.select("phase", "duration_ns", "input_tokens").with_columns(
            pl.lit(run_id).alias("run_id")
        ),
        requests.select("input_tokens", "output_tokens").with_columns(
            pl.lit(run_id).alias("run_id")
        ),
    )
