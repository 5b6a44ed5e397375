"""Whether a rule set matches anything in a trace: the one-line note when it does not.

A pack written for one engine, run on another engine's trace (or on a capture made without the
engine's NVTX switch), maps no range: every phase is empty and the whole window is
``unannotated``. That answer is correct but easy to misread, so the command says why, naming
the ranges the trace does have (by count, torch's per-call ``op_id`` decoration stripped so one
operator is one name).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specnsys.attribution.rules import TORCH_OP_DECORATION, PhaseRules

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["unmatched_rules_note"]

#: Range names listed in the note; the rest are counted.
LISTED_NAMES = 5


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def unmatched_rules_note(trace: Trace, rules: PhaseRules, path: str) -> str | None:
    """None when some push/pop or start/end range of *trace* maps to a phase under *rules*;
    otherwise ``--rules NAME matched no NVTX range in PATH (ranges present: ...)``."""
    name_sql = f"regexp_replace(text, {_literal(TORCH_OP_DECORATION)}, '', 'g')"
    rows = trace.connection.execute(
        f"""
        WITH r AS (
            SELECT text, {rules.phase_sql()} AS phase FROM nvtx
            WHERE kind IN ('push_pop', 'start_end')
        )
        SELECT {name_sql} AS name, count(*) AS n, count(phase) AS matched
        FROM r WHERE text IS NOT NULL GROUP BY 1 ORDER BY n DESC, name
        """
    ).fetchall()
    if any(matched for _, _, matched in rows):
        return None
    label = rules.name if rules.source == "built-in" else rules.source
    listed = ", ".join(f"{name} ({n:,})" for name, n, _ in rows[:LISTED_NAMES]) or "none"
    if len(rows) > LISTED_NAMES:
        listed += f" and {len(rows) - LISTED_NAMES:,} more names"
    return f"--rules {label} matched no NVTX range in {path} (ranges present: {listed})"
