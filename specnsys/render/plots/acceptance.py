"""Figure 3, acceptance: per-position acceptance and accepted tokens per step vs the model.

Left: the fraction of steps whose i-th draft token was accepted, against ``alpha^i`` (the
i.i.d. model of Leviathan et al. with the estimated ``alpha``). Right: how many draft tokens
each step accepted, against the truncated geometric distribution the same ``alpha`` predicts
(``alpha^n (1 - alpha)`` for ``n < k``, ``alpha^k`` for ``n = k``). Where the bars leave the
model, acceptance is not i.i.d. (e.g. it falls with position faster than geometric).
Values are printed in the tick labels, so no label can sit on a bar or a marker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from matplotlib.figure import Figure

from specnsys.render.palette import phase_color
from specnsys.render.plots.common import new_figure, not_available_panel, style, suptitle

if TYPE_CHECKING:
    from specnsys.render.documents import Acceptance, AnalysisDoc
    from specnsys.render.renderer import RenderOptions
    from specnsys.render.runs import Run

__all__ = ["AcceptanceFigure", "acceptance_data", "acceptance_figure"]


class AcceptanceFigure(TypedDict):
    """What :func:`acceptance_figure` draws (only the title and why, when not available)."""

    kind: str
    title: str
    not_available: str | None
    k: NotRequired[int]
    alpha: NotRequired[float]
    tokens_per_step: NotRequired[float]
    positions: NotRequired[list[int]]
    by_position: NotRequired[list[float]]
    geometric: NotRequired[list[float]]
    accepted: NotRequired[list[int]]
    histogram: NotRequired[list[float] | None]
    histogram_source: NotRequired[str]
    expected: NotRequired[list[float]]
    note: NotRequired[str | None]


def _histogram(acc: Acceptance, k: int) -> tuple[list[float] | None, str]:
    """Fractions of steps by accepted count 0..k, and where they come from (or why not)."""
    counts = acc.get("accepted_histogram")
    if isinstance(counts, Mapping):
        counts = [counts.get(n, counts.get(str(n), 0)) for n in range(k + 1)]
    if isinstance(counts, Sequence) and len(counts) and sum(counts) > 0:
        total = float(sum(counts))
        return [c / total for c in counts], f"counted over {int(total)} sequence-steps"
    # Accepted drafts form a prefix, so "i-th draft accepted" means "at least i accepted" and
    # the distribution is the difference of consecutive per-position fractions.
    survival = [1.0, *acc.get("by_position", []), 0.0]
    if any(b > a + 1e-12 for a, b in zip(survival, survival[1:], strict=False)):
        return (
            None,
            "per-position acceptance rises with position, so the histogram cannot be derived",
        )
    return [a - b for a, b in zip(survival, survival[1:], strict=False)], (
        "derived from per-position acceptance"
    )


def _reason(analysis: AnalysisDoc) -> str:
    na = analysis.get("not_available")
    told = na.get("acceptance") if na else None
    if told:
        return str(told)
    if analysis.get("mode") == "baseline":
        return "a baseline run proposes no draft tokens"
    return "the trace has no proposed/accepted marks"


def acceptance_data(analysis: AnalysisDoc) -> AcceptanceFigure:
    """What figure 3 draws for *analysis* (an ``analyze --json`` dict of a speculative run)."""
    acc = analysis.get("acceptance")
    if not acc or not acc.get("by_position"):
        return {
            "kind": "acceptance",
            "title": "acceptance: not available",
            "not_available": _reason(analysis),
        }
    by_position = [float(v) for v in acc["by_position"]]
    k = int(acc.get("k") or len(by_position))
    alpha = float(acc["alpha"])
    tau = float(acc.get("tokens_per_step", float(acc.get("mean_accepted", 0.0)) + 1.0))
    positions = list(range(1, len(by_position) + 1))
    hist, source = _histogram(acc, len(by_position))
    expected = [alpha**n * (1 - alpha) for n in range(len(by_position))] + [
        alpha ** len(by_position)
    ]
    k_values = acc.get("k_values") or [k]
    mixed = len(k_values) > 1
    return {
        "kind": "acceptance",
        "title": f"alpha = {alpha:.2f}: {tau:.2f} tokens per step of {k + 1} possible (k = {k})",
        "not_available": None,
        "k": k,
        "alpha": alpha,
        "tokens_per_step": tau,
        "positions": positions,
        "by_position": by_position,
        "geometric": [alpha**i for i in positions],
        "accepted": list(range(len(by_position) + 1)),
        "histogram": hist,
        "histogram_source": source,
        "expected": expected,
        "note": (
            f"steps proposed different k ({', '.join(map(str, k_values))}): the model curve "
            f"assumes k = {k}"
            if mixed
            else None
        ),
    }


def acceptance_figure(data: AcceptanceFigure) -> Figure:
    """Draw figure 3 from :func:`acceptance_data`."""
    with style("acceptance"):
        fig = new_figure(10, 4.8)
        suptitle(fig, data["title"])
        reason = data.get("not_available")
        if reason:
            not_available_panel(fig.add_subplot(), "acceptance", reason)
            return fig
        left, right = fig.subplots(1, 2)
        color = phase_color("draft")
        pos = data["positions"]
        left.bar(pos, data["by_position"], color=color, edgecolor="#2F6B2F", lw=0.8,
                 label="measured")  # fmt: skip
        left.plot(pos, data["geometric"], "o-", color="#222222", ms=5, lw=1.4,
                  label=f"model: alpha^i, alpha = {data['alpha']:.2f}")  # fmt: skip
        left.set_xticks(
            pos, [f"{i}\n{v:.0%}" for i, v in zip(pos, data["by_position"], strict=True)]
        )
        left.set_ylim(0, 1.05)
        left.set_xlabel("draft position i (measured share below)")
        left.set_ylabel("steps whose i-th draft was accepted")
        left.set_title("per-position acceptance", fontsize=10)
        left.yaxis.set_major_formatter(lambda v, _p: f"{v:.0%}")
        left.legend(loc="upper right", fontsize=8.5)

        n = data["accepted"]
        if data["histogram"] is None:
            not_available_panel(right, "accepted tokens per step", data["histogram_source"])
        else:
            right.bar(n, data["histogram"], color=color, edgecolor="#2F6B2F", lw=0.8,
                      label="measured")  # fmt: skip
            # Markers only: the model's mass at n = k collects every longer run, a line
            # between n = k - 1 and n = k would suggest a trend that is not there.
            right.plot(n, data["expected"], "D", color="#222222", ms=6,
                       label=f"truncated geometric, alpha = {data['alpha']:.2f}")  # fmt: skip
            right.set_xticks(
                n, [f"{i}\n{v:.0%}" for i, v in zip(n, data["histogram"], strict=True)]
            )
            top = max(max(data["histogram"]), max(data["expected"]))
            right.set_ylim(0, min(1.05, top * 1.3 + 0.02))
            right.set_xlabel(
                f"draft tokens accepted in a step (measured share below;\n"
                f"{data['histogram_source']})"
            )
            right.set_ylabel("share of steps")
            right.set_title("accepted draft tokens per step", fontsize=10)
            right.yaxis.set_major_formatter(lambda v, _p: f"{v:.0%}")
            right.legend(loc="upper left", fontsize=8.5)
        note = data.get("note")
        if note:
            fig.supxlabel(note, fontsize=8, color="#666666")
        return fig


def from_runs(runs: Sequence[Run], options: RenderOptions) -> AcceptanceFigure:
    """The acceptance of the first speculative run (else the first run, which says why it
    has none) (``plot acceptance``)."""
    spec = next((r for r in runs if r.analysis.mode == "spec"), runs[0])
    return acceptance_data(spec.data)
