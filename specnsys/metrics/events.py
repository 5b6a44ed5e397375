"""Trace queries the metrics share: marks in the window and the phases they fall in.

Everything is scoped like the phase breakdown it complements: one process and its window
(first ``request`` start to last ``request`` end). Phase names come from the same
name-mapping rules as the breakdown (the attribution layer's SQL); the breakdown itself
counts the phase ranges per phase (:attr:`~specnsys.attribution.PhaseBreakdown.range_counts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from specnsys.attribution.context import AttributionContext, attribution_context
from specnsys.attribution.launch import rules_for
from specnsys.attribution.phase_map import phase_lookup_sql
from specnsys.vocabulary import DOMAIN, PHASES

if TYPE_CHECKING:
    import duckdb

    from specnsys.attribution import PhaseBreakdown, PhaseRules
    from specnsys.ingest import Trace

__all__ = ["MARKS_WHERE", "Scope", "mark_phases", "marks", "marks_relation", "resolve"]


@dataclass(frozen=True)
class Scope:
    """What one analysis looks at: process, driver thread, window and naming rules (and the
    attribution context of those rules, when the analysis has one to share)."""

    pid: int | None
    driver_gtid: int | None
    start_ns: int
    end_ns: int
    rules: PhaseRules
    context: AttributionContext | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls, breakdown: PhaseBreakdown, rules: PhaseRules, context: AttributionContext | None = None
    ) -> Scope:
        return cls(
            breakdown.pid,
            breakdown.driver_global_tid,
            breakdown.window_start_ns,
            breakdown.window_end_ns,
            rules,
            context,
        )

    def params(self) -> dict[str, object]:
        return {"pid": self.pid, "gtid": self.driver_gtid, "ws": self.start_ns, "we": self.end_ns}


def resolve(rules: object | None) -> PhaseRules:
    """The rules in force: *rules* (PhaseRules, built-in name or TOML path) or the default."""
    return rules_for(PHASES, DOMAIN, rules)  # type: ignore[arg-type]


#: The integer marks of the specnsys domain named one of ``$names``, of process ``$pid``, in
#: the window ``[$ws, $we]``: the condition every mark query shares.
MARKS_WHERE = """kind = 'mark' AND domain = $domain AND pid = $pid
    AND list_contains($names, text) AND payload_int IS NOT NULL
    AND start >= $ws AND start <= $we"""


def marks_relation(
    trace: Trace, scope: Scope, names: tuple[str, ...], columns: str, order: str = ""
) -> duckdb.DuckDBPyRelation:
    """*columns* (SQL over ``nvtx``) of the integer marks of the ``specnsys`` domain named one
    of *names* in the window, with ``ORDER BY`` *order* when given."""
    return trace.connection.sql(
        f"""SELECT {columns} FROM nvtx WHERE {MARKS_WHERE}
            {f"ORDER BY {order}" if order else ""}""",
        params={
            "domain": DOMAIN,
            "pid": scope.pid,
            "names": list(names),
            "ws": scope.start_ns,
            "we": scope.end_ns,
        },
    )


def marks(trace: Trace, scope: Scope, names: tuple[str, ...]) -> pl.DataFrame:
    """Integer marks of the ``specnsys`` domain named one of *names* in the window.

    Columns ``id``, ``name``, ``value`` (the payload), ``t``, ``gtid``; ordered by time then
    export row, which is emission order on one thread.
    """
    columns = "id, text AS name, payload_int AS value, start AS t, global_tid AS gtid"
    frame: pl.DataFrame = marks_relation(trace, scope, names, columns, order="start, id").pl()
    return frame


def mark_phases(trace: Trace, scope: Scope, name: str) -> pl.DataFrame:
    """Marks called *name* with the innermost phase range open on their thread (``phase``).

    Workload facts such as ``target_bytes`` and ``device_memory_peak`` are emitted inside the
    range they describe; this puts each on that range's phase (NULL outside every phase).
    """
    points = """
        SELECT id, payload_int AS value, start AS _t, global_tid AS _gtid FROM nvtx
        WHERE kind = 'mark' AND domain = $domain AND pid = $pid AND text = $name
          AND payload_int IS NOT NULL AND start >= $ws AND start <= $we
    """
    prm = {
        "domain": DOMAIN,
        "pid": scope.pid,
        "name": name,
        "ws": scope.start_ns,
        "we": scope.end_ns,
    }
    # The lookup sorts every phase range of the trace: skip it when there is nothing to place.
    if not trace.connection.execute(f"SELECT count(*) FROM ({points})", prm).fetchall()[0][0]:
        return pl.DataFrame(
            schema={"id": pl.Int64, "value": pl.Int64, "t": pl.Int64, "phase": pl.String}
        )
    with attribution_context(trace, scope.rules, scope.context) as shared:
        index = shared.phase_index(for_sql=True)
        placed: pl.DataFrame = trace.connection.sql(
            f"SELECT id, value, _t AS t, phase FROM ({phase_lookup_sql(points, index)})",
            params=prm,
        ).pl()
        return placed
