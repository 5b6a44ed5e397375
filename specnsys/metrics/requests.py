"""Per-request latency from the trace: TTFT, TPOT and end-to-end time, as distributions.

A request is a ``request`` range (payload: request id) of the analyzed process. The workload
states the rest with marks (``specnsys.vocabulary.VALUE_MARKS``):

* ``first_token`` (payload: request id) when the request's first output token reaches the
  host: ``ttft = first_token - request start``;
* ``output_tokens`` (payload: the request's output length) emitted on the ending thread just
  before the range ends; a request takes the last such mark on its ending thread at or
  before its end and not before its start (of marks at one instant, the last emitted):
  ``tpot = (end - first_token) / (tokens - 1)`` (undefined for one-token requests).

A mark two requests would both claim is given to neither (their TPOT becomes null) rather
than guessed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.launch import mapped_nvtx_sql
from specnsys.attribution.rules import REQUEST
from specnsys.metrics.events import Scope
from specnsys.vocabulary import DOMAIN, FIRST_TOKEN_MARK, OUTPUT_TOKENS_MARK

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["distribution", "request_latencies"]

QUANTILES = (0.5, 0.9, 0.99)


def distribution(values: pl.Series) -> dict[str, float | int | None]:
    """count, mean, min, p50, p90, p99, max of *values* (nulls dropped; linear quantiles)."""
    v = values.drop_nulls().cast(pl.Float64)
    out: dict[str, float | int | None] = {"count": v.len()}
    if v.len() == 0:
        out.update(dict.fromkeys(("mean", "min", "p50", "p90", "p99", "max")))
        return out
    out["mean"] = float(v.mean())  # type: ignore[arg-type]
    out["min"] = float(v.min())  # type: ignore[arg-type]
    for q in QUANTILES:
        out[f"p{round(q * 100)}"] = float(v.quantile(q, interpolation="linear"))  # type: ignore[arg-type]
    out["max"] = float(v.max())  # type: ignore[arg-type]
    return out


def request_latencies(trace: Trace, scope: Scope) -> pl.DataFrame:
    """One row per request range of the process: ``request_id``, ``start``, ``end``,
    ``first_token``, ``output_tokens``, ``ttft_ns``, ``tpot_ns``, ``latency_ns``.

    ``first_token``/``output_tokens`` are null when the trace lacks the marks; ``end`` is null
    for a request that never ended in the trace.
    """
    sql = f"""
    WITH req AS (
        SELECT id, s, e, payload_int AS request_id, coalesce(end_global_tid, gtid) AS eg
        FROM ({mapped_nvtx_sql(scope.rules, ("payload_int", "end_global_tid"))})
        WHERE phase = '{REQUEST}' AND pid = $pid
          -- the requests of the window (all of them in the default window, which spans them)
          AND s >= $ws AND (e IS NULL OR e <= $we)
    ),
    mk AS (
        SELECT id AS mark_id, text AS name, payload_int AS v, start AS t, global_tid AS g
        FROM nvtx
        WHERE kind = 'mark' AND domain = '{DOMAIN}' AND pid = $pid AND payload_int IS NOT NULL
          AND text IN ('{FIRST_TOKEN_MARK}', '{OUTPUT_TOKENS_MARK}')
    ),
    ft AS (
        SELECT r.id, min(mk.t) AS first_token
        FROM req r JOIN mk ON mk.name = '{FIRST_TOKEN_MARK}' AND mk.v = r.request_id
          AND mk.t >= r.s AND (r.e IS NULL OR mk.t <= r.e)
        GROUP BY r.id
    ),
    -- One mark per (thread, instant): the last emitted (the later export row). The ASOF
    -- join below then has a unique key; with tied marks it took either one.
    ot_marks AS (
        SELECT g, t, max(mark_id) AS mark_id, arg_max(v, mark_id) AS v
        FROM mk WHERE name = '{OUTPUT_TOKENS_MARK}' GROUP BY g, t
    ),
    ot0 AS (
        SELECT r.id, o.mark_id, o.v, o.t
        FROM (SELECT * FROM req WHERE e IS NOT NULL) r
        ASOF LEFT JOIN ot_marks o ON o.g = r.eg AND o.t <= r.e
    ),
    ot AS (
        SELECT ot0.id, CASE WHEN ot0.t >= r.s
                    AND count(*) OVER (PARTITION BY ot0.mark_id) = 1 THEN ot0.v END AS tokens
        FROM ot0 JOIN req r ON r.id = ot0.id
    )
    SELECT r.request_id, r.s AS start, r.e AS "end", ft.first_token,
           ot.tokens AS output_tokens,
           ft.first_token - r.s AS ttft_ns,
           CASE WHEN ot.tokens > 1 AND r.e IS NOT NULL
                THEN (r.e - ft.first_token) / (ot.tokens - 1) END AS tpot_ns,
           r.e - r.s AS latency_ns
    FROM req r LEFT JOIN ft ON ft.id = r.id LEFT JOIN ot ON ot.id = r.id
    ORDER BY r.s, r.id
    """
    prm = {"pid": scope.pid, "ws": scope.start_ns, "we": scope.end_ns}
    frame: pl.DataFrame = trace.connection.sql(sql, params=prm).pl()
    return frame
