"""Render a :class:`~specnsys.attribution.timeline.PhaseBreakdown` (``specnsys phases``).

Pure rendering: the numbers come from the attribution engine; this module only formats them.
"""

from __future__ import annotations

import json

from specnsys.attribution.timeline import PhaseBreakdown


def phases_dict(b: PhaseBreakdown) -> dict[str, object]:
    """The JSON document of ``specnsys phases --json``."""
    rows = b.frame.to_dicts()
    return {
        "pid": b.pid,
        "window_start_ns": b.window_start_ns,
        "window_end_ns": b.window_end_ns,
        "window_ns": b.window_ns,
        "gpu_union_ns": b.gpu_union_ns,
        "phases": {r.pop("phase"): r for r in rows},
    }


def render_phases_json(b: PhaseBreakdown) -> str:
    return json.dumps(phases_dict(b), indent=2)


def render_phases_text(b: PhaseBreakdown) -> str:
    ms = 1e6
    lines = [
        f"process {b.pid}: window {b.window_ns / ms:.3f} ms "
        f"({b.window_start_ns} to {b.window_end_ns} ns on the session clock); "
        f"GPU busy {b.gpu_union_ns / ms:.3f} ms",
        "exclusive wall time per phase (shares of the window; they sum to 100%)",
        "",
        f"{'phase':<18}{'wall ms':>11}{'share':>8}{'GPU busy ms':>13}{'kernels':>9}"
        f"{'launches':>10}{'CPU incl ms':>13}",
    ]
    for r in b.frame.sort("wall_ns", descending=True).iter_rows(named=True):
        if r["wall_ns"] == 0 and r["cpu_inclusive_ns"] == 0 and r["kernels"] == 0:
            continue
        lines.append(
            f"{r['phase']:<18}{r['wall_ns'] / ms:>11.3f}{r['share']:>8.1%}"
            f"{r['gpu_busy_ns'] / ms:>13.3f}{r['kernels']:>9,}{r['launches']:>10,}"
            f"{r['cpu_inclusive_ns'] / ms:>13.3f}"
        )
    total = int(b.frame["wall_ns"].sum())
    lines.append(f"{'total':<18}{total / ms:>11.3f}{total / b.window_ns if b.window_ns else 0:>8.1%}")
    return "\n".join(lines)
