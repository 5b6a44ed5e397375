"""Render a :class:`~specnsys.attribution.timeline.PhaseBreakdown` (``specnsys phases``).

Pure rendering: the numbers come from the attribution engine; this module only formats them.
"""

from __future__ import annotations

import json
from typing import TypedDict

import polars as pl

from specnsys.attribution.timeline import WINDOW_SOURCES, PhaseBreakdown
from specnsys.render.window_words import window_rule_words

GPU_COLUMNS = ("gpu_wall_ns", "gpu_busy_ns", "kernels")
API_COLUMNS = ("launches",)


def phases_dict(
    b: PhaseBreakdown, not_available: dict[str, str] | None = None
) -> dict[str, object]:
    """The JSON document of ``specnsys phases --json``.

    *not_available* maps ``"gpu"``/``"cuda_api"`` to the reason the trace cannot support those
    columns; they are then null, not zero (a CPU-only capture measured no GPU, it did not
    measure an idle one).
    """
    na = not_available or {}
    hidden = (GPU_COLUMNS if "gpu" in na else ()) + (API_COLUMNS if "cuda_api" in na else ())
    rows = b.frame.to_dicts()
    for row in rows:
        row.update(dict.fromkeys(hidden))
    return {
        "pid": b.pid,
        "window_start_ns": b.window_start_ns,
        "window_end_ns": b.window_end_ns,
        "window_ns": b.window_ns,
        "window_source": b.window_source,
        "window_of": WINDOW_SOURCES.get(b.window_source or ""),
        "window_rule": b.window_rule,
        "window_dropped": b.window_dropped,
        "gpu_union_ns": None if "gpu" in na else b.gpu_union_ns,
        "rules": b.rules,
        "unclosed_ranges": b.unclosed_ranges,
        "phases": {r.pop("phase"): r for r in rows},
        "not_available": na,
    }


def render_phases_json(b: PhaseBreakdown, not_available: dict[str, str] | None = None) -> str:
    return json.dumps(phases_dict(b, not_available), indent=2)


def _set_by(b: PhaseBreakdown) -> str:
    """``: <what set the window>`` (empty for a breakdown kept by an older version)."""
    words = WINDOW_SOURCES.get(b.window_source or "")
    rule = window_rule_words(b.window_rule, b.window_dropped)
    return (f": {words}" if words else "") + rule


#: Phase names longer than this are cut with "…" in a terminal's table (``--wide``: whole).
PHASE_NAME_WIDTH = 48


def render_phases_text(
    b: PhaseBreakdown,
    not_available: dict[str, str] | None = None,
    max_rows: int = 30,
    name_width: int | None = PHASE_NAME_WIDTH,
) -> str:
    """The terminal table: phases by exclusive time, largest first, at most *max_rows* rows
    (the rest summed on one line, so the total still adds up to the window); names longer
    than *name_width* cut with "…", or whole when it is None (``--wide``, or not a terminal)."""
    na = not_available or {}
    ms = 1e6

    def num(value: float, hide: bool, fmt: str) -> str:
        return "n/a" if hide else format(value, fmt)

    shown = b.frame.filter(
        (b.frame["wall_ns"] != 0) | (b.frame["cpu_inclusive_ns"] != 0) | (b.frame["kernels"] != 0)
    ).sort("wall_ns", descending=True, maintain_order=True)
    rest = shown.slice(max_rows)
    shown = shown.head(max_rows)
    cut = name_width if name_width is not None else max([0, *map(len, shown["phase"])])
    width = max([18, *(min(len(p), cut) + 2 for p in shown["phase"])])
    gpu_busy = "n/a" if "gpu" in na else f"{b.gpu_union_ns / ms:.3f} ms"
    lines = [
        f"process {b.pid}: window {b.window_ns / ms:.3f} ms "
        f"({b.window_start_ns} to {b.window_end_ns} ns on the session clock{_set_by(b)}); "
        f"GPU busy {gpu_busy}",
        f"exclusive wall time per phase (phases from the '{b.rules}' rules; shares of the "
        "window, summing to 100%)",
        "",
        f"{'phase':<{width}}{'wall ms':>11}{'share':>8}{'GPU busy ms':>13}{'kernels':>9}"
        f"{'launches':>10}{'CPU incl ms':>13}",
    ]
    for r in shown.iter_rows(named=True):
        name = r["phase"] if len(r["phase"]) <= cut else r["phase"][: cut - 1] + "…"
        lines.append(
            f"{name:<{width}}{r['wall_ns'] / ms:>11.3f}{r['share']:>8.1%}"
            f"{num(r['gpu_busy_ns'] / ms, 'gpu' in na, '.3f'):>13}"
            f"{num(r['kernels'], 'gpu' in na, ','):>9}{num(r['launches'], 'cuda_api' in na, ','):>10}"
            f"{r['cpu_inclusive_ns'] / ms:>13.3f}"
        )
    if rest.height:
        rest_ns = int(rest["wall_ns"].sum())
        share = rest_ns / b.window_ns if b.window_ns else 0.0
        label = f"({rest.height} more phases)"
        lines.append(f"{label:<{width}}{rest_ns / ms:>11.3f}{share:>8.1%}   (--json lists all)")
    total = int(b.frame["wall_ns"].sum())
    lines.append(
        f"{'total':<{width}}{total / ms:>11.3f}{total / b.window_ns if b.window_ns else 0:>8.1%}"
    )
    if b.unclosed_ranges:
        lines.append(
            f"note: {b.unclosed_ranges} phase range(s) on the driver thread never ended in the "
            "trace (a crashed or cut-off run); they are counted up to the window end"
        )
    labels = {"gpu": "GPU columns", "cuda_api": "launches"}
    for what, reason in na.items():
        if what in labels:
            lines.append(f"{labels[what]}: not available ({reason})")
        else:
            lines.append(f"hint: {reason}")
    return "\n".join(lines)


class CategoryRow(TypedDict):
    """One kernel category of :func:`categories_dict`."""

    category: str
    ops: int
    gpu_ns: int
    share: float
    by_phase: dict[str, int]


class Categories(TypedDict):
    """``phases --by category``'s ``categories``."""

    shares_of: str
    gpu_op_ns: int
    rows: list[CategoryRow]


def categories_dict(table: pl.DataFrame) -> Categories:
    """GPU op time per kernel category (``phases --by category``), largest first, each with its
    split over phases; shares are of the summed GPU op time of the window (``gpu_op_ns``)."""
    total = int(table["gpu_ns"].sum()) if table.height else 0
    per_category = (
        table.group_by("category")
        .agg(pl.col("ops").sum(), pl.col("gpu_ns").sum())
        .sort(["gpu_ns", "category"], descending=[True, False])
    )
    rows: list[CategoryRow] = []
    for r in per_category.iter_rows(named=True):
        parts = table.filter(pl.col("category") == r["category"]).sort(
            ["gpu_ns", "phase"], descending=[True, False]
        )
        rows.append(
            {
                "category": r["category"],
                "ops": int(r["ops"]),
                "gpu_ns": int(r["gpu_ns"]),
                "share": r["gpu_ns"] / total if total else 0.0,
                "by_phase": dict(zip(parts["phase"], map(int, parts["gpu_ns"]), strict=True)),
            }
        )
    return {"shares_of": "gpu_op_ns", "gpu_op_ns": total, "rows": rows}


def render_categories_text(table: pl.DataFrame, top_phases: int = 3) -> str:
    """The terminal table of :func:`categories_dict`: one line per category, with the phases
    that launched most of its time."""
    doc = categories_dict(table)
    total, rows = doc["gpu_op_ns"], doc["rows"]
    if not rows:
        return "kernel categories: no GPU work in the window"
    ms = 1e6
    lines = [
        "GPU op time per kernel category (shares of the summed GPU op time of the window, "
        f"{total / ms:.3f} ms; concurrent ops each count)",
        "",
        f"{'category':<18}{'ops':>9}{'GPU ms':>12}{'share':>8}  launched in (share of the category)",
    ]
    for r in rows:
        phases = list(r["by_phase"].items())
        parts = ", ".join(
            f"{phase} {ns / r['gpu_ns']:.0%}" for phase, ns in phases[:top_phases] if r["gpu_ns"]
        )
        if len(phases) > top_phases:
            parts += f", {len(phases) - top_phases} more"
        lines.append(
            f"{r['category']:<18}{r['ops']:>9,}{r['gpu_ns'] / ms:>12.3f}{r['share']:>8.1%}  {parts}"
        )
    return "\n".join(lines)
