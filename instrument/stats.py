"""Summary statistics of a run as the runner prints them (latency, throughput, acceptance).

Acceptance follows docs/design.md#metrics: ``mean_accepted`` counts accepted drafts per step
excluding the bonus token, ``tokens_per_step`` includes it, and ``per_position[i]`` is the
fraction of steps whose (i+1)-th draft was accepted (per-position survival).
"""

from __future__ import annotations

import math
from typing import Any

from instrument.loop import RunResult


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _dist(values: list[float]) -> dict[str, float]:
    mean = sum(values) / len(values) if values else math.nan
    return {"mean": mean, "p50": percentile(values, 50), "p90": percentile(values, 90)}


def acceptance(accepted: list[int], k: int) -> dict[str, Any]:
    """Acceptance statistics from per-sequence-per-step accepted counts."""
    steps = len(accepted)
    if steps == 0 or k == 0:
        return {"steps": 0, "k": k}
    hist = [0] * (k + 1)
    for n in accepted:
        hist[n] += 1
    per_position = [sum(1 for n in accepted if n >= i) / steps for i in range(1, k + 1)]
    mean = sum(accepted) / steps
    return {
        "steps": steps,
        "k": k,
        "mean_accepted": mean,
        "tokens_per_step": mean + 1,
        "per_position": per_position,
        "histogram": hist,
    }


def summarize(run: RunResult) -> dict[str, Any]:
    """A JSON-ready summary; times in milliseconds, TTFT measured from admission."""
    ttft = [(r.t_first_ns - r.t_admit_ns) / 1e6 for r in run.results]
    tpot = [
        (r.t_end_ns - r.t_first_ns) / 1e6 / (len(r.output) - 1)
        for r in run.results
        if len(r.output) > 1
    ]
    out_tokens = sum(len(r.output) for r in run.results)
    wall_s = run.wall_ns / 1e9
    return {
        "mode": run.mode,
        "k": run.k,
        "concurrency": run.concurrency,
        "requests": len(run.results),
        "prompt_tokens": sum(r.prompt_len for r in run.results),
        "output_tokens": out_tokens,
        "wall_s": wall_s,
        "tokens_per_s": out_tokens / wall_s if wall_s > 0 else math.nan,
        "ttft_ms": _dist(ttft),
        "tpot_ms": _dist(tpot),
        "target_forwards": run.target_forwards,
        "draft_forwards": run.draft_forwards,
        "target_bytes": run.target_bytes,
        "acceptance": acceptance(run.accepted, run.k),
    }
