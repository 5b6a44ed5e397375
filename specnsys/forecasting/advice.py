"""``specnsys advise``: the article's three next steps, in its order, each with its figure.

1. **Cut the non-accelerable items first.** Speculation only speeds up the target's decode
   forwards, so every other phase caps what it can give. The phases are taken in the order of
   their predicted time per output token in the speculative run, each cumulatively removed
   from both runs, with the forecast p, ceiling and speedup after each cut.
2. **Then set k** from the predicted speedup against k at the configuration's concurrency
   (the step model), not by feel.
3. **Then size the draft**: the draft cost ratio c that would break even at the best k, the
   measured one, and the forecast with a draft twice as cheap.

Only the forecast's numbers are used; nothing here reads a trace.
"""

from __future__ import annotations

from collections.abc import Sequence

from specnsys.forecasting.results import Advice, AdviceStep, Cell, CutStep, Forecast
from specnsys.results import NotAvailable
from specnsys.vocabulary import ACCELERABLE

__all__ = ["CUT_SHARE_MIN", "CUTS_MAX", "advise_forecast", "cumulative_cuts"]

CUT_SHARE_MIN = 0.01
"""A phase is worth listing when it is at least this share of the speculative run's time."""
CUTS_MAX = 4


def cumulative_cuts(cell: Cell) -> tuple[CutStep, ...]:
    """The cell's non-accelerable phases, most worth first, each removed on top of the ones
    before it (advice step 1)."""
    spec = dict(cell.phases_ns_per_token)
    base = dict(cell.baseline_phases_ns_per_token)
    if not spec:
        spec_total = 0.0
        order = [
            (p, v) for p, v in sorted(base.items(), key=lambda kv: -kv[1]) if p not in ACCELERABLE
        ]
    else:
        spec_total = sum(spec.values())
        order = [(c.phase, c.ns_per_token_saved) for c in cell.cut_first]
    total = spec_total or sum(base.values())
    steps = []
    base_left = sum(base.values())
    spec_left = spec_total
    accel = sum(v for p, v in base.items() if p in ACCELERABLE)
    for phase, saved in order[:CUTS_MAX]:
        if saved < CUT_SHARE_MIN * total:
            break
        base_left -= base.get(phase, 0.0)
        spec_left -= spec.get(phase, 0.0)
        p_after: float | NotAvailable = (
            accel / base_left if base_left > 0 else NotAvailable("nothing left")
        )
        ceiling: float | NotAvailable = (
            1.0 / (1.0 - p_after) if isinstance(p_after, float) and p_after < 1.0
            else NotAvailable("p = 1: no finite ceiling")
        )  # fmt: skip
        speedup: float | NotAvailable = (
            base_left / spec_left if spec and spec_left > 0
            else NotAvailable("no speculative forecast")
        )  # fmt: skip
        steps.append(CutStep(phase, saved, p_after, ceiling, speedup))
    return tuple(steps)


def _fmt(x: float | NotAvailable, spec: str, suffix: str = "") -> str:
    return "n/a" if isinstance(x, NotAvailable) else f"{format(x, spec)}{suffix}"


def _cut_step(cell: Cell, cuts: Sequence[CutStep], source: str) -> AdviceStep:
    if not cuts:
        return AdviceStep(1, "cut the non-accelerable items first",
                          "no non-accelerable phase takes 1% of the time: nothing to cut first",
                          f"p {_fmt(cell.p, '.2f')}", f"specnsys forecast {source}")  # fmt: skip
    names = ", ".join(f"{c.phase} ({c.ns_per_token_saved / 1e6:.3f} ms/token)" for c in cuts)
    path = " -> ".join(_fmt(c.p_after, ".2f") for c in cuts)
    last = cuts[-1]
    flags = " ".join(f"--cut {c.phase}=0" for c in cuts)
    figure = (
        f"p {_fmt(cell.p, '.2f')} -> {path} after each cut (ceiling {_fmt(cell.amdahl_ceiling, '.2f', 'x')}"
        f" -> {_fmt(last.ceiling_after, '.2f', 'x')}; speedup {_fmt(cell.speedup, '.2f', 'x')} -> "
        f"{_fmt(last.speedup_after, '.2f', 'x')})"
    )  # fmt: skip
    return AdviceStep(
        1, "cut the non-accelerable items first",
        f"speculation cannot speed up {names}; each one cut raises the ceiling on what it can give",
        figure, f"specnsys forecast {source} {flags}",
    )  # fmt: skip


def _k_step(cell: Cell, source: str) -> AdviceStep:
    plot = f"specnsys plot forecast {source} -o forecast.png"
    if isinstance(cell.best_k, NotAvailable) or isinstance(cell.best_k_speedup, NotAvailable):
        return AdviceStep(2, "then set k", f"not available: {cell.best_k}",
                          "n/a", plot)  # fmt: skip
    now = _fmt(cell.speedup, ".2f", "x")
    best = f"{cell.best_k_speedup:.2f}x"
    if cell.best_k_speedup <= 1.0:
        advice = (
            f"no k pays at concurrency {cell.concurrency}: the best, k = {cell.best_k}, gives "
            f"{best}; cut first (step 1) or use a cheaper draft (step 3)"
        )
    elif cell.best_k == cell.k:
        advice = f"keep k = {cell.k}: it is the best at concurrency {cell.concurrency} ({best})"
    else:
        advice = (
            f"set k = {cell.best_k} (from {cell.k}): {best} instead of {now} at concurrency "
            f"{cell.concurrency}"
        )
    figure = f"predicted speedup {now} at k = {cell.k}, {best} at k = {cell.best_k}"
    return AdviceStep(2, "then set k", advice, figure, plot)


def _draft_step(cell: Cell, half: Forecast | None, source: str) -> AdviceStep:
    c, even = cell.draft_cost_ratio, cell.break_even_c
    command = f"specnsys forecast {source} --cut draft=-50%"
    if isinstance(c, NotAvailable):
        return AdviceStep(3, "then size the draft", f"not available: {c.reason}", "n/a",
                          command)  # fmt: skip
    halved = half.cells[0] if half is not None and half.cells else None
    at_half = _fmt(halved.speedup, ".2f", "x") if halved is not None else "n/a"
    k_half = halved.k if halved is not None else cell.k
    if isinstance(even, NotAvailable):
        advice = f"no draft size pays at k = {cell.k}: {even.reason}"
    elif c <= even:
        advice = (
            f"the draft (c = {c:.3f} of a target forward) is below break-even ({even:.3f}); a "
            f"cheaper one still adds: half its cost gives {at_half} at k = {k_half}"
        )
    else:
        advice = (
            f"the draft is too expensive: c = {c:.3f} of a target forward, speculation breaks "
            f"even at c = {even:.3f}; a draft half as costly gives {at_half} at k = {k_half}"
        )
    figure = f"c {c:.3f}, break-even c {_fmt(even, '.3f')}, speedup at c/2: {at_half}"
    return AdviceStep(3, "then size the draft", advice, figure, command)


def advise_forecast(
    forecast: Forecast, source: str, half: Forecast | None, data_warnings: Sequence[str] = ()
) -> Advice:
    """The three steps (module docs) from *forecast* (one cell: the configuration the sources
    ran) and *half* (the same with the draft half as costly, at the best k)."""
    cell = forecast.cells[0]
    cuts = cumulative_cuts(cell)
    steps = (_cut_step(cell, cuts, source), _k_step(cell, source),
             _draft_step(cell, half, source))  # fmt: skip
    return Advice(source, cell.concurrency, cell.k, steps, cuts, forecast, tuple(data_warnings))
