"""Terminal and JSON renderers for ``analyze``, ``compare`` and ``whatif``.

Pure formatting of the dictionaries the metrics layer computes (``Analysis.to_dict()``,
``Comparison.to_dict()``, ``whatif()``): nothing here derives a number the JSON lacks.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from specnsys.metrics.registry import registered
from specnsys.metrics.structure import DRAFT_FORWARD_SOURCES
from specnsys.metrics.tokens import source_words
from specnsys.render.documents import (
    ABDoc,
    AnalysisDoc,
    ComparisonDoc,
    CutWhatIfDoc,
    Nesting,
    PhaseRow,
    RankRow,
    Spread,
    Straggler,
    ab_doc,
    analysis_doc,
    comparison_doc,
    cut_whatif_doc,
    leviathan_doc,
)
from specnsys.render.numbers import fixed_or_exponent
from specnsys.render.window_words import window_rule_words
from specnsys.results import JSONValue

__all__ = [
    "render_analysis_text",
    "render_comparisons_text",
    "render_json",
    "render_whatif_text",
]

MS = 1e6


#: A list of more objects than this is written one compact object per line (render_json).
ROWS_PER_LINE_FROM = 16


def render_json(doc: object) -> str:
    """Strict JSON (no NaN/Infinity: the metrics use null for what is not available), indented
    by two spaces, except that a long list of objects (the per-request rows, 91k on the
    largest bench export) has one compact object per line: easier to scan and grep, and
    faster to write, as Python's indenting encoder is pure Python and the compact one C
    (docs/performance.md#attribution-and-metrics)."""
    marker = f"\x00rows-{uuid.uuid4().hex}-"  # cannot occur in the data
    blocks: list[list[object]] = []

    def lift(value: object) -> object:
        if isinstance(value, dict):
            return {k: lift(v) for k, v in value.items()}
        if isinstance(value, list):
            if len(value) > ROWS_PER_LINE_FROM and all(isinstance(v, dict) for v in value):
                blocks.append(value)
                return f"{marker}{len(blocks) - 1}"
            return [lift(v) for v in value]
        return value

    text = json.dumps(lift(doc), indent=2, allow_nan=False)
    if not blocks:
        return text
    placeholder = re.compile(
        r'^( *)(.*)"' + re.escape(json.dumps(marker)[1:-1]) + r'(\d+)"', re.MULTILINE
    )

    compact = json.JSONEncoder(allow_nan=False)  # one encoder for every row

    def rows(match: re.Match[str]) -> str:
        pad, head, block = match.group(1), match.group(2), blocks[int(match.group(3))]
        lines = ",\n".join(f"{pad}  {compact.encode(row)}" for row in block)
        return f"{pad}{head}[\n{lines}\n{pad}]"

    return placeholder.sub(rows, text)


def _ms(ns: float | None, digits: int = 3) -> str:
    return "n/a" if ns is None else f"{ns / MS:.{digits}f}"


def _pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None else f"{x:.{digits}%}"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _name(path: str | None) -> str:
    return Path(path).name if path else "trace"


_CATCH_ALL = ("unannotated", "unattributed_gpu")  # time no range claims: not cut by name


def _not_available(na: dict[str, str], skip: tuple[str, ...] = ()) -> list[str]:
    rows = [(k, v) for k, v in na.items() if k not in skip]
    if not rows:
        return []
    return ["", "not available:", *(f"  {k}: {v}" for k, v in rows)]


def _warnings(warnings: list[str]) -> list[str]:
    return [f"warning: {w}" for w in warnings]


# ---------------------------------------------------------------------------------- analyze


def _headline(d: AnalysisDoc) -> list[str]:
    phases = d["phases"]
    window = d["window_ns"]
    acc_names = [p for p in d["accelerable_phases"] if _wall_ns(phases.get(p))]
    acc_text = " + ".join(f"{p} {_ms(phases[p]['wall_ns'])} ms" for p in acc_names) or "none"
    non_acc = d["non_accelerable"]
    rest = ", ".join(f"{r['phase']} {_pct(r['share'])}" for r in non_acc[:6])
    non_acc_share = 1.0 - d["accelerable_share"]
    lines = []
    if d["mode"] == "baseline":
        lines.append(
            f"bottleneck share p = {_pct(d['p'])}: the accelerable work ({acc_text}) of the "
            f"{_ms(window)} ms window"
        )
        ceiling = d["amdahl_ceiling"]
        lines.append(
            f"Amdahl ceiling {_x(ceiling)}: no draft model can speed this run up more than that"
            if ceiling is not None
            else "Amdahl ceiling: none (every nanosecond is accelerable)"
        )
    else:
        lines.append(
            f"{' + '.join(acc_names) or 'draft + verify'} take {_pct(d['accelerable_share'])} "
            "of this speculative run "
            f"({acc_text} of {_ms(window)} ms); p and the Amdahl ceiling come from a baseline "
            "run: specnsys compare BASELINE THIS"
        )
    if non_acc:
        lines.append(
            f"non-accelerable {_pct(non_acc_share)}, dominated by {non_acc[0]['phase']}: {rest}"
        )
    return lines


def _wall_ns(row: PhaseRow | None) -> int | None:
    return row.get("wall_ns") if row else None


def _short(name: str, limit: int = 40) -> str:
    """*name* cut to *limit* characters (engines' range texts can be whole argument lists)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _phase_table(d: AnalysisDoc, width: int = 16, limit: int | None = None) -> list[str]:
    """The phase table; *limit* cuts long phase names (a generic run's range texts)."""
    gpu = d["gpu"]
    head = f"{'phase':<{width}}{'wall ms':>11}{'share':>8}{'ranges':>8}{'ms/range':>10}"
    head += f"{'GPU busy ms':>13}" if gpu else ""
    lines = [head]
    rows = sorted(d["phases"].items(), key=lambda kv: -kv[1]["wall_ns"])
    for name, r in rows:
        if r["wall_ns"] == 0 and r["ranges"] == 0:
            continue
        per = r["wall_ns"] / r["ranges"] if r["ranges"] else None
        label = (name if limit is None else _short(name, limit)) + (" *" if r["accelerable"] else "")
        line = (
            f"{label:<{width}}{_ms(r['wall_ns']):>11}{_pct(r['share']):>8}{r['ranges']:>8,}"
            f"{_ms(per):>10}"
        )
        if gpu:
            line += f"{_ms(r['gpu_busy_ns']):>13}"
        lines.append(line)
    total = sum(r["wall_ns"] for r in d["phases"].values())
    share = total / d["window_ns"] if d["window_ns"] else 0.0
    lines.append(f"{'total':<{width}}{_ms(total):>11}{_pct(share):>8}")
    lines.append("* accelerable (speculative decoding replaces forward by draft + verify)")
    lines.extend(_reassigned(d.get("nesting")))
    return lines


def _reassigned(nesting: Nesting | None) -> list[str]:
    """One line naming the ranges whose nesting gave them another phase (a forward run by a
    prefill is prefill work, a draft model's own sampling is draft work)."""
    moved = (nesting or {}).get("reassigned") or {}
    if not moved:
        return []
    parts = []
    for move, n in sorted(moved.items(), key=lambda kv: (-kv[1], kv[0])):
        named, phase = move.split("->", 1)
        parts.append(f"{n:,} {named} ranges inside {phase} counted as {phase}")
    return ["nesting by role: " + "; ".join(parts)]


def _acceptance(d: AnalysisDoc) -> list[str]:
    a = d["acceptance"]
    if a is None:
        return []
    by_pos = " ".join(f"{x:.2f}" for x in a["by_position"])
    lines = [
        f"acceptance: alpha {a['alpha']:.3f} (pooled per-position survival), mean accepted "
        f"{a['mean_accepted']:.2f} of k = {a['k']}, tokens per step {a['tokens_per_step']:.2f} "
        f"(expected at alpha: {a['expected_tokens_per_step']:.2f}); "
        f"{a['sequence_steps']:,} sequence-steps",
        f"  accepted at position 1..k: {by_pos}; histogram of accepted 0..k: "
        f"{' '.join(str(v) for v in a['accepted_histogram'])}",
    ]
    c = d["draft_cost_ratio"]
    per = d["per_range_ns"]
    if c is not None:
        basis = DRAFT_FORWARD_SOURCES.get(d.get("draft_forwards_source") or "", "")
        per_step = d.get("draft_forwards_per_step")
        counted = f"; {per_step:.2f} draft forwards per step, from {basis}" if per_step else ""
        lines.append(
            f"draft cost ratio c = {_ratio(c)} (one draft forward {_ms(per['draft_forward_ns'])} ms "
            f"/ one verify {_ms(per['verify_ns'])} ms{counted})"
        )
    w = d.get("whatif")
    if w:
        verdict = (
            "speculation pays"
            if w["speculation_pays"]
            else "speculation cannot pay at this c (needs alpha > c)"
        )
        lines.append(
            f"Leviathan at alpha {w['alpha']:.3f}, c {w['c']:.3f}: expected "
            f"{_x(w['expected_speedup'])} of decode at k = {w['k']}; best k = {w['best_k']} "
            f"({_x(w['best_speedup'])}): {verdict}"
        )
    return lines


def _latency(d: AnalysisDoc) -> list[str]:
    lat = d["latency"]
    if not lat["latency_ns"]["count"]:
        return []
    cols = ("mean", "min", "p50", "p90", "p99", "max")
    lines = [f"{'per request (ms)':<18}{'n':>4}" + "".join(f"{c:>10}" for c in cols)]
    for dist, label in (
        (lat["ttft_ns"], "TTFT"), (lat["tpot_ns"], "TPOT"), (lat["latency_ns"], "end to end"),
    ):  # fmt: skip
        if not dist["count"]:
            continue
        lines.append(
            f"{label:<18}{dist['count']:>4}" + "".join(f"{_ms(v):>10}" for v in _values(dist, cols))
        )
    return lines


def _overhead(d: AnalysisDoc) -> list[str]:
    """The profiler's overhead per output token against the unprofiled control runs."""
    o = d.get("profiler_overhead")
    if not o or o.get("overhead") is None:
        return []
    return [
        f"profiler overhead {_signed_pct(o['overhead'])} per output token: profiled "
        f"{_ms(o['profiled_per_token_ns'])} ms, unprofiled {_ms(o['unprofiled_per_token_ns'])} ms "
        f"(median of {o['runs']} runs without nsys, {_ms(o['unprofiled_min_ns'])} to "
        f"{_ms(o['unprofiled_max_ns'])} ms)"
    ]


def _findings(d: AnalysisDoc, limit: int = 5) -> list[str]:
    """The expert-rule findings, largest first, with what each would give if removed."""
    f = d.get("findings")
    if not f or not f["findings"]:
        return []
    lines = ["findings inside the steps (time; share of its phase; run speedup without it):"]
    for item in f["findings"][:limit]:
        lines.append(
            f"  {_ms(item['time_ns']):>10} ms {_pct(item['share_of_phase']):>7}  "
            f"{_x(_finite(item['speedup_if_removed']))}  {item['text']}"
        )
    if len(f["findings"]) > limit:
        lines.append(f"  ({len(f['findings']) - limit} more: --json lists all)")
    return lines


def _step_tails(d: AnalysisDoc) -> list[str]:
    """Per decode step: the step, the time per output token and each phase, with their tails."""
    dist = d.get("step_distributions")
    if not dist:
        return []
    cols = ("mean", "p50", "p90", "p99", "max")
    lines = [f"{'per decode step (ms)':<22}{'n':>5}" + "".join(f"{c:>10}" for c in cols)]
    rows = [("step", dist["step_ns"])]
    per_token = dist.get("ns_per_token")
    if per_token:
        rows.append(("per output token", per_token))
    rows += [(f"  {name}", spread) for name, spread in dist["phases"].items()]
    for label, s in rows:
        lines.append(
            f"{label:<22}{s['count']:>5}" + "".join(f"{_ms(v):>10}" for v in _values(s, cols))
        )
    lines.append(f"  ({dist['of']}; per output token: step time x batch / tokens)")
    return lines


def _bandwidth(d: AnalysisDoc) -> list[str]:
    bw = d["bandwidth"]
    if not bw:
        return []
    lines = [f"memory bandwidth ({bw['source']}):"]
    for phase, r in bw["by_phase"].items():
        if bw["source"] == "gpu_metrics":
            lines.append(
                f"  {phase:<14} mean DRAM {r['mean_pct']:.1f}% of peak; "
                f"{_pct(r['fraction_above_threshold'])} of samples >= {bw['threshold_pct']:.0f}%"
            )
        else:
            rate = r["bytes_per_s"]
            lines.append(
                f"  {phase:<14} {r['bytes'] / 1e9:.3f} GB in {_ms(r['gpu_busy_ns'])} ms GPU busy"
                + (
                    f" = {rate / 1e9:.1f} GB/s, {_pct(r['fraction_of_peak'])} of peak"
                    if rate is not None
                    else ""
                )
            )
    return lines


def _memory(d: AnalysisDoc) -> list[str]:
    mem = d["device_memory"]
    if not mem:
        return []
    lines = [f"peak device memory ({mem['source']}):"]
    for phase, r in mem["by_phase"].items():
        lines.append(f"  {phase:<14} peak {r['peak_bytes'] / 2**20:,.1f} MiB over {r['ranges']}")
    return lines


#: Phases shown per rank in the text (the JSON lists every phase).
RANK_PHASE_ROWS = 12


def _rank_label(r: RankRow) -> str:
    return f"r{r['rank']} pid {r['pid']}"


def _lag(ns: float | None) -> str:
    """A lag in the unit that shows it: ms, us or ns (steps of a lockstep run differ by
    microseconds, which ms with three digits would print as 0.000)."""
    if ns is None:
        return "n/a"
    if abs(ns) >= MS:
        return f"{ns / MS:.3f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:g} ns"


def straggler_line(s: Straggler | None) -> str:
    """One sentence on the straggler of a ``ranks`` document."""
    if s is None:
        return "straggler: none"
    who = f"rank {s['rank']} (pid {s['pid']}, {s['process'] or 'unnamed'})"
    share = s.get("lag_share")
    head = (
        f"straggler: {who}"
        if s.get("stands_out", True)
        else f"straggler: none stands out (lag under 1 %); last is {who}"
    )
    if s["basis"] == "steps":
        pct = f" ({share:.2%} of its time per step)" if share is not None else ""
        return (
            f"{head}: its {s['step_phase']} steps end a median "
            f"{_lag(s['median_lag_ns'])} (max {_lag(s['max_lag_ns'])}) after the earliest "
            f"rank's{pct}, over {s['matched_steps']:,} steps matched by index"
        )
    pct = f"{share:.2%} of the union window; " if share is not None else ""
    return (
        f"{head}: its window ends {_lag(s['window_end_lag_ns'])} after the earliest "
        f"rank's ({pct}some rank has no step ranges to match)"
    )


def _why_this_process(ranks: list[RankRow]) -> str:
    """Why the default process is the one analysed (docs/design.md "Scope"): the rule that
    picked it, named by whether any process has phase ranges."""
    if any(row["ranges"] for r in ranks for row in r["phases"].values()):
        return "the process with the most phase ranges, ties to the lowest pid"
    return "no process has phase ranges: the one with the most GPU ops"


def _ranks(d: AnalysisDoc) -> list[str]:
    """Per process: window, phases (top rows by total wall time), NCCL, and the straggler."""
    doc = d.get("ranks")
    if not doc:
        return []
    ranks = doc["ranks"]
    totals: dict[str, int] = {}
    for r in ranks:
        for name, row in r["phases"].items():
            totals[name] = totals.get(name, 0) + row["wall_ns"]
    names = sorted(totals, key=lambda n: (-totals[n], n))
    width = max(16, *(min(len(n), 30) + 2 for n in names[:RANK_PHASE_ROWS]))
    col = max(14, *(len(_rank_label(r)) + 2 for r in ranks))
    lines = [
        f"{doc['processes']} processes ran GPU work or phase ranges; the figures above are "
        f"process {d['pid']}'s ({_why_this_process(ranks)}; --pid PID analyzes another, "
        "phases --all-processes shows each in full). Each process over its own window (wall "
        "ms; its phases sum to "
        "it), ranks by device then pid (the trace holds no NCCL rank); NCCL ms: NCCL kernel "
        "time (concurrent kernels each count):",
        f"{'':<{width}}" + "".join(f"{_rank_label(r):>{col}}" for r in ranks),
        f"{'process':<{width}}" + "".join(f"{(r['process'] or '-')[: col - 2]:>{col}}" for r in ranks),
        f"{'device':<{width}}"
        + "".join(f"{'-' if r['device'] is None else r['device']:>{col}}" for r in ranks),
        f"{'window ms':<{width}}" + "".join(f"{_ms(r['window_ns']):>{col}}" for r in ranks),
    ]
    for name in names[:RANK_PHASE_ROWS]:
        label = name if len(name) <= 30 else name[:29] + "…"
        cells = "".join(
            f"{_ms(r['phases'][name]['wall_ns']) if name in r['phases'] else '-':>{col}}"
            for r in ranks
        )
        lines.append(f"{label:<{width}}{cells}")
    if len(names) > RANK_PHASE_ROWS:
        lines.append(f"({len(names) - RANK_PHASE_ROWS} more phases: --json lists all)")
    lines.append(f"{'NCCL ms':<{width}}" + "".join(f"{_ms(r['nccl_ns']):>{col}}" for r in ranks))
    lines.append(
        f"{'steps':<{width}}" + "".join(f"{r['steps']:>{col},}" for r in ranks)
    )
    lines.append(
        f"all processes: {_ms(doc['window_ns'])} ms, from the earliest window start to the "
        "latest window end"
    )
    lines.append(straggler_line(doc["straggler"]))
    lines += [f"note: {n}" for n in doc["notes"]]
    return lines


def unlisted(d: AnalysisDoc) -> tuple[str, ...]:
    """Keys of ``not_available`` that a reader of the text (or the report) is not missing:
    ``ranks`` (one process analysed is the single-process view: nothing to say where nothing
    changed) and ``os_runtime``, except for a generic run without GPU work, where the OS
    runtime calls are what the CPU did (a model run's text stays on its phases; the JSON has
    them and their reason)."""
    if d.get("mode") == "generic" and not d.get("gpu"):
        return ("ranks",)
    return ("ranks", "os_runtime")


def _window_basis(d: AnalysisDoc) -> str:
    """What set the window, in words (``window_source``; inferred for an older result), and
    the ``--window`` rule with what it dropped."""
    return _default_window_basis(d) + window_rule_words(
        d.get("window_rule"), d.get("window_dropped")
    )


def _default_window_basis(d: AnalysisDoc) -> str:
    source = d.get("window_source")
    if source == "requests" or (source is None and d["requests"]):
        return "first request start to last request end"
    ranged = any(row.get("ranges") for row in d["phases"].values())
    if source == "cuda_api" or (source is None and not ranged and not d["gpu"]):
        return "no ranges and no GPU work: the span of the process's CUDA API calls"
    if source == "os_runtime":
        return "no ranges, GPU work or CUDA API calls: the span of the process's OS runtime calls"
    if source == "cpu_samples":
        return (
            "no ranges, GPU work, CUDA API or OS runtime calls: the process's first to last "
            "CPU sample"
        )
    return "no request ranges: the span of the process's ranges and GPU work"


def _os_runtime(d: AnalysisDoc, limit: int = 5) -> list[str]:
    """The process's largest OS runtime functions: what its CPU threads waited on or did."""
    osrt = d.get("os_runtime")
    if not osrt:
        return []
    threads = f"{osrt['threads']:,} thread" + ("s" if osrt["threads"] != 1 else "")
    lines = [
        f"OS runtime calls: {osrt['calls']:,} calls of {osrt['functions']:,} functions on "
        f"{threads}, {_ms(osrt['ns'])} ms",
        f"  ({osrt['of']}):",
    ]
    for f in osrt["top"][:limit]:
        lines.append(f"  {_ms(f['ns']):>10} ms  x{f['calls']:<7,} {_short(f['name'], 60)}")
    if osrt["functions"] > limit:
        lines.append(f"  ({osrt['functions'] - limit} more functions: --json lists the top 10)")
    return lines


def _generic_headline(d: AnalysisDoc) -> list[str]:
    """A generic run's answer: where the time went, how busy the GPU was, what to cut."""
    from specnsys.metrics.whatcut import what_to_cut

    named = [c for c in what_to_cut(d).candidates if c.phase not in _CATCH_ALL]
    lines = [
        "no forward, draft or verify phase: a generic run (phases, GPU time and kernels below; "
        "the speculative-decoding numbers need those phases)"
    ]
    gt = d.get("gpu_time")
    if gt:
        lines.append(
            f"GPU busy {_ms(gt['busy_ns'])} ms ({_pct(gt['busy_share'])} of the window), "
            f"idle {_ms(gt['idle_ns'])} ms ({_pct(gt['idle_share'])})"
        )
    if named:
        cuts = ", ".join(
            f"{_short(c.phase)} {_pct(c.share)} -> {_x(_finite(c.speedup_if_removed))}"
            for c in named[:3]
        )
        lines.append(f"what to cut first (share of the window -> run speedup without it): {cuts}")
    return lines


def _finite(x: float | None) -> float | None:
    return x if x != float("inf") else None


def _values(s: Spread, keys: Sequence[str]) -> list[float | None]:
    """The statistics *keys* (``mean``, ``min``, ``p50``, ...) of the distribution *s*."""
    every = {"mean": s["mean"], "min": s["min"], "p50": s["p50"], "p90": s["p90"],
             "p99": s["p99"], "max": s["max"]}  # fmt: skip
    return [every[key] for key in keys]


def _number(value: object) -> float | None:
    """*value* when it is a number (a cut row's figures), else None (JSON null)."""
    return value if isinstance(value, int | float) else None


def _top_kernels(d: AnalysisDoc, max_phases: int = 4, per_phase: int = 3) -> list[str]:
    tk = d.get("top_kernels")
    if not tk:
        return []
    lines = ["top kernels per phase (GPU time; share of the phase's summed kernel time):"]
    for phase, row in list(tk["by_phase"].items())[:max_phases]:
        kinds = ", ".join(
            f"{c['category']} {_pct(c['share'])}" for c in row.get("categories", [])[:3]
        )
        lines.append(
            f"  {_short(phase)}: {row['kernels']:,} kernels, {_ms(row['kernel_ns'])} ms"
            + (f" ({kinds})" if kinds else "")
        )
        for k in row["top"][:per_phase]:
            name = _short(k["name"], 60)
            lines.append(
                f"    {_ms(k['time_ns']):>10} ms {_pct(k['share']):>6}  x{k['count']:<6,} {name}"
            )
    if len(tk["by_phase"]) > max_phases:
        lines.append(f"  ({len(tk['by_phase']) - max_phases} more phases: --json lists all)")
    return lines


def registered_lines(d: Mapping[str, object]) -> list[tuple[str, str]]:
    """``(key, line)`` per registered metric (:mod:`specnsys.metrics.registry`) the document
    has a value of, the line as the metric writes it; a null one is listed under "not
    available" (the text and the HTML report both show these)."""
    lines = []
    for metric in registered():
        payload = d.get(metric.key)
        line = None if payload is None else metric.text(cast(JSONValue, payload))
        if line is not None:
            lines.append((metric.key, line))
    return lines


def _registered_metrics(d: Mapping[str, object]) -> list[str]:
    return [line for _key, line in registered_lines(d)]


def render_analysis_text(doc: Mapping[str, object]) -> str:
    """The ``analyze`` report of an ``analyze --json`` document: the answer first, then the
    evidence, then what is missing."""
    d = analysis_doc(doc)
    if d["mode"] == "generic":
        return _render_generic_text(d)
    mode = "speculative run" if d["mode"] == "spec" else "baseline run"
    k = f" (k = {d['k']})" if d.get("k") else ""
    tokens = (
        f"{d['tokens']:,} output tokens ({source_words(d.get('tokens_source'))})"
        if d["tokens"] is not None
        else "tokens n/a"
    )
    lines = [
        f"{_name(d['path'])}: {mode}{k}, process {d['pid']}, phases by rules '{d['rules']}'",
        f"window {_ms(d['window_ns'])} ms ({_window_basis(d)}): {tokens}, "
        f"{d['steps']:,} decode steps, {d['requests']:,} requests",
        "",
        *_headline(d),
        f"per output token {_ms(d['per_token_ns'])}"
        + (" ms" if d["per_token_ns"] is not None else "")
        + f"; sampler share {_pct(d['sampler_share'])}",
        "",
        *_phase_table(d),
    ]
    for block in (
        _ranks(d), _overhead(d), _acceptance(d), _findings(d), _top_kernels(d), _latency(d),
        _step_tails(d), _bandwidth(d), _memory(d), _registered_metrics(d),
    ):
        if block:
            lines += ["", *block]
    lines += _not_available(d["not_available"], skip=unlisted(d))
    if d["warnings"]:
        lines += ["", *_warnings(d["warnings"])]
    return "\n".join(lines)


def _render_generic_text(d: AnalysisDoc) -> str:
    lines = [
        f"{_name(d['path'])}: generic run, process {d['pid']}, phases by rules '{d['rules']}'",
        f"window {_ms(d['window_ns'])} ms ({_window_basis(d)})",
        "",
        *_generic_headline(d),
        "",
        # no accelerable phase: the table's footnote about them does not apply
        *_phase_table(d, max([16, *(min(len(p), 40) + 2 for p in d["phases"])]), 40)[:-1],
    ]
    blocks = (
        _ranks(d), _findings(d), _top_kernels(d), _os_runtime(d), _latency(d), _bandwidth(d),
        _memory(d), _registered_metrics(d),
    )
    for block in blocks:
        if block:
            lines += ["", *block]
    lines += _not_available(d["not_available"], skip=unlisted(d))
    if d["warnings"]:
        lines += ["", *_warnings(d["warnings"])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- compare


def _ab_detail(c: ABDoc, max_rows: int = 30) -> list[str]:
    """An A/B diff: what moved first, then every phase of either run."""
    w = c["window_ns"]
    lines = [
        f"{_name(c['a'])} (A, {c['modes']['a']}) vs {_name(c['b'])} (B, {c['modes']['b']}): "
        "phase by phase",
        f"window {_ms(w['a'])} ms -> {_ms(w['b'])} ms ({_signed_ms(w['delta_ns'])}, "
        f"{_signed_pct(w['delta_pct'])})",
    ]
    g = c["gpu_busy_ns"]
    if g is not None:
        lines.append(
            f"GPU busy {_ms(g['a'])} ms -> {_ms(g['b'])} ms ({_signed_ms(g['delta_ns'])}, "
            f"{_signed_pct(g['delta_pct'])})"
        )
    if c["moved"]:
        moved = ", ".join(
            f"{_short(m['phase'])} {_signed_ms(m['delta_ns'])} ({_signed_pct(m['delta_pct'])})"
            for m in c["moved"][:5]
        )
        lines.append(f"moved (|change| >= {c['move_threshold']:.0%} of A's window): {moved}")
    else:
        lines.append(f"no phase moved by {c['move_threshold']:.0%} of A's window or more")
    lines += [
        "",
        f"{'phase':<24}{'A ms':>11}{'A share':>9}{'B ms':>11}{'B share':>9}{'delta ms':>11}"
        f"{'delta':>9}{'GPU delta ms':>14}",
    ]
    rows = sorted(c["phases"].items(), key=lambda kv: (-abs(kv[1]["delta_ns"]), kv[0]))
    if len(rows) > max_rows:
        lines.append(f"({max_rows} largest changes of {len(rows)} phases: --json lists all)")
    for name, r in rows[:max_rows]:
        label = _short(name, 23)
        gd = r["gpu_busy_delta_ns"]
        lines.append(
            f"{label:<24}{_ms(r['a_wall_ns']):>11}{_pct(r['a_share']):>9}"
            f"{_ms(r['b_wall_ns']):>11}{_pct(r['b_share']):>9}{_signed_ms(r['delta_ns']):>11}"
            f"{_signed_pct(r['delta_pct']):>9}{'n/a' if gd is None else _signed_ms(gd):>14}"
        )
    lines.append("shares: of each run's own window; delta: B - A, per cent of A's phase time")
    lines += _not_available(c["not_available"])
    if c["warnings"]:
        lines += ["", *_warnings(c["warnings"])]
    return lines


def _signed_ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:+.3f}"



def _comparison_detail(c: ComparisonDoc) -> list[str]:
    k = f" (k = {c['k']})" if c.get("k") else ""
    lines = [
        f"{_name(c['baseline'])} (baseline) vs {_name(c['spec'])}{k}",
        f"p = {_pct(c['p'])}   r = {_num(c['r'])}   predicted {_x(c['predicted_speedup'])}   "
        f"measured {_x(c['measured_speedup'])}   gap {_signed_pct(c['gap'])}   "
        f"(Amdahl ceiling {_x(c['amdahl_ceiling'])})",
    ]
    u = c.get("unprofiled")
    if u and u.get("measured_speedup") is not None:
        lines.append(
            f"unprofiled (profile --control): measured {_x(u['measured_speedup'])} from "
            f"{_ms(u['baseline_per_token_ns'])} -> {_ms(u['spec_per_token_ns'])} ms per token "
            f"({u['runs']['baseline']} + {u['runs']['spec']} runs without nsys); profiled "
            f"{_x(u['profiled_measured_speedup'])}"
        )
    rules = c.get("window_rule") or {}
    if any(rule != "requests" for rule in rules.values()):
        lines.append(
            f"windows: --window {rules.get('baseline')} (baseline), {rules.get('spec')} (spec)"
        )
    if c["gap"] is not None:
        if c["prediction_holds"]:
            lines.append(
                f"the Amdahl prediction holds within {c['tolerance']:.0%}: non-accelerable time "
                "per token stayed put"
                + (f" (largest move: {c['moved_phase']})" if c["moved_phase"] else "")
            )
        else:
            moved = c["moved_phase"] or "no single phase"
            lines.append(
                f"the prediction misses by more than {c['tolerance']:.0%}: non-accelerable time "
                f"moved, most of all in {moved}"
            )
    lines += [f"assumption: {text}" for text in c.get("assumptions", [])]
    nt = c["non_accelerable_ns_per_token"]
    lines.append(
        f"non-accelerable per token: baseline {_ms(nt['baseline'])} ms, "
        f"speculative {_ms(nt['spec'])} ms"
    )
    lines.append(
        f"output tokens: baseline {_tokens(c, 'baseline')}, speculative {_tokens(c, 'spec')}"
    )
    lines += ["", *_comparison_phase_rows(c)]
    extra = _comparison_costs(c)
    if extra:
        lines += ["", *extra]
    lines += _not_available(c["not_available"])
    if c["warnings"]:
        lines += ["", *_warnings(c["warnings"])]
    return lines


def _comparison_phase_rows(c: ComparisonDoc) -> list[str]:
    """The per-phase table of a comparison: ms per token on each side, the delta and the
    share of the gap each phase explains, non-accelerable phases first."""
    lines = [f"{'phase':<16}{'base ms/tok':>12}{'spec ms/tok':>12}{'delta':>10}{'gap share':>11}"]
    rows = sorted(
        c["phases"].items(),
        key=lambda kv: (kv[1]["accelerable"], -abs(kv[1]["delta_ns_per_token"] or 0.0)),
    )
    for name, r in rows:
        label = name + (" *" if r["accelerable"] else "")
        contrib = r["gap_contribution"]
        lines.append(
            f"{label:<16}{_ms(r['baseline_ns_per_token'], 4):>12}"
            f"{_ms(r['spec_ns_per_token'], 4):>12}{_ms(r['delta_ns_per_token'], 4):>10}"
            f"{'' if contrib is None else _signed_pct(contrib):>11}"
        )
    lines.append(
        "* accelerable; gap share: the part of the gap each phase explains (they sum to it)"
    )
    return lines


def _ratio(x: float) -> str:
    """A cost ratio to three decimals (exponent form from a million up)."""
    return fixed_or_exponent(x, ".3f")


def _comparison_costs(c: ComparisonDoc) -> list[str]:
    """c, verify over a baseline forward (with the 1.3 warning), Leviathan's what-if and the
    verify memory peak, where the comparison has them."""
    extra = []
    if c["draft_cost_ratio"] is not None:
        extra.append(f"draft cost ratio c = {_ratio(c['draft_cost_ratio'])} (vs a baseline forward)")
    if c["verify_to_forward_ratio"] is not None:
        flag = (
            "  WARNING: > 1.3, verification is not almost free" if c["verify_ratio_warning"] else ""
        )
        extra.append(f"verify / baseline forward = {c['verify_to_forward_ratio']:.2f}{flag}")
    lev = c.get("leviathan")
    if lev:
        extra.append(
            f"Leviathan at alpha {lev['alpha']:.3f}, k {lev['k']}, c {lev['c']:.3f}: decode "
            f"{_x(lev['expected_speedup'])} -> end to end {_x(lev['e2e_speedup'])}; best k = "
            f"{lev['best_k']} ({_x(lev['best_speedup'])} decode, "
            f"{_x(lev['best_e2e_speedup'])} end to end)"
        )
    mem = c.get("device_memory")
    if mem:
        extra.append(
            f"peak device memory: verify {mem['verify_peak_bytes'] / 2**20:,.1f} MiB vs baseline "
            f"{mem['baseline_phase']} {mem['baseline_peak_bytes'] / 2**20:,.1f} MiB"
        )
    return extra


def _tokens(c: ComparisonDoc, run: str) -> str:
    """One run's output tokens in a comparison, with the source of the count."""
    n = c["tokens"][run]
    source = (c.get("tokens_source") or {}).get(run)
    return "n/a" if n is None else f"{n:,} ({source_words(source)})"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _signed_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def render_comparisons_text(docs: Sequence[Mapping[str, object]]) -> str:
    """One comparison in detail; several as one sweep table followed by each in detail. A/B
    diffs (``kind: ab``) are each shown in detail, one after the other."""
    ab = [ab_doc(c) for c in docs if c.get("kind") == "ab"]
    if ab and len(ab) == len(docs):
        return "\n\n".join("\n".join(_ab_detail(c)) for c in ab)
    comparisons = [comparison_doc(c) for c in docs]
    if len(comparisons) == 1:
        return "\n".join(_comparison_detail(comparisons[0]))
    lines = [
        f"{'speculative run':<28}{'baseline':<24}{'k':>3}{'p':>8}{'r':>7}{'predicted':>11}"
        f"{'measured':>10}{'gap':>8}  moved",
    ]
    for c in comparisons:
        lines.append(
            f"{_name(c['spec']):<28}{_name(c['baseline']):<24}{c['k'] or '-':>3}"
            f"{_pct(c['p']):>8}{_num(c['r']):>7}{_x(c['predicted_speedup']):>11}"
            f"{_x(c['measured_speedup']):>10}{_signed_pct(c['gap']):>8}  "
            f"{c['moved_phase'] or '-'}"
        )
    for c in comparisons:
        lines += ["", *_comparison_detail(c)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- whatif


def render_whatif_text(doc: Mapping[str, object], sources: dict[str, str] | None = None) -> str:
    """Leviathan's expected speedup by k, the best k, and the Amdahl-limited end-to-end result."""
    if doc.get("kind") == "cut":
        return _render_cut_text(cut_whatif_doc(doc))
    w = leviathan_doc(doc)
    src = sources or {}

    def origin(key: str) -> str:
        return f" ({src[key]})" if key in src else ""

    lines = [
        f"alpha = {w['alpha']:.3f}{origin('alpha')}, c = {_ratio(w['c'])}{origin('c')}"
        + (f", k = {w['k']}{origin('k')}" if w["k"] is not None else "")
        + (f", p = {w['p']:.1%}{origin('p')}" if w["p"] is not None else ""),
    ]
    if w["expected_speedup"] is not None:
        lines.append(
            f"expected decode speedup at k = {w['k']}: {_x(w['expected_speedup'])} "
            f"(tau = {w['tau']:.2f} tokens per step)"
            + (f"; end to end {_x(w['e2e_speedup'])}" if w["e2e_speedup"] is not None else "")
        )
    limit = (
        " (the search limit: larger k may be better still)" if w["best_k_at_search_limit"] else ""
    )
    lines.append(
        f"best k = {w['best_k']}{limit}: {_x(w['best_speedup'])} decode"
        + (f", {_x(w['best_e2e_speedup'])} end to end" if w["best_e2e_speedup"] is not None else "")
    )
    if not w["speculation_pays"]:
        lines.append("speculation cannot pay here: the best k is still slower (needs alpha > c)")
    if w["amdahl_ceiling"] is not None:
        lines.append(f"Amdahl ceiling at p = {w['p']:.1%}: {_x(w['amdahl_ceiling'])}")
    else:
        lines.append("end to end: needs p (a baseline trace or --p)")
    lines += [
        "",
        f"{'k':>3}{'tau':>8}{'decode':>9}" + (f"{'e2e':>9}" if w["p"] is not None else ""),
    ]
    for row in w["by_k"]:
        mark = " <- best" if row["k"] == w["best_k"] else ""
        lines.append(
            f"{row['k']:>3}{row['tau']:>8.2f}{_x(row['speedup']):>9}"
            + (f"{_x(row['e2e_speedup']):>9}" if w["p"] is not None else "")
            + mark
        )
    return "\n".join(lines)


def _render_cut_text(w: CutWhatIfDoc) -> str:
    """``whatif`` on a generic run: the run's speedup if each phase were cut."""
    keys = [f"speedup_if_{round(f * 100)}pct_cut" for f in w["fractions"]]
    heads = [f"{round(f * 100)}% cut" for f in w["fractions"]]
    width = max([16, *(min(len(str(r["phase"])), 40) + 2 for r in w["cuts"])])
    lines = [
        f"{_name(w['path'])}: generic run, window {_ms(w['window_ns'])} ms; "
        "run speedup if one phase got shorter (W / (W - cut))",
        "",
        f"{'phase':<{width}}{'wall ms':>11}{'share':>8}" + "".join(f"{h:>10}" for h in heads),
    ]
    for r in w["cuts"][:30]:
        lines.append(
            f"{_short(str(r['phase'])):<{width}}{_ms(_number(r['wall_ns'])):>11}"
            f"{_pct(_number(r['share'])):>8}" + "".join(f"{_x(_number(r[k])):>10}" for k in keys)
        )
    lines += _not_available(w["not_available"])
    return "\n".join(lines)
