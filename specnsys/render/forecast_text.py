"""Terminal text of ``specnsys forecast`` and ``specnsys advise``.

Pure formatting of the typed results of :mod:`specnsys.forecasting.results`: every number shown
is a field of the result (a missing one is "n/a" and its reason is listed), nothing is
derived here.
"""

from __future__ import annotations

from collections.abc import Sequence

from specnsys.forecasting.results import (
    Advice,
    Cell,
    CostModel,
    Forecast,
    FormulaForecast,
    HeldOut,
    Interval,
    Term,
)
from specnsys.render.numbers import fixed_or_exponent
from specnsys.results import NotAvailable

__all__ = ["render_advice_text", "render_forecast_text", "render_formula_text"]

_UNITS = {
    "step": "",
    "batch": "batch",
    "ctx": "ctx",
    "positions": "(k+1)*batch",
    "ctx_positions": "(k+1)*ctx",
    "forwards": "F",
    "forward_batch": "F*batch",
    "forward_ctx": "F*ctx",
    "steps": "steps",
    "sequence_steps": "sequence-steps",
    "requests": "requests",
    "run": "",
    "prefill": "",
    "input_tokens": "input tokens",
}


def _n(x: float | int | NotAvailable | None, spec: str = ".2f", suffix: str = "") -> str:
    if x is None or isinstance(x, NotAvailable):
        return "n/a"
    return f"{format(x, spec)}{suffix}"


def _ms(x: float | NotAvailable) -> str:
    return "n/a" if isinstance(x, NotAvailable) else f"{x / 1e6:.3f}"


def _interval(x: Interval | NotAvailable, scale: float = 1.0, spec: str = ".2f") -> str:
    if isinstance(x, NotAvailable):
        return ""
    return f" [{format(x.low / scale, spec)}..{format(x.high / scale, spec)}]"


def term_text(t: Term) -> str:
    """``verify_ns = 1,272,348 + 14,671 x (k+1)*batch``, with the rows and fit quality."""
    lhs = t.formula.split(" = ")[0]
    parts = []
    for name, c in t.coefficients.items():
        unit = _UNITS.get(name, name)
        if name == "input_tokens_beyond" and t.knot is not None:
            unit = f"max(0, input tokens - {t.knot:.0f})"
        value = f"{abs(c):,.0f}" if abs(c) >= 10 else f"{abs(c):,.3g}"
        sign = "-" if c < 0 else "+"
        parts.append((sign, f"{value} x {unit}" if unit else value))
    rhs = " ".join(f"{s} {p}" for s, p in parts).lstrip("+ ")
    if parts and parts[0][0] == "-":
        rhs = "-" + rhs.lstrip("- ")
    quality = f"R^2 {_n(t.r2)}, spread {_n(t.relative_rms, '.0%')}"
    cal = "" if isinstance(t.calibration, NotAvailable) else f", x {t.calibration:.3f} exclusive/range"
    return f"{lhs} = {rhs or '0'}  ({t.rows}; {quality}{cal})"


def _model_lines(model: CostModel) -> list[str]:
    lines = ["", "cost model (ns; F = draft forwards per step, ctx = context tokens of the batch):"]
    lines += [f"  {t.name}: {term_text(t)}" for t in model.terms]
    for t in model.terms:
        reasons: dict[str, list[str]] = {}
        for name, why in t.dropped.items():
            if not why.startswith("the context length"):
                reasons.setdefault(why, []).append(name)
        for why, names in reasons.items():
            lines.append(f"    {t.name}: {', '.join(names)} not fitted: {why}")
    for profile in model.acceptance:
        where = ", ".join(f"{k}={v}" for k, v in profile.sampling.items()) or "all runs"
        rates = " ".join(f"{q:.2f}" for q in profile.conditional)
        lines.append(
            f"  acceptance ({where}; {profile.sequence_steps} sequence-steps of {profile.runs} "
            f"runs): per position {rates}; alpha {_n(profile.alpha, '.3f')}"
        )
    if model.missing:
        lines.append("  not available:")
        lines += [f"    {name}: {why}" for name, why in model.missing.items()]
    return lines


def _held_out_line(h: HeldOut) -> str:
    if not h.runs:
        reason = h.median_abs_error.reason if isinstance(h.median_abs_error, NotAvailable) else ""
        return f"error on runs it did not see: not available ({reason})"
    return (
        f"error on runs it did not see: median {_n(h.median_abs_error, '.1%')}, max "
        f"{_n(h.max_abs_error, '.1%')} over {len(h.runs)} runs (time per token; each run "
        "predicted by the model fitted without it)"
    )


def _cell_row(c: Cell) -> list[str]:
    warn = " !" if c.verify_ratio_warning is True else ""
    return [
        str(c.concurrency), str(c.k), _n(c.p, ".3f"), _n(c.amdahl_ceiling, ".2f", "x"),
        _ms(c.baseline_ns_per_output_token),
        _ms(c.ns_per_output_token) + _interval(c.ns_per_output_token_interval, 1e6, ".3f"),
        _n(c.speedup, ".2f", "x") + _interval(c.speedup_interval),
        _n(c.amdahl_speedup, ".2f", "x"), _n(c.r, ".2f"), _n(c.tokens_per_step, ".2f"),
        f"{_n(c.best_k, 'd')} ({_n(c.best_k_speedup, '.2f', 'x')})", _n(c.draft_cost_ratio, ".3f"),
        _n(c.break_even_c, ".3f"), _n(c.verify_to_forward, ".2f") + warn,
        _n(c.measured_speedup, ".2f", "x"),
    ]  # fmt: skip


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render_forecast_text(f: Forecast) -> str:
    """The forecast as text: what it was fitted on and its error, the cells, what to cut
    first, the terms, and everything assumed."""
    fit, w = f.model.fitted_on, f.workload
    inputs = (
        f"input {w.input_tokens_mean:.1f} tokens mean"
        if not isinstance(w.input_tokens_mean, NotAvailable) else "input lengths unknown"
    )  # fmt: skip
    lines = [
        f"forecast of {w.source}: {w.requests} requests per run ({inputs}, output "
        f"{w.output_tokens_mean:.1f} mean, {w.output_tokens_max} max"
        f"{', weighted' if w.weighted else ''})",
        f"fitted on {fit.runs} runs ({fit.baseline_runs} baseline, {fit.spec_runs} speculative; "
        f"k {', '.join(map(str, fit.k)) or '-'}; concurrency "
        f"{', '.join(map(str, fit.concurrency))}; {fit.decode_steps} decode steps)",
        _held_out_line(f.held_out),
    ]
    if f.cuts:
        lines.append("with cuts: " + ", ".join(c.text for c in f.cuts))
    head = ["conc", "k", "p", "ceiling", "base ms/tok", "spec ms/tok", "speedup", "amdahl(p,r)",
            "r", "tok/step", "best k", "c", "break-even c", "verify/fwd", "measured"]  # fmt: skip
    lines += ["", *_table([head, *(_cell_row(c) for c in f.cells)])]
    lines.append(
        "speedup: the step model (baseline / speculative time per output token) [prediction "
        "interval]; amdahl(p,r): Amdahl's law on the same prediction; ! verify/fwd above 1.3"
    )
    for c in f.cells:
        if not c.cut_first:
            continue
        cuts = "; ".join(
            f"{x.phase} {x.ns_per_token_saved / 1e6:.3f} ms/token (p {_n(x.p_after, '.2f')}, "
            f"ceiling {_n(x.ceiling_after, '.2f', 'x')}, speedup {_n(x.speedup_after, '.2f', 'x')})"
            for x in c.cut_first[:3]
        )
        lines.append(f"cut first at concurrency {c.concurrency}, k {c.k}: {cuts}")
    lines += _model_lines(f.model)
    na: dict[str, None] = {}
    for c in f.cells:
        for name in ("speedup", "break_even_c", "measured_speedup", "best_k"):
            value = getattr(c, name)
            if isinstance(value, NotAvailable):
                na.setdefault(f"{name}: {value.reason}", None)
    if na:
        lines.append("  in the cells:")
        lines += [f"    {text}" for text in na]
    if f.assumptions:
        lines += ["", "assumed:"]
        lines += [f"  - {a}" for a in f.assumptions]
    return "\n".join(lines)


def _times(x: float | NotAvailable) -> str:
    """A speedup: two decimals and ``x`` (exponent form from a million up)."""
    return "n/a" if isinstance(x, NotAvailable) else fixed_or_exponent(x, ".2f") + "x"


def _best_k(f: FormulaForecast) -> str:
    """The best k, the range searched, and whether the search stopped at its end (then a
    larger k may be better: alpha = 1 with c = 0 gets better with every k)."""
    searched = f"best k {_n(f.best_k, 'd')} of 1..{_n(f.k_max, 'd')}"
    if isinstance(f.best_k, int) and f.best_k == f.k_max:
        return (
            f"{searched} ({_times(f.best_k_speedup)}; the search limit: a larger k may be "
            "better, --k-max)"
        )
    return f"{searched} ({_times(f.best_k_speedup)})"


def render_formula_text(f: FormulaForecast) -> str:
    lines = []
    if not isinstance(f.tokens_per_step, NotAvailable):
        lines.append(
            f"alpha {f.alpha}, k {f.k}, c {f.c}: {f.tokens_per_step:.2f} tokens per step "
            f"(Leviathan's expectation) for a step of {_n(f.step_cost)} target forwards: "
            f"{_times(f.decode_speedup)} decode; {_best_k(f)}"
        )
    if not isinstance(f.p, NotAvailable):
        lines.append(
            f"p {f.p:g}, r {_n(f.r, '.3g')}: end to end {_times(f.speedup)}; "
            f"Amdahl ceiling {_times(f.amdahl_ceiling)}"
        )
    lines += [f"  {k} = {v}" for k, v in f.definitions.items()]
    return "\n".join(lines)


def render_advice_text(a: Advice) -> str:
    cell = a.forecast.cells[0]
    lines = [
        f"advice for {a.source} at concurrency {a.concurrency}"
        + (f", k {a.k}" if a.k else "")
        + f" (forecast speedup {_n(cell.speedup, '.2f', 'x')}, p {_n(cell.p, '.3f')})",
        _held_out_line(a.forecast.held_out),
        "",
    ]
    for s in a.steps:
        lines.append(f"{s.order}. {s.what}: {s.advice}")
        lines.append(f"   figure: {s.figure}")
        lines.append(f"   see: {s.command}")
    if a.cuts:
        lines += ["", "cut after cut (each on top of the ones before):"]
        rows = [["phase", "ms/token", "p after", "ceiling", "speedup"]]
        rows += [[c.phase, f"{c.ns_per_token_saved / 1e6:.3f}", _n(c.p_after, ".3f"),
                  _n(c.ceiling_after, ".2f", "x"), _n(c.speedup_after, ".2f", "x")]
                 for c in a.cuts]  # fmt: skip
        lines += [f"  {r}" for r in _table(rows)]
    if a.forecast.assumptions:
        lines += ["", "assumed:"]
        lines += [f"  - {x}" for x in a.forecast.assumptions]
    return "\n".join(lines)
