"""Interval unions in SQL: the gaps-and-islands step shared by the timeline and the projection.

GPU busy time is an interval *union* (DESIGN.md section 4, rule 4), never a sum: overlapping
ops on several streams would otherwise count twice.
"""

from __future__ import annotations

__all__ = ["islands_sql"]


def islands_sql(source: str, key: str) -> str:
    """SELECT ``key, a, b``: per *key*, the intervals ``[s, e)`` of *source* merged into
    disjoint islands.

    *source* is a relation (a name or a parenthesized SELECT) with columns *key*, ``s`` and
    ``e``. Sorted by start within each key, an interval opens a new island when it starts
    after every earlier interval ended (a running max of ``e``); touching intervals merge.
    """
    return f"""
    SELECT {key}, min(s) AS a, max(e) AS b FROM (
        SELECT *, sum(CASE WHEN prev_max IS NULL OR s > prev_max THEN 1 ELSE 0 END)
            OVER (PARTITION BY {key} ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS grp
        FROM (
            SELECT {key}, s, e, max(e) OVER (PARTITION BY {key} ORDER BY s, e
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
            FROM {source}
        )
    )
    GROUP BY {key}, grp
    """
