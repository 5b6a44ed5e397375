"""``specnsys phases TRACE``: the exclusive phase breakdown (docs/design.md#attribution)."""

from __future__ import annotations

import argparse

from specnsys.attribution.rules import resolve_rules
from specnsys.attribution.timeline import exclusive_phase_times
from specnsys.errors import BadInputError
from specnsys.ingest import open_trace
from specnsys.ingest.quality import data_warnings_beside, warn_skipped
from specnsys.report.phases_text import render_phases_json, render_phases_text


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("phases", help="exclusive wall time per phase, summing to the window")
    p.add_argument("trace", help="nsys .sqlite export (or .nsys-rep with nsys on PATH)")
    p.add_argument("--pid", type=int, help="process to analyze (default: the annotated one)")
    p.add_argument(
        "--rules",
        metavar="RULES",
        help="which NVTX ranges are phases: a built-in set (specnsys, the default; nvtx: "
        "every range is its own phase) or a TOML name-mapping file",
    )
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    rules = resolve_rules(args.rules) if args.rules else None  # bad rules fail before ingest
    with open_trace(args.trace, use_cache=not args.no_cache) as trace:
        with data_warnings_beside(trace) as checked:
            breakdown = exclusive_phase_times(trace, pid=args.pid, rules=rules)
        caps = trace.summary.capabilities
        notes = checked()  # what was skipped, said after success (exit 2 = 1 line)
    if breakdown.window_ns <= 0:
        who = f"process {args.pid} has" if args.pid is not None else "the trace has"
        raise BadInputError(
            f"{args.trace}: nothing to attribute ({who} no phase ranges or GPU work)"
        )
    not_available = {
        key: caps[cap].reason
        for key, cap in (("gpu", "gpu_activity"), ("cuda_api", "cuda_api"))
        if not caps[cap].available
    }
    warn_skipped(notes, args.trace)
    render = render_phases_json if args.json else render_phases_text
    print(render(breakdown, not_available))
    return 0
