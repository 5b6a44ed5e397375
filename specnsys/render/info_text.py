"""Render a :class:`~specnsys.ingest.summary.TraceSummary` for ``specnsys info`` (text or JSON).

Pure rendering: every number shown was computed at ingest.
"""

from __future__ import annotations

import json

from specnsys.ingest.model import MODEL
from specnsys.ingest.summary import TraceSummary


def _seconds(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e9:.6f} s"


def info_dict(summary: TraceSummary, *, path: str, cache: str) -> dict[str, object]:
    """The JSON document of ``specnsys info --json`` (stable keys for scripts)."""
    return {"path": path, "cache": cache, **summary.to_dict()}


def render_info_json(summary: TraceSummary, *, path: str, cache: str) -> str:
    return json.dumps(info_dict(summary, path=path, cache=cache), indent=2, default=str)


def render_info_text(summary: TraceSummary, *, path: str, cache: str) -> str:
    v = summary.version
    lines = [
        f"trace     {path}",
        f"producer  {v.label}" + (f", metadata in {v.meta_table}" if v.meta_table else ""),
        f"span      {_seconds(summary.span_start_ns)} to {_seconds(summary.span_end_ns)} "
        f"on the session clock ({_seconds(summary.span_ns)}; first to last event)",
        f"cache     {cache}",
        "",
        "model table     rows  source table",
    ]
    for table in MODEL:
        rows = summary.row_counts.get(table.name, 0)
        # a trace of another reader (no source tables) has no nsys table to name
        source = (table.counts_source or "") if summary.source_tables else ""
        if source and source not in summary.source_tables:
            source += " (absent)"
        if table.name == "nvtx" and summary.nvtx_kinds:
            kinds = ", ".join(f"{k} {n:,}" for k, n in summary.nvtx_kinds.items())
            source += f"  [{kinds}]"
        lines.append(f"{table.name:<12}{rows:>8,}  {source}")
    if summary.nvtx_domains:
        lines.append(f"NVTX domains: {', '.join(summary.nvtx_domains)}")
    lines += ["", "processes with events"]
    if summary.processes:
        lines.append(
            f"{'pid':>9}  {'threads':>7}  {'nvtx':>8}  {'cuda api':>8}  {'kernels':>8}  "
            f"{'os rt':>8}  {'samples':>8}  name"
        )
        for p in summary.processes:
            lines.append(
                f"{p['pid']:>9}  {p['threads']:>7,}  {p['nvtx_events']:>8,}  "
                f"{p['runtime_calls']:>8,}  {p['kernels']:>8,}  {p.get('osrt_calls', 0):>8,}  "
                f"{p.get('cpu_samples', 0):>8,}  {p['name'] or '?'}"
            )
    else:
        lines.append("  none (no NVTX, CUDA API, kernel, OS runtime or CPU sample rows)")
    lines += ["", "what can be analyzed"]
    for name, cap in summary.capabilities.items():
        mark = "yes" if cap.available else "no "
        lines.append(f"  {mark}  {name:<20} {cap.reason}")
    used = {t.counts_source for t in MODEL}
    others = [t for t in summary.source_tables if t not in used and not t.startswith("ENUM_")]
    if others:
        lines += ["", f"other tables in the export ({len(others)}): {', '.join(sorted(others))}"]
    return "\n".join(lines)
