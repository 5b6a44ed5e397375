"""Whether a rule set matches anything in a trace, and which built-in pack a trace calls for.

Without ``--rules``, a trace with no specnsys ranges is read under the engine pack whose names
match its ranges (:func:`choose_pack`: vLLM's worker scopes, SGLang's scheduler stages,
TensorRT-LLM's executor loop, else PyTorch's operator ranges), said in one line with the
evidence; only a trace that matches none falls back to every range being its own phase.

A pack written for one engine, run on another engine's trace (or on a capture made without the
engine's NVTX switch), maps no range: every phase is empty and the whole window is
``unannotated``. That answer is correct but easy to misread, so the command says why, naming
the ranges the trace does have (by count, torch's per-call ``op_id`` decoration stripped so one
operator is one name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specnsys import __version__
from specnsys.attribution.rules import ENGINE_PACKS, TORCH_OP_DECORATION, PhaseRules, pack_rules

if TYPE_CHECKING:
    from specnsys.ingest import Trace

__all__ = ["PackChoice", "choose_pack", "unmatched_rules_note"]

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


#: Packs whose phases are the engine's own stages, tried before ``torch``, whose phases are
#: operator names (it applies only when no engine's names are in the trace).
_ENGINE_FIRST = tuple(p for p in ENGINE_PACKS if p != "torch")


@dataclass(frozen=True)
class PackChoice:
    """The pack a trace's ranges call for: its rules, the ranges it maps of all ranges, and
    its most frequent matched names (the evidence)."""

    rules: PhaseRules
    matched: int
    ranges: int
    names: tuple[tuple[str, int], ...]

    def note(self) -> str:
        """The one line that says which pack was chosen and why."""
        listed = ", ".join(f"{name!r} ({n:,})" for name, n in self.names)
        return (
            f"no specnsys ranges: the {self.rules.name} rule pack was chosen from the trace's "
            f"own names ({self.matched:,} of {self.ranges:,} NVTX ranges matched it: {listed});"
            " --rules overrides"
        )


def choose_pack(trace: Trace) -> PackChoice | None:
    """The built-in pack whose rules map the most NVTX ranges of *trace* (the engine packs
    first, ``torch`` only when none of them maps any), or None when no pack maps any range.
    Kept beside the cached model: a second command on the unchanged export reads it."""
    key = {"specnsys": __version__, "packs": list(ENGINE_PACKS)}
    stored = trace.load_derived("pack_choice", key)
    if stored is not None:
        if stored["pack"] is None:
            return None
        names = tuple((str(n), int(c)) for n, c in stored["names"])
        return PackChoice(pack_rules(stored["pack"]), stored["matched"], stored["ranges"], names)
    choice = _choose_pack(trace)
    trace.store_derived(
        "pack_choice",
        key,
        {"pack": None}
        if choice is None
        else {"pack": choice.rules.name, "matched": choice.matched, "ranges": choice.ranges,
              "names": [list(n) for n in choice.names]},
    )  # fmt: skip
    return choice


def _choose_pack(trace: Trace) -> PackChoice | None:
    packs = {name: pack_rules(name) for name in ENGINE_PACKS}
    counts = ", ".join(f"count({rules.phase_sql()})" for rules in packs.values())
    rows = trace.connection.execute(
        f"SELECT count(*), {counts} FROM nvtx WHERE kind IN ('push_pop', 'start_end')"
    ).fetchall()  # all of it: DuckDB refuses other work on a connection with a result left
    if not rows:
        return None
    row = rows[0]
    total, matched = int(row[0]), dict(zip(packs, (int(v) for v in row[1:]), strict=True))
    best = max(_ENGINE_FIRST, key=lambda name: (matched[name], -_ENGINE_FIRST.index(name)))
    if matched[best] == 0:
        best = "torch"
    if matched[best] == 0:
        return None
    rules = packs[best]
    name_sql = f"regexp_replace(text, {_literal(TORCH_OP_DECORATION)}, '', 'g')"
    names = trace.connection.execute(
        f"""SELECT {name_sql} AS name, count(*) AS n FROM nvtx
            WHERE kind IN ('push_pop', 'start_end') AND ({rules.phase_sql()}) IS NOT NULL
            GROUP BY 1 ORDER BY n DESC, name LIMIT 3"""
    ).fetchall()
    return PackChoice(rules, matched[best], total, tuple((str(n), int(c)) for n, c in names))
