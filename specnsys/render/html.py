"""The self-contained HTML report: one file, figures inlined as SVG, nothing fetched.

Pure rendering of results computed elsewhere (``analyze``/``compare`` dicts, the what-to-cut
ranking, figure SVGs): the answer first, then the figures, the ranking, the comparison and
analysis tables, and what could not be measured and why. The page has no script, no external
stylesheet, font or image, and no URL at all, so it opens the same offline, from an email
attachment or a CI artifact.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

from specnsys.metrics.tokens import source_words
from specnsys.render.analyze_text import registered_lines, straggler_line, unlisted
from specnsys.render.documents import (
    ABDoc,
    AnalysisDoc,
    ComparisonDoc,
    RanksDoc,
    Spread,
    WhatCutDoc,
    is_ab,
)
from specnsys.render.palette import phase_color

__all__ = ["ReportFigure", "inline_svg", "render_report_html"]


@dataclass(frozen=True)
class ReportFigure:
    """One figure of the report: its kind, its title (the finding) and its SVG markup."""

    kind: str
    title: str
    svg: str


_CSS = """
:root { --ink: #1d1d1f; --muted: #5f6368; --line: #e3e3e3; --accent: #d62728; --bg: #fafafa; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; }
header h1 { font-size: 26px; margin: 0 0 4px; }
header p { margin: 0; color: var(--muted); }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px;
          padding: 18px 22px; margin: 18px 0; }
h2 { font-size: 19px; margin: 0 0 10px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
#answer { border-left: 6px solid var(--accent); }
#answer p { font-size: 17px; margin: 6px 0; }
#answer .warn { color: #8a4b00; font-size: 15px; }
figure { margin: 12px 0 24px; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
table { border-collapse: collapse; width: 100%; font-size: 14px; margin: 6px 0 12px; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: right;
         white-space: nowrap; }
th { background: #f4f4f4; font-weight: 600; }
th.l, td.l { text-align: left; }
th, td.l { white-space: normal; }  /* text and headers wrap at spaces; numbers never */
.name { overflow-wrap: anywhere; }  /* a phase name wraps anywhere: engines' op names are long */
table.kv { width: auto; min-width: 48%; }
@media (max-width: 900px) { .pair { grid-template-columns: 1fr !important; } }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.3fr); gap: 24px;
        align-items: start; }
.text { display: block; text-align: left; white-space: normal; }
tr.accelerable td { font-weight: 600; }
.chip { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
        margin-right: 6px; vertical-align: -1px; border: 1px solid rgba(0,0,0,.25); }
.na { color: var(--muted); }
nav a { margin-right: 14px; color: var(--ink); }
footer { color: var(--muted); font-size: 13px; text-align: center; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ms(ns: float | int | None, digits: int = 3) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:,.{digits}f}"


def _pct(share: float | None, digits: int = 1) -> str:
    return "n/a" if share is None else f"{share:.{digits}%}"


def _x(speedup: float | None) -> str:
    return "n/a" if speedup is None else f"{speedup:.2f}x"


def _with_unit(text: str, unit: str) -> str:
    return text if text == "n/a" else f"{text} {unit}"


def _signed(share: float | None, fmt: str = "+.1%") -> str:
    return "n/a" if share is None else format(share, fmt)


def _delta_ms(ns: float | None, fmt: str) -> str:
    """A change in ns, as ms formatted by *fmt* (``+.3f``): ``n/a`` when there is none."""
    return "n/a" if ns is None else format(ns / 1e6, fmt)


def _num(value: float | int | None, fmt: str = ".3f") -> str:
    return "n/a" if value is None else format(value, fmt)


def _tokens(a: AnalysisDoc) -> str:
    """The output tokens and, when counted, where the count came from."""
    if a.get("tokens") is None:
        return "n/a"
    return f"{_num(a.get('tokens'), ',')} ({_e(source_words(a.get('tokens_source')))})"


def _phase(name: str) -> str:
    return (
        f'<span class="chip" style="background:{phase_color(name)}"></span>'
        f'<span class="name">{_e(name)}</span>'
    )


def _table(
    head: Sequence[str],
    rows: Sequence[Sequence[str]],
    classes: Sequence[str] = (),
    *,
    left: int = 1,
    kind: str = "",
) -> str:
    """A table; *rows* are already-escaped cell markup (numbers or phase chips).

    The first *left* columns are text (left-aligned), the rest numbers (right-aligned);
    *classes* are per-row classes, *kind* the table's class (``kv`` for metric/value pairs).
    """

    def cell(tag: str, i: int, body: str) -> str:
        return f'<{tag} class="l">{body}</{tag}>' if i < left else f"<{tag}>{body}</{tag}>"

    out = [f'<table class="{kind}">' if kind else "<table>"]
    out.append("<thead><tr>" + "".join(cell("th", i, _e(h)) for i, h in enumerate(head)))
    out.append("</tr></thead><tbody>")
    for n, row in enumerate(rows):
        cls = f' class="{classes[n]}"' if n < len(classes) and classes[n] else ""
        out.append(f"<tr{cls}>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


CAPTIONS = {
    "phases": "Exclusive wall time per phase: every instant of a run's window belongs to exactly "
    "one phase, so a bar's segments add up to the run's time (per output token when the runs "
    "counted their tokens).",
    "amdahl": "Amdahl's law for the baseline's bottleneck share p: the end-to-end speedup over "
    "the baseline as the accelerable part gets r times faster, its ceiling 1 / (1 - p), the "
    "measured and predicted operating points, and the speedup if one non-accelerable phase went "
    "to zero as well; every speedup on the chart is over the baseline run.",
    "acceptance": "Draft tokens accepted by position and per step, against the i.i.d. model "
    "with the estimated alpha: where the bars leave the model, acceptance is not i.i.d.",
    "sweep": "Predicted (Amdahl, from the baseline's p and each run's r) against measured "
    "speedup per output token, run by run.",
    "timeline": "One window as lanes: phase ranges on the driver thread, its CUDA API calls, GPU "
    "work coloured by the phase that launched it, and the GPU's idle gaps labelled with what the "
    "CPU did meanwhile.",
}
"""What each figure shows (its title, inside the SVG, says what it found)."""

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(\bid="|href="#|url\(#)([^")]+)')
_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_SIZE = re.compile(r'\s+(?:width|height)="[^"]*"')


def inline_svg(svg: str, prefix: str, label: str) -> str:
    """Matplotlib SVG markup made fit to sit inside an HTML page next to other figures.

    Drops the XML prolog and DOCTYPE and the namespace declarations (HTML's parser puts
    inline SVG in the SVG namespace by itself; the declarations are URLs the page has no
    use for), prefixes every element id and reference with *prefix* (two figures both define
    glyphs and clip paths of the same name, and ids must be unique in a page), and lets the
    figure scale with the page through its viewBox.
    """
    start = svg.find("<svg")
    if start < 0:
        raise ValueError("not SVG markup: no <svg element")
    body = svg[start:]
    ids = set(_ID.findall(body))

    def scoped(m: re.Match[str]) -> str:
        return m.group(1) + prefix + m.group(2) if m.group(2) in ids else m.group(0)

    body = _REF.sub(scoped, body)
    tag_end = body.index(">")
    tag = _SIZE.sub("", _XMLNS.sub("", body[:tag_end]))
    tag += f' role="img" aria-label="{_e(label)}"'
    return tag + body[tag_end:]


def _run_of(whatcut: WhatCutDoc) -> str:
    """The run a what-to-cut speedup is over: the baseline run (the Amdahl figure's frame) when
    the cut was computed on one, else the run analyzed."""
    return "the baseline run" if whatcut.get("mode") == "baseline" else "this run"


def _answer(
    runs: Sequence[tuple[str, AnalysisDoc]],
    comparison: ComparisonDoc | ABDoc | None,
    whatcut: WhatCutDoc,
) -> str:
    lines: list[str] = []
    if comparison is not None and is_ab(comparison):
        lines += _ab_answer(comparison)
    elif comparison is not None:
        lines += _comparison_answer(comparison)
    ceiling = whatcut.get("ceiling")
    if whatcut.get("p") is not None:
        names = " + ".join(whatcut.get("accelerable") or [])
        names = "the decode forward passes" if names == "forward" else names
        rest = whatcut.get("non_accelerable_share")
        where = "the baseline's" if whatcut.get("mode") == "baseline" else "this run's"
        lines.append(
            f"Even if {_e(names)} cost nothing, this workload could run at most "
            f"<b>{_x(ceiling)}</b> faster: {_pct(rest, 0)} of {where} time is not accelerable."
        )
    candidates = whatcut.get("candidates") or []
    if candidates and whatcut.get("mode") == "generic":
        top = candidates[0]
        lines.append(
            f"A generic run (no forward, draft or verify phase): no Amdahl ceiling for "
            f"speculative decoding applies. Cut first: {_phase(top['phase'])} "
            f"({_pct(top['share'], 0)} of the time); without it this run would be "
            f"<b>{_x(top.get('speedup_if_removed'))}</b> faster (W / (W - x))."
        )
    elif candidates:
        top = candidates[0]
        lines.append(
            f"Cut first: {_phase(top['phase'])} ({_pct(top['share'], 0)} of the time). If it went "
            f"to zero, p would rise to {_num(top.get('p_after'), '.2f')} and the ceiling from "
            f"{_x(ceiling)} to <b>{_x(top.get('ceiling_after'))}</b>; with free accelerable work "
            f"as well, that is {_x(top.get('combined_ceiling'))} over {_run_of(whatcut)}."
        )
    elif whatcut.get("not_available"):
        lines.append(f"What to cut: not available ({_e(whatcut['not_available'])}).")
    warnings = [w for _label, a in runs for w in a.get("warnings") or []]
    warnings += (None if comparison is None else comparison.get("warnings")) or []
    out = [f"<p>{line}</p>" for line in lines]
    out += [f'<p class="warn">Warning: {_e(w)}</p>' for w in dict.fromkeys(warnings)]
    return "\n".join(out)


def _comparison_answer(c: ComparisonDoc) -> list[str]:
    """The answer for a baseline and a speculative run: measured against predicted, and the
    phase that moved most."""
    m = c.get("measured_speedup")
    if m is None:
        return []
    faster = "faster" if m >= 1 else "slower"
    holds = c.get("prediction_holds")
    lines = [
        f"Speculative decoding ran at <b>{_x(m)}</b> the baseline's speed per output token "
        f"({faster}). Amdahl's law predicted <b>{_x(c.get('predicted_speedup'))}</b> from the "
        f"baseline's bottleneck share p = {_num(c.get('p'), '.2f')} and r = "
        f"{_num(c.get('r'), '.2f')} (the accelerable part's speedup per token): the gap is "
        f"{_signed(c.get('gap'))}"
        + (
            ""
            if holds is None
            else (", within the 10% tolerance." if holds else ", outside the 10% tolerance.")
        )
    ]
    r = c.get("r")
    if r is not None and r < 1:
        lines.append(
            "r &lt; 1: draft + verify cost more per output token than the baseline's forward "
            "passes, so speculation slows the accelerable part down; no bottleneck share "
            "can turn that into a speedup."
        )
    moved = c.get("moved_phase")
    if moved:
        phases = c.get("phases")
        row = phases.get(moved) if phases else None
        contribution = row.get("gap_contribution") if row else None
        lines.append(
            f"Where prediction and measurement part: {_phase(moved)} moved the most per "
            f"output token; its gap contribution is {_signed(contribution)} of the "
            f"{_signed(c.get('gap'))} gap (the phase table below breaks the gap down)."
        )
    return lines


def _ab_answer(c: ABDoc) -> list[str]:
    """The answer for an A/B pair: how the window changed and which phase moved it."""
    w = c["window_ns"]
    lines = [
        f"Run B took <b>{_ms(w['b'])} ms</b> against A's {_ms(w['a'])} ms "
        f"({_signed(w.get('delta_pct'))})."
    ]
    moved = c.get("moved") or []
    if moved:
        listed = ", ".join(
            f"{_phase(m['phase'])} {m['delta_ns'] / 1e6:+.3f} ms ({_signed(m.get('delta_pct'))})"
            for m in moved[:3]
        )
        lines.append(
            f"What moved (by at least {_pct(c.get('move_threshold'), 0)} of A's window): {listed}."
        )
    else:
        lines.append(
            f"No phase moved by {_pct(c.get('move_threshold'), 0)} of A's window or more."
        )
    return lines


def _ab_section(c: ABDoc) -> str:
    """The A/B table: each phase's time and share in both runs, and the change."""
    rows = [
        [
            _phase(name),
            _ms(r["a_wall_ns"]),
            _pct(r["a_share"]),
            _ms(r["b_wall_ns"]),
            _pct(r["b_share"]),
            f"{r['delta_ns'] / 1e6:+.3f}",
            _signed(r.get("delta_pct")),
            _delta_ms(r["gpu_busy_delta_ns"], "+.3f"),
        ]
        for name, r in sorted(c["phases"].items(), key=lambda kv: -abs(kv[1]["delta_ns"]))
    ]
    head = ["phase", "A ms", "A share", "B ms", "B share", "delta ms", "delta",
            "GPU busy delta ms"]  # fmt: skip
    intro = (
        f"<p>A: {_e(c.get('a'))}; B: {_e(c.get('b'))}. Shares are of each run's own window; "
        "delta is B - A, in per cent of A's phase time.</p>"
    )
    return intro + _table(head, rows, left=1)


def _whatcut_section(whatcut: WhatCutDoc) -> str:
    candidates = whatcut.get("candidates") or []
    if not candidates:
        reason = whatcut.get("not_available") or "no non-accelerable time"
        return f'<p class="na">Not available: {_e(reason)}.</p>'
    if whatcut.get("mode") == "generic":
        rows = [
            [str(i), _phase(c["phase"]), _ms(c["wall_ns"]), _pct(c["share"]),
             _x(c.get("speedup_if_removed"))]
            for i, c in enumerate(candidates, 1)
        ]  # fmt: skip
        intro = (
            "<p>Phases of this generic run, largest first, with the run's speedup if the phase "
            "went to zero: W / (W - x), x the phase's exclusive time, W the window.</p>"
        )
        head = ["#", "phase", "time ms", "share of window", "speedup if removed"]
        return intro + _table(head, rows, left=2)
    rows = [
        [
            str(i),
            _phase(c["phase"]),
            _ms(c["wall_ns"]),
            _pct(c["share"]),
            _num(c["p_after"], ".3f"),
            _x(c.get("ceiling_after")),
            "n/a" if c.get("ceiling_gain") is None else f"+{c['ceiling_gain']:.2f}x",
            _x(c.get("combined_ceiling")),
        ]
        for i, c in enumerate(candidates, 1)
    ]
    intro = (
        f"<p>Non-accelerable phases of {_e('the baseline' if whatcut.get('mode') == 'baseline' else 'this run')}, "
        f"ranked by how far the Amdahl ceiling 1 / (1 - p) rises if the phase went to zero "
        f"(p = {_num(whatcut.get('p'), '.3f')}, ceiling {_x(whatcut.get('ceiling'))}; the window "
        f"shrinks by the phase's time, so p grows to p&#8242; = A / (W - x)). The last column is the "
        f"speedup over {_run_of(whatcut)} with the phase gone and the accelerable work free.</p>"
    )
    head = ["#", "phase", "time ms", "share of window", "p'", "ceiling after", "rise",
            "combined ceiling"]  # fmt: skip
    return intro + _table(head, rows, left=2)


def _compare_section(c: ComparisonDoc) -> str:
    summary = [
        ["p (baseline accelerable share)", _num(c.get("p"), ".4f")],
        ["r (accelerable speedup per token)", _num(c.get("r"), ".4f")],
        ["predicted speedup", _x(c.get("predicted_speedup"))],
        ["measured speedup", _x(c.get("measured_speedup"))],
        ["gap (measured / predicted - 1)",
         "n/a" if c.get("gap") is None else format(c["gap"], "+.2%")],
        ["Amdahl ceiling (baseline)", _x(c.get("amdahl_ceiling"))],
        ["draft cost ratio c", _num(c.get("draft_cost_ratio"), ".3f")],
        ["verify / forward time", _num(c.get("verify_to_forward_ratio"), ".3f")],
    ]  # fmt: skip
    rows, classes = [], []
    for name, r in (c.get("phases") or {}).items():
        rows.append(
            [
                _phase(name),
                _ms(r.get("baseline_ns_per_token"), 4),
                _ms(r.get("spec_ns_per_token"), 4),
                _delta_ms(r["delta_ns_per_token"], "+,.4f"),
                _pct(r.get("baseline_share")),
                _pct(r.get("spec_share")),
                "accelerable"
                if r.get("accelerable")
                else _signed(r["gap_contribution"], "+.2%"),
            ]
        )  # fmt: skip
        classes.append("accelerable" if r.get("accelerable") else "")
    head = ["phase", "baseline ms/token", "spec ms/token", "delta ms/token", "baseline share",
            "spec share", "gap contribution"]  # fmt: skip
    return (
        _table(["metric", "value"], summary, kind="kv")
        + "<h3>Per phase, per output token</h3>"
        + "<p>The gap contributions of the non-accelerable phases add up to the gap: a phase "
        "that got slower per token pulls the measurement below the prediction.</p>"
        + _table(head, rows, classes)
    )


def _analysis_block(label: str, a: AnalysisDoc) -> str:
    acc = a.get("acceptance")
    latency = a.get("latency")
    ttft = _p50(latency.get("ttft_ns") if latency else None)
    tpot = _p50(latency.get("tpot_ns") if latency else None)
    summary = [
        ["mode", _e(a.get("mode"))],
        ["window", _with_unit(_ms(a.get("window_ns")), "ms")],
        ["output tokens", _tokens(a)],
        ["decode steps", _num(a.get("steps"), ",")],
        ["requests", _num(a.get("requests"), ",")],
        ["time per output token", _with_unit(_ms(a.get("per_token_ns"), 4), "ms")],
        ["p (bottleneck share)", _num(a.get("p"), ".4f")],
        ["accelerable share of this run", _pct(a.get("accelerable_share"))],
        ["Amdahl ceiling", _x(a.get("amdahl_ceiling"))],
        ["sampler share", _pct(a.get("sampler_share"))],
        ["TTFT p50", _with_unit(_ms(ttft), "ms")],
        ["TPOT p50", _with_unit(_ms(tpot), "ms")],
    ]
    if acc:
        summary += [
            ["k (drafts per step)", _num(acc.get("k"), "d")],
            ["alpha (acceptance)", _num(acc.get("alpha"), ".3f")],
            ["mean accepted per step", _num(acc.get("mean_accepted"), ".3f")],
            ["tokens per step", _num(acc.get("tokens_per_step"), ".3f")],
            ["draft cost ratio c", _num(a.get("draft_cost_ratio"), ".3f")],
        ]
    summary += [[_e(key), _e(line)] for key, line in registered_lines(a)]
    rows, classes = [], []
    phases = a.get("phases") or {}
    ordered = sorted(phases.items(), key=lambda kv: -int(kv[1].get("wall_ns") or 0))
    for name, r in ordered:
        if not r.get("wall_ns") and not r.get("cpu_inclusive_ns"):
            continue
        gpu = r.get("gpu_busy_ns")
        rows.append(
            [_phase(name), _ms(r.get("wall_ns")), _pct(r.get("share")),
             "n/a" if gpu is None else _ms(gpu)]
        )  # fmt: skip
        classes.append("accelerable" if r.get("accelerable") else "")
    window = a.get("window_ns")
    rows.append(["total (the window)", _ms(window), _pct(1.0 if window else None), ""])
    classes.append("")
    return (
        f'<h3 id="run-{_e(label)}">{_e(label)}</h3>'
        + f'<p class="na">{_e(a.get("path") or "")}</p>'
        + '<div class="pair">'
        + _table(["metric", "value"], summary)
        + _table(["phase", "exclusive ms", "share of window", "GPU busy ms"], rows, classes)
        + "</div>"
        + _findings_block(a)
        + _step_tails_block(a)
        + _os_runtime_block(a)
        + _processes_block(a.get("ranks"), a.get("pid"))
    )


def _findings_block(a: AnalysisDoc, limit: int = 10) -> str:
    """The expert-rule findings inside the steps (metrics/findings.py), largest first."""
    findings = a.get("findings")
    found = (findings.get("findings") if findings else None) or []
    if not found:
        return ""
    rows = [
        [_e(f["kind"]), _phase(f["phase"]), _e(f["text"]), _ms(f["time_ns"]),
         _pct(f["share_of_phase"]), _x(f["speedup_if_removed"])]
        for f in found[:limit]
    ]  # fmt: skip
    return "<p>Findings inside the steps:</p>" + _table(
        ["finding", "phase", "what", "ms", "share of phase", "run speedup without it"],
        rows, left=3,
    )  # fmt: skip


def _step_tails_block(a: AnalysisDoc) -> str:
    """Per decode step: the step, the time per output token and each phase, with tails."""
    dist = a.get("step_distributions")
    if not dist:
        return ""
    rows = [["step", *_spread(dist["step_ns"])]]
    per_token = dist.get("ns_per_token")
    if per_token:
        rows.append(["per output token", *_spread(per_token)])
    rows += [[_phase(name), *_spread(s)] for name, s in dist["phases"].items()]
    return f"<p>Per decode step, ms ({_e(dist['of'])}):</p>" + _table(
        ["", "n", "p50", "p90", "p99", "max"], rows
    )


def _p50(spread: Spread | None) -> float | None:
    return spread.get("p50") if spread else None


def _spread(s: Spread) -> list[str]:
    return [_num(s["count"], ","), *(_ms(s[q]) for q in ("p50", "p90", "p99", "max"))]


def _os_runtime_block(a: AnalysisDoc, limit: int = 10) -> str:
    """A generic run's OS runtime calls by function (what its CPU threads waited on or did
    outside CUDA); empty for a model run (its JSON has them) or without any."""
    osrt = a.get("os_runtime")
    if a.get("mode") != "generic" or not osrt:
        return ""
    rows = [[_e(f["name"]), _num(f["calls"], ","), _ms(f["ns"])] for f in osrt["top"][:limit]]
    return (
        f'<p>OS runtime calls of process {_e(osrt["pid"])} in the window: '
        f'{_num(osrt["calls"], ",")} calls of {_num(osrt["functions"], ",")} functions, '
        f'{_e(_ms(osrt["ns"]))} ms ({_e(osrt["of"])}).</p>'
        + _table(["function", "calls", "summed ms"], rows, left=1)
    )


def _processes_block(doc: RanksDoc | None, shown_pid: object) -> str:
    """Every process of a multi-process run (``analyze``'s ``ranks``): its window, GPU busy,
    NCCL kernel time and step lag, the union window and the straggler; empty for one process."""
    if not doc:
        return ""
    rows = []
    for r in doc["ranks"]:
        top = max(
            ((n, p) for n, p in r["phases"].items() if n not in ("unannotated", "unattributed_gpu")),
            key=lambda item: int(item[1].get("wall_ns") or 0),
            default=None,
        )
        rows.append([
            _e(f"r{r['rank']}" + (" (shown above)" if r["pid"] == shown_pid else "")),
            _e(r.get("process") or "unnamed"),
            "n/a" if top is None else f"{_phase(top[0])} {_pct(top[1].get('share'))}",
            _e(r["pid"]),
            "n/a" if r.get("device") is None else _e(r["device"]),
            _ms(r["window_ns"]),
            "n/a" if r.get("gpu_union_ns") is None else _ms(r["gpu_union_ns"]),
            "n/a" if r.get("nccl_ns") is None else _ms(r["nccl_ns"]),
            _num(r.get("steps"), ","),
            "n/a" if r.get("median_lag_ns") is None else _ms(r["median_lag_ns"], 6),
        ])  # fmt: skip
    head = ["rank", "process", "largest phase (share of its window)", "pid", "device",
            "window ms", "GPU busy ms", "NCCL ms", "steps", "median step lag ms"]  # fmt: skip
    return (
        f'<h4>{_e(doc["processes"])} processes</h4>'
        + f"<p>Each process over its own window (its phases sum to it); ranks by device, then "
        f"pid. Whole run: {_e(_ms(doc['window_ns']))} ms, {_e(doc['window_of'])}. NCCL ms: "
        f"{_e(doc['nccl_of'])}.</p>"
        + _table(head, rows, left=3)
        + f'<p class="straggler">{_e(straggler_line(doc.get("straggler")))}</p>'
        + "".join(f'<p class="na">{_e(n)}</p>' for n in doc.get("notes") or ())
    )


def _not_available(
    runs: Sequence[tuple[str, AnalysisDoc]], comparison: ComparisonDoc | ABDoc | None
) -> str:
    rows = [
        [_e(label), _e(metric), f'<span class="text">{_e(reason)}</span>']
        for label, a in runs
        for metric, reason in (a.get("not_available") or {}).items()
        if metric not in unlisted(a)  # as the text: one process analysed is the report's view
    ]
    rows += [
        ["comparison", _e(metric), f'<span class="text">{_e(reason)}</span>']
        for metric, reason in (
            (None if comparison is None else comparison.get("not_available")) or {}
        ).items()
    ]
    if not rows:
        return "<p>Everything the report shows could be measured from these traces.</p>"
    return _table(["run", "metric", "why not"], rows, left=3)


def render_report_html(
    *,
    runs: Sequence[tuple[str, AnalysisDoc]],
    comparison: ComparisonDoc | ABDoc | None,
    whatcut: WhatCutDoc,
    figures: Sequence[ReportFigure],
    timeline_label: str | None = None,
    version: str = "",
) -> str:
    """The report page (a complete HTML document as one string)."""
    labels = [label for label, _ in runs]
    title = "specnsys report: " + " vs ".join(labels)
    figs = []
    for f in figures:
        caption = CAPTIONS.get(f.kind, "")
        if f.kind == "timeline" and timeline_label:
            caption += f" Window: {timeline_label}."
        figs.append(
            f'<figure id="fig-{_e(f.kind)}" data-kind="{_e(f.kind)}">'
            f"{inline_svg(f.svg, f'{f.kind}-', f.title)}"
            f"<figcaption>{_e(caption)}</figcaption></figure>"
        )
    nav = [("answer", "Answer"), ("figures", "Figures"), ("what-to-cut", "What to cut first")]
    if comparison is not None:
        nav.append(("compare", "Compare"))
    nav += [("analyze", "Analyze"), ("not-available", "Not available")]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        f"<header><h1>{_e(title)}</h1>",
        f"<p>{_e(', '.join(labels))}: phases, bottleneck share and speedup from Nsight Systems "
        "exports</p>",
        "<nav>" + "".join(f'<a href="#{k}">{_e(v)}</a>' for k, v in nav) + "</nav></header>",
        f'<section id="answer"><h2>Answer</h2>{_answer(runs, comparison, whatcut)}</section>',
        '<section id="figures"><h2>Figures</h2>' + "\n".join(figs) + "</section>",
        '<section id="what-to-cut"><h2>What to cut first</h2>'
        + _whatcut_section(whatcut)
        + "</section>",
    ]
    if comparison is not None and is_ab(comparison):
        parts.append(
            '<section id="compare"><h2>Compare: A/B, phase by phase</h2>'
            + _ab_section(comparison)
            + "</section>"
        )
    elif comparison is not None:
        parts.append(
            '<section id="compare"><h2>Compare: baseline vs speculative</h2>'
            + _compare_section(comparison)
            + "</section>"
        )
    parts.append(
        '<section id="analyze"><h2>Analyze</h2>'
        + "".join(_analysis_block(label, a) for label, a in runs)
        + "</section>"
    )
    parts.append(
        '<section id="not-available"><h2>Not available</h2>'
        + _not_available(runs, comparison)
        + "</section>"
    )
    parts.append(f"<footer>specnsys {_e(version)}</footer></main></body></html>")
    return "\n".join(parts) + "\n"
