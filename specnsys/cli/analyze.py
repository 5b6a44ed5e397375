"""``specnsys analyze TRACE``: p, the Amdahl ceiling and every metric of one trace (issue 5)."""

from __future__ import annotations

import argparse
from typing import Any

from specnsys.errors import BadInputError
from specnsys.ingest import open_trace
from specnsys.ingest.quality import data_warnings_beside, warn_skipped


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze",
        help="bottleneck share p, Amdahl ceiling, acceptance, latency, bandwidth of one trace",
    )
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    add_rules_argument(p)
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def add_rules_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rules",
        metavar="FILE",
        help="TOML name-mapping rules for engines with their own NVTX names "
        "(or a built-in set: specnsys, nvtx)",
    )


def load_rules_arg(spec: str | None) -> Any:
    """Parse ``--rules`` before any trace is read, so a bad file fails fast (exit 2)."""
    if spec is None:
        return None
    try:
        from specnsys.attribution import resolve_rules
    except ImportError:  # an attribution layer without name-mapping rules
        raise BadInputError("--rules is not supported by this build of specnsys") from None
    return resolve_rules(spec)


def analyze_path(path: str, *, rules: Any = None, pid: int | None = None, use_cache: bool = True):
    """Open *path* and analyze it (the trace is closed again before returning); the
    data-quality checks run beside the analysis."""
    from specnsys.metrics import analyze_trace

    with open_trace(path, use_cache=use_cache) as trace, data_warnings_beside(trace) as notes:
        analysis = analyze_trace(trace, rules=rules, pid=pid)
    warn_skipped(notes(), path)  # malformed rows the analysis skipped
    return analysis


def run(args: argparse.Namespace) -> int:
    from specnsys.report.analyze_text import render_analysis_text, render_json

    rules = load_rules_arg(args.rules)
    analysis = analyze_path(args.trace, rules=rules, pid=args.pid, use_cache=not args.no_cache)
    doc = analysis.to_dict()
    print(render_json(doc) if args.json else render_analysis_text(doc))
    return 0
